// q4_1's kernels (FormatKernels.h's q4_1 section): its quantizer, as llama.cpp's reference bit for
// bit, the reading of its lanes (q4_0's codes beside a scale and a min per block), the repacking of a
// GGUF file's blocks into them, their widening to f32, and the conversions into q4_1 that keep a
// block's codes: q4_0's, and each sub-block of q4_K's.
#include "cc/kernels/FormatKernelUtils.h"
#include "cc/kernels/KQuantScales.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace gpt::kernels {

void quantizeQ4_1(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales, int64_t threads) {
  quantizeWithMins(matrix, rows, cols, 15, codes, scales, threads);
}

void quantizeWithMins(const float *matrix, int64_t rows, int64_t cols, int steps, uint8_t *codes, uint16_t *scales,
                      int64_t threads) {
  const float top = static_cast<float>(steps);
  forEachBlockColumn(rows, cols, kQuantBlock, "the quantization block", threads, [&](int64_t block, int64_t n) {
    const int64_t first = block * kQuantBlock;
    float lo = matrix[first * cols + n], hi = lo;
    for (int64_t k = first; k < first + kQuantBlock; ++k) {
      lo = std::min(lo, matrix[k * cols + n]);
      hi = std::max(hi, matrix[k * cols + n]);
    }
    const float d = (hi - lo) / top, inverse = d == 0.0f ? 0.0f : 1.0f / d;
    scales[(2 * block) * cols + n] = toFp16(d);
    scales[(2 * block + 1) * cols + n] = toFp16(lo);
    for (int64_t k = first; k < first + kQuantBlock; ++k) {
      // Two statements, as llama.cpp writes them: no multiply-add contracted into one rounding.
      const float scaled = (matrix[k * cols + n] - lo) * inverse;
      const float shifted = scaled + 0.5f;
      codes[k * cols + n] = static_cast<uint8_t>(std::min(top, std::trunc(shifted)));
    }
  });
}

void dequantizeQ4_1Lanes(const uint32_t *lanes, const uint16_t *scalesAndMins, int64_t rows, int64_t cols,
                         int64_t width, float *matrix) {
  readQuantizedLanes("dequantizeQ4_1Lanes", lanes, scalesAndMins, rows, cols, width, kQ4_0RowsPerWord, 2,
                     [&](int64_t r, int64_t j, uint32_t word, float scale, float min) {
                       for (int64_t i = 0; i < 4; ++i) {
                         const int low = static_cast<int>((word >> (8 * i)) & 0xFu);
                         const int high = static_cast<int>((word >> (8 * i + 4)) & 0xFu);
                         const int64_t row = q4_0LowRow(r, i);
                         // Product and sum rounded apart (no contracted multiply-add), as
                         // llama.cpp's and gguf's dequantizers compute them.
                         const float lowProduct = static_cast<float>(low) * scale;
                         const float highProduct = static_cast<float>(high) * scale;
                         matrix[row * cols + j] = lowProduct + min;
                         matrix[(row + 4) * cols + j] = highProduct + min;
                       }
                     });
}

void dequantizeQ4_1Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out) {
  dequantizeRows("dequantizeQ4_1Rows", blocks, k, n, kQ4_1BlockBytes, 2, out,
                 [](const uint8_t *bytes, const float *header, float *values) {
                   for (int64_t m = 0; m < kQuantBlock / 2; ++m) {
                     // Product and sum rounded apart (no contracted multiply-add), as llama.cpp's
                     // and gguf's dequantizers compute them.
                     const float low = static_cast<float>(bytes[m] & 0xFu) * header[0];
                     const float high = static_cast<float>(bytes[m] >> 4) * header[0];
                     values[m] = low + header[1];
                     values[m + 16] = high + header[1];
                   }
                 });
}

void widenQ4_1Block(const uint8_t *block, float *values) { dequantizeQ4_1Rows(block, kQuantBlock, 1, values); }

namespace {
// q4_1's codes are q4_0's nibbles, paired the same way; a zero scale and min make padding 0.
constexpr LaneFormat kQ4_1Lanes{"repackQ4_1Rows", "q4_1", kQ4_1BlockBytes, 2, kQ4_0WordsPerBlock, 0u, q4_0BlockWords};
} // namespace

void repackQ4_1Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  repackLanes<kQ4_1Lanes>(parts, true, k, paddedN, width, codes, scales, threads);
}

void q4_0AsQ4_1(const uint8_t *block, uint8_t *out) {
  uint16_t scale;
  std::memcpy(&scale, block, sizeof scale);
  const uint16_t header[2] = {scale, toFp16(fromFp16(scale) * -8.0f)};
  std::memcpy(out, header, sizeof header);
  std::memcpy(out + 4, block + 2, kQuantBlock / 2);
}

void q4_KAsQ4_1(const uint8_t *superBlock, uint8_t *out) {
  const float d = halfAt(superBlock), dmin = halfAt(superBlock + 2);
  float scales[8], mins[8];
  scalesAndMins(superBlock + 4, scales, mins);
  for (int64_t s = 0; s < kSuperBlock / kQuantBlock; ++s, out += kQ4_1BlockBytes) {
    const uint16_t header[2] = {toFp16(d * scales[s]), toFp16(-(dmin * mins[s]))};
    if (((header[0] & 0x7C00u) == 0x7C00u) | ((header[1] & 0x7C00u) == 0x7C00u))
      throw std::invalid_argument("a q4_K sub-block's scale or min (d or dmin times a 6-bit integer) is beyond "
                                  "fp16's range, or not finite");
    std::memcpy(out, header, sizeof header);
    q4_KSubBlockBytes(superBlock + 16, s, out + 4); // the sub-block's codes, in a q4_1 block's bytes
  }
}

} // namespace gpt::kernels
