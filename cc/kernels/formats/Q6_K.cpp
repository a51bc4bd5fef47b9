// q6_K's kernels (FormatKernels.h's q6_K section): its quantizer, the packing and reading of its
// lanes (a run of 16 six-bit codes in 3 words), the repacking of a GGUF file's super-blocks into
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

void quantizeQ6_K(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales, int64_t threads) {
  constexpr int64_t runs = kSuperBlock / kQ6_KRunValues, pairs = kSuperBlock / kQuantBlock;
  forEachBlockColumn(rows, cols, kSuperBlock, "q6_K's super-block", threads, [&](int64_t super, int64_t n) {
    const float *column = matrix + super * kSuperBlock * cols + n;
    float step[runs], largest = 0.0f;
    for (int64_t h = 0; h < runs; ++h) {
      float amax = 0.0f;
      for (int64_t i = 0; i < kQ6_KRunValues; ++i)
        amax = std::max(amax, std::fabs(column[(h * kQ6_KRunValues + i) * cols]));
      step[h] = amax / 31.5f;
      largest = std::max(largest, step[h]);
    }
    uint16_t *dRow = scales + (rows / kQuantBlock + super) * cols + n;
    // d rounded up to fp16, and each run's scale up to a multiple of it: no run's step is below
    // its max |w| / 31.5, so no code is clipped past half a step.
    *dRow = toFp16(largest / 127.0f);
    if (fromFp16(*dRow) * 127.0f < largest) ++*dRow;
    const float d = fromFp16(*dRow);
    int runScales[runs];
    for (int64_t h = 0; h < runs; ++h) {
      runScales[h] = d > 0.0f ? static_cast<int>(std::min(127.0f, std::ceil(step[h] / d))) : 0;
      // The codes against the scale as stored.
      const float scale = d * static_cast<float>(runScales[h]), inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
      for (int64_t i = 0; i < kQ6_KRunValues; ++i) {
        const int64_t row = super * kSuperBlock + h * kQ6_KRunValues + i;
        const float code = std::nearbyint(column[(row - super * kSuperBlock) * cols] * inverse) + 32.0f;
        codes[row * cols + n] = static_cast<uint8_t>(std::clamp(code, 0.0f, 63.0f));
      }
    }
    for (int64_t p = 0; p < pairs; ++p)
      scales[(super * pairs + p) * cols + n] = static_cast<uint16_t>(static_cast<uint8_t>(runScales[2 * p]) |
                                                                     static_cast<uint8_t>(runScales[2 * p + 1]) << 8);
  });
}

void q6_KRunWords(const uint8_t *codes, uint32_t *words) {
  words[0] = words[1] = words[2] = 0;
  for (int64_t i = 0; i < 4; ++i) {
    const uint8_t *q = codes + 4 * i;
    const uint32_t shift = static_cast<uint32_t>(8 * i);
    words[0] |= static_cast<uint32_t>((q[0] & 0x0F) | (q[2] & 0x0F) << 4) << shift;
    words[1] |= static_cast<uint32_t>((q[1] & 0x0F) | (q[3] & 0x0F) << 4) << shift;
    words[2] |= static_cast<uint32_t>(q[0] >> 4 | (q[1] >> 4) << 2 | (q[2] >> 4) << 4 | (q[3] >> 4) << 6) << shift;
  }
}

void packQ6_KLanes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed, int64_t threads) {
  checkLaneShape("packQ6_KLanes", rows, cols, width, kSuperBlock, "q6_K's super-block");
  checkCodeBits<6>("packQ6_KLanes", codes, rows, cols);
  const int64_t runs = rows / kQ6_KRunValues, panelRows = runs * kQ6_KWordsPerRun;
  parallelFor(cols / width, threads, [&](int64_t firstPanel, int64_t endPanel) {
    uint8_t run[kQ6_KRunValues];
    uint32_t words[kQ6_KWordsPerRun];
    for (int64_t panel = firstPanel; panel < endPanel; ++panel)
      for (int64_t h = 0; h < runs; ++h)
        for (int64_t c = 0; c < width; ++c) {
          const int64_t j = panel * width + c;
          for (int64_t r = 0; r < kQ6_KRunValues; ++r) run[r] = codes[(h * kQ6_KRunValues + r) * cols + j];
          q6_KRunWords(run, words);
          for (int64_t w = 0; w < kQ6_KWordsPerRun; ++w)
            packed[(panel * panelRows + h * kQ6_KWordsPerRun + w) * width + c] = words[w];
        }
  });
}

