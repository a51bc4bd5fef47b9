// q4_K's kernels (FormatKernels.h's q4_K section): its quantizer, the reading of its lanes (q4_0's
// codes with unpacked sub-block scales and mins), the repacking of a GGUF file's super-blocks into
// them, and their widening to f32, bit for bit as gguf's and llama.cpp's dequantizers compute it.
#include "cc/kernels/FormatKernelUtils.h"
#include "cc/kernels/KQuantScales.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace gpt::kernels {

void quantizeQ4_K(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales, int64_t threads) {
  constexpr int64_t subBlocks = kSuperBlock / kQuantBlock;
  forEachBlockColumn(rows, cols, kSuperBlock, "q4_K's super-block", threads, [&](int64_t super, int64_t n) {
    const float *column = matrix + super * kSuperBlock * cols + n;
    // Each sub-block's range [lo, hi] with lo <= 0, as a scale and a subtracted min >= 0.
    float step[subBlocks], lift[subBlocks], largestStep = 0.0f, largestLift = 0.0f;
    for (int64_t s = 0; s < subBlocks; ++s) {
      float lo = 0.0f, hi = column[s * kQuantBlock * cols];
      for (int64_t i = 0; i < kQuantBlock; ++i) {
        lo = std::min(lo, column[(s * kQuantBlock + i) * cols]);
        hi = std::max(hi, column[(s * kQuantBlock + i) * cols]);
      }
      step[s] = (hi - lo) / 15.0f;
      lift[s] = -lo;
      largestStep = std::max(largestStep, step[s]);
      largestLift = std::max(largestLift, lift[s]);
    }
    uint16_t *header = scales + (rows / kQuantBlock + 2 * super) * cols + n;
    uint16_t *subRows = scales + super * subBlocks * cols + n;
    header[0] = toFp16(largestStep / 63.0f);
    header[cols] = toFp16(largestLift / 63.0f);
    const float d = fromFp16(header[0]), dmin = fromFp16(header[cols]);
    for (int64_t s = 0; s < subBlocks; ++s) {
      const float scaleCode = d > 0.0f ? std::min(63.0f, std::nearbyint(step[s] / d)) : 0.0f;
      const float minCode = dmin > 0.0f ? std::min(63.0f, std::nearbyint(lift[s] / dmin)) : 0.0f;
      subRows[s * cols] = static_cast<uint16_t>(static_cast<int>(scaleCode) | static_cast<int>(minCode) << 8);
      // The codes against the scale and min as stored.
      const float scale = d * scaleCode, min = dmin * minCode, inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
      for (int64_t i = 0; i < kQuantBlock; ++i) {
        const float code = std::nearbyint((column[(s * kQuantBlock + i) * cols] + min) * inverse);
        codes[(super * kSuperBlock + s * kQuantBlock + i) * cols + n] =
            static_cast<uint8_t>(std::clamp(code, 0.0f, 15.0f));
      }
    }
  });
}

void dequantizeQ4_KLanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix) {
  checkLaneShape("dequantizeQ4_KLanes", rows, cols, width, kSuperBlock, "q4_K's super-block");
  constexpr int64_t wordsPerBlock = kQuantBlock / kQ4_0RowsPerWord, subBlocks = kSuperBlock / kQuantBlock;
  const int64_t superBlocks = rows / kSuperBlock, panelRows = rows / kQ4_0RowsPerWord;
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t r = 0; r < panelRows; ++r)
      for (int64_t c = 0; c < width; ++c) {
        const int64_t block = r / wordsPerBlock, j = panel * width + c;
        const uint16_t *panelScales = scales + panel * superBlocks * kQ4_KScaleRows * width + c;
        const uint16_t *header = panelScales + (superBlocks * subBlocks + 2 * (block / subBlocks)) * width;
        const uint16_t scaleAndMin = panelScales[block * width];
        // The f32 products, as gguf's and llama.cpp's dequantizers compute them.
        const float scale = fromFp16(header[0]) * static_cast<float>(scaleAndMin & 0xFFu);
        const float min = fromFp16(header[width]) * static_cast<float>(scaleAndMin >> 8);
        const uint32_t word = lanes[(panel * panelRows + r) * width + c];
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t row = q4_0LowRow(r, i);
          const float lowProduct = scale * static_cast<float>((word >> (8 * i)) & 0xFu);
          const float highProduct = scale * static_cast<float>((word >> (8 * i + 4)) & 0xFu);
          matrix[row * cols + j] = lowProduct - min;
          matrix[(row + 4) * cols + j] = highProduct - min;
        }
      }
}

