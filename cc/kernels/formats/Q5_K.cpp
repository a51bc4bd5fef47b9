// q5_K's kernels (FormatKernels.h's q5_K section): its quantizer, the packing and reading of its
// lanes (q4_K's nibble words and one word of fifth bits per sub-block), the repacking of a GGUF
// file's super-blocks into them, and their widening to f32, bit for bit as gguf's and llama.cpp's
// dequantizers compute it.
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

void quantizeQ5_K(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales, int64_t threads) {
  constexpr int64_t subBlocks = kSuperBlock / kQuantBlock;
  constexpr float steps = 31.0f;
  // An fp16 value at least `value` (its nearest, or the next one up where that is below).
  auto fp16AtLeast = [](float value) {
    uint16_t bits = toFp16(value);
    if (fromFp16(bits) < value) ++bits;
    return bits;
  };
  forEachBlockColumn(rows, cols, kSuperBlock, "q5_K's super-block", threads, [&](int64_t super, int64_t n) {
    const float *column = matrix + super * kSuperBlock * cols + n;
    // Each sub-block's range [lo, hi] with lo <= 0, as a subtracted min >= 0 and a scale. Both are
    // rounded up to their 6-bit multiples of dmin and d, the min first: the codes then cover the
    // whole range, and no weight is clipped by more than half a stored step (with the scales
    // rounded to nearest, the top of a range of 31 steps clipped by up to 0.3 of a step more).
    float lo[subBlocks], hi[subBlocks], largestLift = 0.0f;
    for (int64_t s = 0; s < subBlocks; ++s) {
      lo[s] = 0.0f, hi[s] = column[s * kQuantBlock * cols];
      for (int64_t i = 0; i < kQuantBlock; ++i) {
        lo[s] = std::min(lo[s], column[(s * kQuantBlock + i) * cols]);
        hi[s] = std::max(hi[s], column[(s * kQuantBlock + i) * cols]);
      }
      largestLift = std::max(largestLift, -lo[s]);
    }
    uint16_t *header = scales + (rows / kQuantBlock + 2 * super) * cols + n;
    uint16_t *subRows = scales + super * subBlocks * cols + n;
    header[cols] = fp16AtLeast(largestLift / 63.0f);
    const float dmin = fromFp16(header[cols]);
    float minCode[subBlocks], step[subBlocks], largestStep = 0.0f;
    for (int64_t s = 0; s < subBlocks; ++s) {
      minCode[s] = dmin > 0.0f ? std::min(63.0f, std::ceil(-lo[s] / dmin)) : 0.0f;
      step[s] = (hi[s] + dmin * minCode[s]) / steps;
      largestStep = std::max(largestStep, step[s]);
    }
    header[0] = fp16AtLeast(largestStep / 63.0f);
    const float d = fromFp16(header[0]);
    for (int64_t s = 0; s < subBlocks; ++s) {
      const float scaleCode = d > 0.0f ? std::min(63.0f, std::ceil(step[s] / d)) : 0.0f;
      subRows[s * cols] = static_cast<uint16_t>(static_cast<int>(scaleCode) | static_cast<int>(minCode[s]) << 8);
      // The codes against the scale and min as stored.
      const float scale = d * scaleCode, min = dmin * minCode[s], inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
      for (int64_t i = 0; i < kQuantBlock; ++i) {
        const float code = std::nearbyint((column[(s * kQuantBlock + i) * cols] + min) * inverse);
        codes[(super * kSuperBlock + s * kQuantBlock + i) * cols + n] =
            static_cast<uint8_t>(std::clamp(code, 0.0f, steps));
      }
    }
  });
}

void q5_KBlockWords(const uint8_t *codes, uint32_t *words) {
  // q4_0's bytes of the low nibbles (code m in byte m's low nibble, code m + 16 in its high one).
  uint8_t nibbles[kQuantBlock / 2];
  uint32_t fifths = 0;
  for (int64_t m = 0; m < kQuantBlock / 2; ++m)
    nibbles[m] = static_cast<uint8_t>((codes[m] & 0x0F) | (codes[m + 16] & 0x0F) << 4);
  for (int64_t j = 0; j < kQuantBlock; ++j) fifths |= static_cast<uint32_t>(codes[j] >> 4) << j;
  q4_0BlockWords(nibbles, words);
  words[kQ4_0WordsPerBlock] = fifths;
}

void packQ5_KLanes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed, int64_t threads) {
  packFiveBitLanes("packQ5_KLanes", kSuperBlock, "q5_K's super-block", codes, rows, cols, width, packed, threads);
}

void packFiveBitLanes(const char *what, int64_t rowMultiple, const char *multipleName, const uint8_t *codes,
                      int64_t rows, int64_t cols, int64_t width, uint32_t *packed, int64_t threads) {
  checkLaneShape(what, rows, cols, width, rowMultiple, multipleName);
  checkCodeBits<5>(what, codes, rows, cols);
  const int64_t blocks = rows / kQuantBlock, panelRows = blocks * kQ5_KWordsPerBlock;
  parallelFor(cols / width, threads, [&](int64_t firstPanel, int64_t endPanel) {
    uint8_t block[kQuantBlock];
    uint32_t words[kQ5_KWordsPerBlock];
    for (int64_t panel = firstPanel; panel < endPanel; ++panel)
      for (int64_t b = 0; b < blocks; ++b)
        for (int64_t c = 0; c < width; ++c) {
          const int64_t j = panel * width + c;
          for (int64_t r = 0; r < kQuantBlock; ++r) block[r] = codes[(b * kQuantBlock + r) * cols + j];
          q5_KBlockWords(block, words);
          for (int64_t w = 0; w < kQ5_KWordsPerBlock; ++w)
            packed[(panel * panelRows + b * kQ5_KWordsPerBlock + w) * width + c] = words[w];
        }
  });
}

