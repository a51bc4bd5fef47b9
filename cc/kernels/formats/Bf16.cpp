// bf16's kernels (FormatKernels.h's bf16 section): f32 weights rounded into bf16 lanes, and read
// back. No blocks and no scales: the packing rounds each weight on its own (toBf16).
#include "cc/kernels/FormatKernelUtils.h"

namespace gpt::kernels {

void packBf16Lanes(const float *matrix, int64_t rows, int64_t cols, int64_t width, uint32_t *packed, int64_t threads) {
  checkLaneShape("packBf16Lanes", rows, cols, width, kBf16RowsPerWord, "bf16 lanes pair the two halves of K");
  const int64_t half = rows / 2;
  writeLanes(rows, cols, width, kBf16RowsPerWord, packed, threads, [&](int64_t r, int64_t j) {
    return static_cast<uint32_t>(toBf16(matrix[r * cols + j])) |
           static_cast<uint32_t>(toBf16(matrix[(r + half) * cols + j])) << 16;
  });
}

void dequantizeBf16Lanes(const uint32_t *lanes, int64_t rows, int64_t cols, int64_t width, float *matrix) {
  checkLaneShape("dequantizeBf16Lanes", rows, cols, width, kBf16RowsPerWord, "bf16 lanes pair the two halves of K");
  const int64_t panelRows = rows / kBf16RowsPerWord;
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t r = 0; r < panelRows; ++r)
      for (int64_t c = 0; c < width; ++c) {
        const uint32_t word = lanes[(panel * panelRows + r) * width + c];
        float *out = matrix + r * cols + panel * width + c;
        out[0] = bitCast<float>(word << 16);                        // the low half is row r
        out[panelRows * cols] = bitCast<float>(word & 0xffff0000u); // the high half row r + K/2
      }
}

} // namespace gpt::kernels
