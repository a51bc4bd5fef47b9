// Weights quantized by llama.cpp (a GGUF file's blocks) repacked, block by block, into the lane
// layouts compiled code reads (WeightFormats.h), without widening them to f32. Each stored format's
// repacking is its table row's (WeightFormatTraits::repack, WeightFormats.h; the kernels are in
// FormatKernels.h): the file's codes and scales, bit for bit, only their places changed, every
// block's fp16 fields checked to be finite, columns past the tensor's rows padded with weights that
// dequantize to 0.
#ifndef GPT_CC_KERNELS_GGUFREPACKING_H
#define GPT_CC_KERNELS_GGUFREPACKING_H

#include <cstdint>
#include <string>

namespace gpt::kernels {

/// Consecutive rows of one matrix held apart: a fused weight's parts (the rows of q, k and v, or
/// of gate and up), each still in the file's memory, so that fusing them copies nothing. `type`
/// is the GGUF type of the part's blocks when it is not the repacking's format (empty): any type
/// blockConversion (BlockTranscoding.h) converts into it, a block at a time as the lanes are
/// written, with no copy of the tensor in that format (a q6_k part of a q8_0 weight: its rows
/// requantized as transcodeRows would, the same bits).
struct BlockRows {
  const uint8_t *blocks;
  int64_t rows;
  std::string type = {};
  /// Nonzero for a q or k weight's rows as llama.cpp's converter stores them, permuted within each
  /// of this many heads for its rope (within a head, stored row 2j + t is row t * half + j of the
  /// model's order): row() reads them in the model's order, so that undoing the permutation
  /// copies nothing. Each head's rows must be even in count.
  int64_t permutedHeads = 0;

  /// The file's row that holds row `r` of the model's order.
  int64_t fileRow(int64_t r) const {
    if (permutedHeads == 0) return r;
    const int64_t headRows = rows / permutedHeads, half = headRows / 2, within = r % headRows;
    return r - within + 2 * (within % half) + within / half;
  }
  /// The first block of row `r` in the model's order, of `rowBytes` bytes per row.
  const uint8_t *row(int64_t r, int64_t rowBytes) const { return blocks + fileRow(r) * rowBytes; }
};

/// The q8_0 lanes [paddedN / width, K / 4, width] and fp16 scale panels [paddedN / width, K / 32,
/// width] of a row-major [n, k] f32 matrix whose ROWS hold the blocks, bit for bit what quantizing
/// its [k, n] transpose and packing it (the q8_0 row's quantize and pack) give, padding columns
/// included: made a few panels at a time in a buffer of each thread's own (a few MB), with no
/// transposed float32 copy and no temporary of all n rows' blocks. How the q8_0 LM head is laid out
/// from the [V, D] embedding table. K must be a positive multiple of 32 and paddedN a multiple of
/// `width`, at least n (std::invalid_argument otherwise); panels are split over `threads` threads.
void quantizeRowsToQ8_0Lanes(const float *matrix, int64_t n, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                             uint16_t *scales, int64_t threads = 1);

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_GGUFREPACKING_H
