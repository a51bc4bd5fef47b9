// Weight repacking into column panels (see PanelPacking.h).
#include "cc/kernels/PanelPacking.h"

#include "cc/kernels/ParallelFor.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <stdexcept>

namespace gpt::kernels {

void *allocateAlignedBytes(size_t bytes) {
  constexpr size_t kCacheLine = 64;
  // aligned_alloc wants a size that is a multiple of the alignment. (A model's own copies of its
  // weights live in runtime/WeightArena.h, in huge pages; these buffers are the layout steps'
  // temporaries and the logits.)
  size_t rounded = (std::max<size_t>(bytes, 1) + kCacheLine - 1) / kCacheLine * kCacheLine;
  void *data = std::aligned_alloc(kCacheLine, rounded);
  if (!data) throw std::bad_alloc();
  return data;
}

namespace {
void checkPanels(int64_t rows, int64_t cols, int64_t width) {
  if (rows < 0 || width <= 0 || cols < 0 || cols % width != 0)
    throw std::invalid_argument("packPanels: the column count must be a multiple of the panel width");
}

template <typename T>
void packPanelsOf(const T *matrix, int64_t rows, int64_t cols, int64_t width, T *packed, int64_t threads) {
  checkPanels(rows, cols, width);
  // Panel by panel, row by row: reads `width` consecutive elements of a row and writes the panel
  // sequentially, so both sides move whole cache lines. Each thread writes whole panels.
  parallelFor(cols / width, threads, [&](int64_t firstPanel, int64_t endPanel) {
    for (int64_t panel = firstPanel; panel < endPanel; ++panel)
      for (int64_t row = 0; row < rows; ++row)
        std::copy_n(matrix + row * cols + panel * width, width, packed + (panel * rows + row) * width);
  });
}
} // namespace

void packPanels(const float *matrix, int64_t rows, int64_t cols, int64_t width, float *packed, int64_t threads) {
  packPanelsOf(matrix, rows, cols, width, packed, threads);
}
void packPanels(const uint16_t *matrix, int64_t rows, int64_t cols, int64_t width, uint16_t *packed, int64_t threads) {
  packPanelsOf(matrix, rows, cols, width, packed, threads);
}

void unpackPanels(const float *packed, int64_t rows, int64_t cols, int64_t width, float *matrix) {
  checkPanels(rows, cols, width);
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t row = 0; row < rows; ++row)
      std::copy_n(packed + (panel * rows + row) * width, width, matrix + row * cols + panel * width);
}

void transposePadded(const float *matrix, int64_t rows, int64_t cols, int64_t paddedRows, float *out, int64_t threads) {
  if (rows < 0 || cols < 0 || paddedRows < rows)
    throw std::invalid_argument("transposePadded: the padded row count must be at least the row count");
  // Blocks of rows: a block's source rows stay in cache while each of its output runs (one per
  // column) is written, instead of one strided pass over the whole matrix per column.
  // Each thread writes its own blocks of rows (runs of every output row).
  constexpr int64_t kBlockRows = 64;
  parallelFor((rows + kBlockRows - 1) / kBlockRows, threads, [&](int64_t firstBlock, int64_t endBlock) {
    for (int64_t r0 = firstBlock * kBlockRows; r0 < std::min(rows, endBlock * kBlockRows); r0 += kBlockRows) {
      const int64_t r1 = std::min(rows, r0 + kBlockRows);
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = r0; r < r1; ++r) out[c * paddedRows + r] = matrix[r * cols + c];
    }
  });
  for (int64_t c = 0; c < cols; ++c) std::fill(out + c * paddedRows + rows, out + (c + 1) * paddedRows, 0.0f);
}

} // namespace gpt::kernels