void dequantizeQ5_KLanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix) {
  checkLaneShape("dequantizeQ5_KLanes", rows, cols, width, kSuperBlock, "q5_K's super-block");
  constexpr int64_t subBlocks = kSuperBlock / kQuantBlock;
  const int64_t superBlocks = rows / kSuperBlock, blocks = rows / kQuantBlock, panelRows = blocks * kQ5_KWordsPerBlock;
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t c = 0; c < width; ++c) {
        const int64_t j = panel * width + c;
        const uint16_t *panelScales = scales + panel * superBlocks * kQ4_KScaleRows * width + c;
        const uint16_t *header = panelScales + (superBlocks * subBlocks + 2 * (b / subBlocks)) * width;
        const uint16_t scaleAndMin = panelScales[b * width];
        // The f32 products, as gguf's and llama.cpp's dequantizers compute them.
        const float scale = fromFp16(header[0]) * static_cast<float>(scaleAndMin & 0xFFu);
        const float min = fromFp16(header[width]) * static_cast<float>(scaleAndMin >> 8);
        const uint32_t *words = lanes + (panel * panelRows + b * kQ5_KWordsPerBlock) * width + c;
        const uint32_t fifths = words[kQ4_0WordsPerBlock * width];
        for (int64_t o = 0; o < kQ4_0WordsPerBlock; ++o)
          for (int64_t i = 0; i < 4; ++i) {
            // Byte i of word o: rows o + 8 i (low nibble) and o + 4 + 8 i (high nibble) of the block.
            const uint32_t byte = (words[o * width] >> (8 * i)) & 0xFFu;
            const int64_t low = o + 8 * i, high = low + 4;
            const uint32_t lowCode = (byte & 0x0Fu) | ((fifths >> low) & 1u) << 4;
            const uint32_t highCode = (byte >> 4) | ((fifths >> high) & 1u) << 4;
            const float lowProduct = scale * static_cast<float>(lowCode);
            const float highProduct = scale * static_cast<float>(highCode);
            matrix[(b * kQuantBlock + low) * cols + j] = lowProduct - min;
            matrix[(b * kQuantBlock + high) * cols + j] = highProduct - min;
          }
      }
}

namespace {

/// The fifth bits of sub-block s (of 8) of a q5_K super-block as one word: bit j is bit s of
/// highs[j], code j's fifth bit.
uint32_t q5_KFifthBits(const uint8_t *highs, int64_t s) {
#ifdef __SSE2__
  // Bit s of each byte moved to its top bit, then the 16 bytes' top bits gathered.
  const __m128i count = _mm_cvtsi32_si128(7 - static_cast<int>(s));
  const __m128i low = _mm_sll_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(highs)), count);
  const __m128i high = _mm_sll_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(highs + 16)), count);
  return static_cast<uint32_t>(_mm_movemask_epi8(low)) | static_cast<uint32_t>(_mm_movemask_epi8(high)) << 16;
#else
  uint32_t fifths = 0;
  for (int64_t j = 0; j < kQuantBlock; ++j) fifths |= static_cast<uint32_t>((highs[j] >> s) & 1) << j;
  return fifths;
#endif
}

} // namespace

void repackQ5_KRows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  constexpr int64_t subBlocks = kSuperBlock / kQuantBlock;
  // q4_K's values (scale | min << 8 per sub-block, then d and dmin); each sub-block's words are
  // q4_K's nibble words and its fifth bits.
  repackSuperBlocks("repackQ5_KRows", "q5_K's super-block", "q5_k", kQ5_KBlockBytes, kQ4_KScaleRows - subBlocks,
                    subBlocks * kQ5_KWordsPerBlock, parts, k, paddedN, width, codes, scales, threads,
                    [](const uint8_t *block, uint16_t *values, uint32_t *words) {
                      uint8_t scaleBytes[subBlocks], minBytes[subBlocks];
                      scalesAndMins(block + 4, scaleBytes, minBytes);
                      const uint8_t *highs = block + 16, *nibbles = highs + kSuperBlock / 8;
                      for (int64_t s = 0; s < subBlocks; ++s) {
                        values[s] = static_cast<uint16_t>(scaleBytes[s] | minBytes[s] << 8);
                        q4_KSubBlockWords(nibbles, s, words + s * kQ5_KWordsPerBlock);
                        words[s * kQ5_KWordsPerBlock + kQ4_0WordsPerBlock] = q5_KFifthBits(highs, s);
                      }
                      std::memcpy(values + subBlocks, block, 2 * sizeof(uint16_t)); // d, dmin
                    });
}

void widenQ5_KBlock(const uint8_t *block, float *values) {
  widenQ4_KLayoutBlock(block, block + 16, block + 16 + kSuperBlock / 8, values);
}

void dequantizeQ5_KRows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads) {
  dequantizeBlocks("dequantizeQ5_KRows", blocks, k, n, kSuperBlock, kQ5_KBlockBytes, out, threads, widenQ5_KBlock);
}

} // namespace gpt::kernels
