// q4_0's kernels (FormatKernels.h's q4_0 section): its quantizer, as llama.cpp's reference bit for
// bit, the packing and reading of its lanes, which the other 4-bit formats' codes share, the
// repacking of a GGUF file's blocks into them and their widening to f32.
#include "cc/kernels/FormatKernelUtils.h"

#include <algorithm>
#include <cmath>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace gpt::kernels {

void quantizeQ4_0(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales, int64_t threads) {
  forEachBlockColumn(rows, cols, kQuantBlock, "the quantization block", threads, [&](int64_t block, int64_t n) {
    const int64_t first = block * kQuantBlock;
    float amax = 0.0f, extreme = 0.0f;
    for (int64_t k = first; k < first + kQuantBlock; ++k) {
      const float w = matrix[k * cols + n];
      if (amax < std::fabs(w)) { // strictly: the first of equal magnitudes wins
        amax = std::fabs(w);
        extreme = w;
      }
    }
    const float d = extreme / -8.0f;
    scales[block * cols + n] = toFp16(d);
    for (int64_t k = first; k < first + kQuantBlock; ++k) {
      const float shifted = d == 0.0f ? 8.5f : matrix[k * cols + n] / d + 8.5f;
      codes[k * cols + n] = static_cast<uint8_t>(std::min(15.0f, std::trunc(shifted)));
    }
  });
}

void packQ4_0Lanes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed, int64_t threads) {
  checkLaneShape("packQ4_0Lanes", rows, cols, width, kQuantBlock, "the quantization block");
  checkCodeBits<4>("packQ4_0Lanes", codes, rows, cols);
  writeLanes(rows, cols, width, kQ4_0RowsPerWord, packed, threads, [&](int64_t r, int64_t j) {
    uint32_t word = 0;
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t low = q4_0LowRow(r, i);
      word |= static_cast<uint32_t>(codes[low * cols + j] | codes[(low + 4) * cols + j] << 4) << (8 * i);
    }
    return word;
  });
}

void dequantizeQ4_0Lanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix) {
  readQuantizedLanes("dequantizeQ4_0Lanes", lanes, scales, rows, cols, width, kQ4_0RowsPerWord, 1,
                     [&](int64_t r, int64_t j, uint32_t word, float scale, float) {
                       for (int64_t i = 0; i < 4; ++i) {
                         const int low = static_cast<int>((word >> (8 * i)) & 0xFu);
                         const int high = static_cast<int>((word >> (8 * i + 4)) & 0xFu);
                         const int64_t row = q4_0LowRow(r, i);
                         matrix[row * cols + j] = static_cast<float>(low - 8) * scale;
                         matrix[(row + 4) * cols + j] = static_cast<float>(high - 8) * scale;
                       }
                     });
}

void q4_0BlockWords(const uint8_t *bytes, uint32_t *words) {
#ifdef __SSE2__
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i *>(bytes));
  const __m128i mask = _mm_set1_epi8(0x0F);
  nibbleLaneWords(_mm_and_si128(packed, mask), _mm_and_si128(_mm_srli_epi16(packed, 4), mask), words);
#else
  for (int64_t o = 0; o < kQ4_0WordsPerBlock; ++o) {
    const uint32_t a = bytes[o], b = bytes[o + 4], c = bytes[o + 8], d = bytes[o + 12];
    words[o] = ((a & 0xFu) | (b & 0xFu) << 4) | ((c & 0xFu) | (d & 0xFu) << 4) << 8 | ((a >> 4) | (b & 0xF0u)) << 16 |
               ((c >> 4) | (d & 0xF0u)) << 24;
  }
#endif
}

namespace {
constexpr LaneFormat kQ4_0Lanes{"repackQ4_0Rows",   "q4_0",        kQ4_0BlockBytes, 1,
                                kQ4_0WordsPerBlock, kQ4_0ZeroWord, q4_0BlockWords};
} // namespace

void repackQ4_0Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  repackLanes<kQ4_0Lanes>(parts, true, k, paddedN, width, codes, scales, threads);
}

void dequantizeQ4_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out) {
  // Byte m holds code m in its low nibble and code m + 16 in its high one.
  dequantizeRows("dequantizeQ4_0Rows", blocks, k, n, kQ4_0BlockBytes, 1, out,
                 [](const uint8_t *bytes, const float *header, float *values) {
                   for (int64_t m = 0; m < kQuantBlock / 2; ++m) {
                     values[m] = static_cast<float>(static_cast<int>(bytes[m] & 0xFu) - 8) * header[0];
                     values[m + 16] = static_cast<float>(static_cast<int>(bytes[m] >> 4) - 8) * header[0];
                   }
                 });
}

} // namespace gpt::kernels