void dequantizeQ6_KLanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix) {
  checkLaneShape("dequantizeQ6_KLanes", rows, cols, width, kSuperBlock, "q6_K's super-block");
  const int64_t runs = rows / kQ6_KRunValues, panelRows = runs * kQ6_KWordsPerRun;
  const int64_t pairs = rows / kQuantBlock, scaleRows = pairs + rows / kSuperBlock;
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t h = 0; h < runs; ++h)
      for (int64_t c = 0; c < width; ++c) {
        const int64_t j = panel * width + c;
        const uint16_t *panelScales = scales + panel * scaleRows * width + c;
        const uint16_t pair = panelScales[h / 2 * width];
        const auto runScale = static_cast<int8_t>(h % 2 ? pair >> 8 : pair & 0xFF);
        // The f32 product of d and the run's scale, as gguf's and llama.cpp's dequantizers compute it.
        const float scale =
            fromFp16(panelScales[(pairs + h * kQ6_KRunValues / kSuperBlock) * width]) * static_cast<float>(runScale);
        const uint32_t *words = lanes + (panel * panelRows + h * kQ6_KWordsPerRun) * width + c;
        const uint32_t low0 = words[0], low1 = words[width], high = words[2 * width];
        for (int64_t i = 0; i < 4; ++i) {
          const uint32_t lowBytes[2] = {low0 >> (8 * i), low1 >> (8 * i)}, highBits = high >> (8 * i);
          for (int64_t l = 0; l < 4; ++l) {
            const uint32_t q = ((lowBytes[l % 2] >> (4 * (l / 2))) & 0x0Fu) | ((highBits >> (2 * l)) & 0x03u) << 4;
            matrix[(h * kQ6_KRunValues + l + 4 * i) * cols + j] = scale * static_cast<float>(static_cast<int>(q) - 32);
          }
        }
      }
}

void q6_KCodes(const uint8_t *block, uint8_t *codes) {
  // Weight j of run s of 32 in half g of 128 takes the low (s < 2) or high nibble of
  // low[64 g + 32 (s % 2) + j] and bits 2 s, 2 s + 1 of high[32 g + j] (dequantizeQ6_KRows).
  const uint8_t *low = block, *high = block + kSuperBlock / 2;
  for (int64_t g = 0; g < 2; ++g)
    for (int64_t s = 0; s < 4; ++s)
      for (int64_t j = 0; j < kQuantBlock; ++j)
        codes[128 * g + 32 * s + j] = static_cast<uint8_t>(((low[64 * g + 32 * (s % 2) + j] >> (4 * (s / 2))) & 0x0F) |
                                                           ((high[32 * g + j] >> (2 * s)) & 0x03) << 4);
}

namespace {
#ifdef __SSE2__
/// Run h (0 .. 15) of those codes, 16 h .. 16 h + 15, one per byte: q6_KCodes 16 at a time. Inline
/// in its loops over h, whose shifts it then knows: out of line it was 15% of a q6_K repack.
inline __m128i q6_KRunCodes(const uint8_t *block, int64_t h) {
  // Run h = 8 g + 2 s + half: half `half` of q6_KCodes' run of 32 s in half g of 128.
  const int64_t g = h / 8, s = h % 8 / 2, half = h % 2;
  const __m128i nibble = _mm_set1_epi8(0x0F), pair = _mm_set1_epi8(0x03);
  __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + 64 * g + 32 * (s % 2) + 16 * half));
  __m128i top = _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + kSuperBlock / 2 + 32 * g + 16 * half));
  codes = _mm_and_si128(_mm_srl_epi16(codes, _mm_cvtsi32_si128(static_cast<int>(4 * (s / 2)))), nibble);
  top = _mm_and_si128(_mm_srl_epi16(top, _mm_cvtsi32_si128(static_cast<int>(2 * s))), pair);
  return _mm_or_si128(codes, _mm_slli_epi16(top, 4));
}
#endif

constexpr int64_t kQ6_KRuns = kSuperBlock / kQ6_KRunValues;

