// Weight layouts made once, when a model's weights are bound: an f32 [K, N] matrix (or the fp16
// scales of a quantized one) into the column panels that `transformer.packed_matmul` reads, and
// the tied embedding transposed for the LM head. Low-precision codes use WeightFormats.h's lane layouts instead.
#ifndef GPT_CC_KERNELS_PANELPACKING_H
#define GPT_CC_KERNELS_PANELPACKING_H

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace gpt::kernels {

struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};

/// Storage aligned to 64 bytes (a cache line, one zmm load), released with free().
template <typename T> using AlignedArray = std::unique_ptr<T[], FreeDeleter>;
using AlignedFloats = AlignedArray<float>;

/// `bytes` uninitialized bytes aligned to 64 bytes; throws std::bad_alloc when out of memory.
void *allocateAlignedBytes(size_t bytes);

/// `count` uninitialized elements aligned to 64 bytes; throws std::bad_alloc when out of memory.
template <typename T> AlignedArray<T> allocateAlignedArray(int64_t count) {
  return AlignedArray<T>(static_cast<T *>(allocateAlignedBytes(static_cast<size_t>(count) * sizeof(T))));
}
inline AlignedFloats allocateAligned(int64_t count) { return allocateAlignedArray<float>(count); }

/// Writes `packed[j / width][k][j % width] = matrix[k][j]` for a row-major [rows, cols] `matrix`
/// (`cols` a multiple of `width`): each panel of `width` columns becomes one contiguous
/// [rows, width] block, so a register tile of those columns walks memory front to back.
/// Panels are split over `threads` threads (ParallelFor.h), here and in transposePadded.
void packPanels(const float *matrix, int64_t rows, int64_t cols, int64_t width, float *packed, int64_t threads = 1);
/// The same for the f16 scale bits of a block-quantized weight ([K/32, N] into [N/P, K/32, P]);
/// its codes go into lane layouts instead (WeightFormats.h).
void packPanels(const uint16_t *matrix, int64_t rows, int64_t cols, int64_t width, uint16_t *packed,
                int64_t threads = 1);

/// The inverse of packPanels: `matrix[k][j] = packed[j / width][k][j % width]`.
void unpackPanels(const float *packed, int64_t rows, int64_t cols, int64_t width, float *matrix);

/// Writes `out[c][r] = matrix[r][c]` for a row-major [rows, cols] `matrix` into a [cols,
/// paddedRows] `out` (paddedRows >= rows), with zeros in columns rows .. paddedRows - 1: the tied
/// embedding [V, D] as the LM head's [D, V'] matmul weight.
void transposePadded(const float *matrix, int64_t rows, int64_t cols, int64_t paddedRows, float *out,
                     int64_t threads = 1);

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_PANELPACKING_H