void q4_KSubBlockBytes(const uint8_t *nibbles, int64_t s, uint8_t *bytes) {
  const uint8_t *pairs = nibbles + 32 * (s / 2);
  const int shift = 4 * static_cast<int>(s % 2);
  for (int64_t m = 0; m < kQuantBlock / 2; ++m)
    bytes[m] = static_cast<uint8_t>(((pairs[m] >> shift) & 0x0F) | (((pairs[m + 16] >> shift) & 0x0F) << 4));
}

void repackQ4_KRows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  constexpr int64_t subBlocks = kSuperBlock / kQuantBlock;
  // A column's sub-block values are scale | min << 8, its header values d and dmin (FormatKernels.h's
  // q4_K section); its words are each sub-block's, in turn.
  repackSuperBlocks("repackQ4_KRows", "q4_K's super-block", "q4_k", kQ4_KBlockBytes, kQ4_KScaleRows - subBlocks,
                    subBlocks * kQ4_0WordsPerBlock, parts, k, paddedN, width, codes, scales, threads,
                    [](const uint8_t *block, uint16_t *values, uint32_t *words) {
                      uint8_t scaleBytes[subBlocks], minBytes[subBlocks];
                      scalesAndMins(block + 4, scaleBytes, minBytes);
                      for (int64_t s = 0; s < subBlocks; ++s) {
                        values[s] = static_cast<uint16_t>(scaleBytes[s] | minBytes[s] << 8);
                        q4_KSubBlockWords(block + 16, s, words + s * kQ4_0WordsPerBlock);
                      }
                      std::memcpy(values + subBlocks, block, 2 * sizeof(uint16_t)); // d, dmin
                    });
}

// The same products and differences, rounded one at a time, whether 4 at once (SSE2: a load's LM
// head and token table are hundreds of millions of weights) or one.
void widenQ4_KLayoutBlock(const uint8_t *block, const uint8_t *highs, const uint8_t *nibbles, float *values) {
  const float d = halfAt(block), dmin = halfAt(block + 2);
  float scales[8], mins[8];
  scalesAndMins(block + 4, scales, mins);
  for (int64_t s = 0; s < 8; ++s) {
    const float scale = d * scales[s], min = dmin * mins[s];
    const uint8_t *bytes = nibbles + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    float *out = values + 32 * s;
#ifdef __SSE2__
    const __m128i mask = _mm_set1_epi8(0x0F), one = _mm_set1_epi8(1);
    const __m128 scales4 = _mm_set1_ps(scale), mins4 = _mm_set1_ps(min);
    for (int64_t half = 0; half < 2; ++half) {
      __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(bytes + 16 * half));
      codes = _mm_and_si128(_mm_srl_epi16(codes, _mm_cvtsi32_si128(shift)), mask);
      if (highs) {
        __m128i fifth = _mm_loadu_si128(reinterpret_cast<const __m128i *>(highs + 16 * half));
        fifth = _mm_and_si128(_mm_srl_epi16(fifth, _mm_cvtsi32_si128(static_cast<int>(s))), one);
        codes = _mm_or_si128(codes, _mm_slli_epi16(fifth, 4));
      }
      for (int quarter = 0; quarter < 4; ++quarter)
        _mm_storeu_ps(out + 16 * half + 4 * quarter,
                      _mm_sub_ps(_mm_mul_ps(scales4, quarterAsFloats(codes, quarter)), mins4));
    }
#else
    for (int64_t i = 0; i < 32; ++i) {
      uint32_t q = (bytes[i] >> shift) & 0x0Fu;
      if (highs) q |= ((highs[i] >> s) & 1u) << 4;
      const float product = scale * static_cast<float>(q);
      out[i] = product - min;
    }
#endif
  }
}

void widenQ4_KBlock(const uint8_t *block, float *values) { widenQ4_KLayoutBlock(block, nullptr, block + 16, values); }

void dequantizeQ4_KRows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads) {
  dequantizeBlocks("dequantizeQ4_KRows", blocks, k, n, kSuperBlock, kQ4_KBlockBytes, out, threads, widenQ4_KBlock);
}

} // namespace gpt::kernels