/// A q6_K super-block's 16 runs as their lane words, run h's 3 at words[3 h ..] (q6_KCodes, then
/// q6_KRunWords per run; in SSE2 four runs at a time, with no byte array between).
void q6_KSuperBlockWords(const uint8_t *block, uint32_t *words) {
#ifdef __SSE2__
  __m128i runs[kQ6_KRuns];
  for (int64_t h = 0; h < kQ6_KRuns; ++h) runs[h] = q6_KRunCodes(block, h);
  // Lane i of a run (32 bits) holds codes 4 i .. 4 i + 3, a byte each; byte i of each of its
  // words is a function of that lane alone (q6_KRunWords), computed in the lane, then four runs'
  // lanes narrowed to bytes together: word k of run 4 q + r in lane r of `narrowed`.
  auto bits = [](__m128i lane, int shift, int mask) {
    return _mm_and_si128(_mm_srli_epi32(lane, shift), _mm_set1_epi32(mask));
  };
  for (int q = 0; q < kQ6_KRuns / 4; ++q) {
    __m128i perRun[kQ6_KWordsPerRun][4];
    for (int r = 0; r < 4; ++r) {
      const __m128i lane = runs[4 * q + r];
      perRun[0][r] = _mm_or_si128(bits(lane, 0, 0x0F), bits(lane, 12, 0xF0));
      perRun[1][r] = _mm_or_si128(bits(lane, 8, 0x0F), bits(lane, 20, 0xF0));
      perRun[2][r] = _mm_or_si128(_mm_or_si128(bits(lane, 4, 0x03), bits(lane, 10, 0x0C)),
                                  _mm_or_si128(bits(lane, 16, 0x30), bits(lane, 22, 0xC0)));
    }
    for (int k = 0; k < kQ6_KWordsPerRun; ++k) {
      const __m128i narrowed =
          _mm_packus_epi16(_mm_packs_epi32(perRun[k][0], perRun[k][1]), _mm_packs_epi32(perRun[k][2], perRun[k][3]));
      uint32_t four[4];
      _mm_storeu_si128(reinterpret_cast<__m128i *>(four), narrowed);
      for (int r = 0; r < 4; ++r) words[(4 * q + r) * kQ6_KWordsPerRun + k] = four[r];
    }
  }
#else
  uint8_t codes[kSuperBlock];
  q6_KCodes(block, codes);
  for (int64_t h = 0; h < kQ6_KRuns; ++h) q6_KRunWords(codes + h * kQ6_KRunValues, words + h * kQ6_KWordsPerRun);
#endif
}
} // namespace

void repackQ6_KRows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  constexpr int64_t runs = kSuperBlock / kQ6_KRunValues, pairs = kSuperBlock / kQuantBlock;
  constexpr int64_t scalesAt = kSuperBlock / 2 + kSuperBlock / 4, dAt = scalesAt + runs;
  // A column's sub-block values are its pairs of runs' int8 scales, its header value d
  // (FormatKernels.h's q6_K section).
  repackSuperBlocks("repackQ6_KRows", "q6_K's super-block", "q6_k", kQ6_KBlockBytes, kQ6_KScaleRows - pairs,
                    runs * kQ6_KWordsPerRun, parts, k, paddedN, width, codes, scales, threads,
                    [](const uint8_t *block, uint16_t *values, uint32_t *words) {
                      for (int64_t p = 0; p < pairs; ++p)
                        values[p] = static_cast<uint16_t>(block[scalesAt + 2 * p] | block[scalesAt + 2 * p + 1] << 8);
                      std::memcpy(values + pairs, block + dAt, sizeof(uint16_t));
                      q6_KSuperBlockWords(block, words);
                    });
}

void widenQ6_KBlock(const uint8_t *block, float *values) {
  // Run h of 16 weights (q6_KCodes' codes 16 h ..) is q - 32 times the f32 product of d and the
  // run's int8 scale: the same products, 4 at once (SSE2) or one at a time.
  const auto *scales = reinterpret_cast<const int8_t *>(block + kSuperBlock / 2 + kSuperBlock / 4);
  const float d = halfAt(block + kSuperBlock / 2 + kSuperBlock / 4 + kSuperBlock / 16);
#ifndef __SSE2__
  uint8_t codes[kSuperBlock];
  q6_KCodes(block, codes);
#endif
  for (int64_t h = 0; h < kSuperBlock / kQ6_KRunValues; ++h) {
    const float scale = d * static_cast<float>(scales[h]);
    float *run = values + kQ6_KRunValues * h;
#ifdef __SSE2__
    const __m128i codes = q6_KRunCodes(block, h);
    const __m128 scale4 = _mm_set1_ps(scale), offset = _mm_set1_ps(32.0f);
    // q - 32 is exact in f32 (|q - 32| <= 32), so subtracting after the conversion gives its bits.
    for (int quarter = 0; quarter < 4; ++quarter)
      _mm_storeu_ps(run + 4 * quarter, _mm_mul_ps(scale4, _mm_sub_ps(quarterAsFloats(codes, quarter), offset)));
#else
    for (int64_t i = 0; i < kQ6_KRunValues; ++i)
      run[i] = scale * static_cast<float>(static_cast<int>(codes[kQ6_KRunValues * h + i]) - 32);
#endif
  }
}

void dequantizeQ6_KRows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads) {
  dequantizeBlocks("dequantizeQ6_KRows", blocks, k, n, kSuperBlock, kQ6_KBlockBytes, out, threads, widenQ6_KBlock);
}

} // namespace gpt::kernels
