// Weight repacking into column panels (see PanelPacking.h).
#include "cc/kernels/PanelPacking.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string_view>

namespace gpt::kernels {

namespace {
/// False when `GPT_HUGE_PAGES=0`: to measure what huge pages bring, or to keep weights in small pages.
bool hugePagesWanted() {
  const char *setting = std::getenv("GPT_HUGE_PAGES");
  return !(setting && std::string_view(setting) == "0");
}
} // namespace

void *allocateAlignedBytes(size_t bytes) {
  constexpr size_t kCacheLine = 64;
  // Weights of 2 MiB and more start on a 2 MiB boundary, and their whole 2 MiB ranges are offered
  // to transparent huge pages: streaming hundreds of megabytes per decode step through 4 KiB
  // pages costs a TLB miss every 64 cache lines (`tools/bench_batch.py --pages small,huge` compares).
  // The tail past the last whole range stays in small pages, so no memory is wasted on it.
  constexpr size_t kHugePage = size_t(2) << 20;
  const size_t alignment = bytes >= kHugePage && hugePagesWanted() ? kHugePage : kCacheLine;
  // aligned_alloc wants a size that is a multiple of the alignment (untouched, the rounding costs
  // address space, not memory).
  size_t rounded = (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
  void *data = std::aligned_alloc(alignment, rounded);
  if (!data) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  // Advice only: where huge pages are off or unavailable, the range keeps small pages.
  if (alignment == kHugePage) madvise(data, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  return data;
}

namespace {
void checkPanels(int64_t rows, int64_t cols, int64_t width) {
  if (rows < 0 || width <= 0 || cols < 0 || cols % width != 0)
    throw std::invalid_argument("packPanels: the column count must be a multiple of the panel width");
}

template <typename T> void packPanelsOf(const T *matrix, int64_t rows, int64_t cols, int64_t width, T *packed) {
  checkPanels(rows, cols, width);
  // Panel by panel, row by row: reads `width` consecutive elements of a row and writes the panel
  // sequentially, so both sides move whole cache lines.
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t row = 0; row < rows; ++row)
      std::copy_n(matrix + row * cols + panel * width, width, packed + (panel * rows + row) * width);
}
} // namespace

void packPanels(const float *matrix, int64_t rows, int64_t cols, int64_t width, float *packed) {
  packPanelsOf(matrix, rows, cols, width, packed);
}
void packPanels(const uint16_t *matrix, int64_t rows, int64_t cols, int64_t width, uint16_t *packed) {
  packPanelsOf(matrix, rows, cols, width, packed);
}

void unpackPanels(const float *packed, int64_t rows, int64_t cols, int64_t width, float *matrix) {
  checkPanels(rows, cols, width);
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t row = 0; row < rows; ++row)
      std::copy_n(packed + (panel * rows + row) * width, width, matrix + row * cols + panel * width);
}

void transposePadded(const float *matrix, int64_t rows, int64_t cols, int64_t paddedRows, float *out) {
  if (rows < 0 || cols < 0 || paddedRows < rows)
    throw std::invalid_argument("transposePadded: the padded row count must be at least the row count");
  // Blocks of rows: a block's source rows stay in cache while each of its output runs (one per
  // column) is written, instead of one strided pass over the whole matrix per column.
  constexpr int64_t kBlockRows = 64;
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int64_t r1 = std::min(rows, r0 + kBlockRows);
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = r0; r < r1; ++r) out[c * paddedRows + r] = matrix[r * cols + c];
  }
  for (int64_t c = 0; c < cols; ++c) std::fill(out + c * paddedRows + rows, out + (c + 1) * paddedRows, 0.0f);
}

} // namespace gpt::kernels
