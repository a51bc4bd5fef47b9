// llama.cpp's blocks widened to f32, bit for bit as its and gguf's dequantizers compute them: each
// GGUF type's widening (FormatKernels.h), which its row of the block-type table points at
// (GgufBlockType::dequantizeRows, BlockTranscoding.h). How a model that stores f32 reads a
// quantized GGUF file, and how a file's token embedding becomes the table tokens are looked up in.
#include "cc/kernels/FormatKernels.h"
#include "cc/kernels/KQuantScales.h"
#include "cc/kernels/ParallelFor.h"

#include <cstring>
#include <stdexcept>
#include <string>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace gpt::kernels {

namespace {

/// Calls `widen(block, header, out)` for each of the n * k / 32 blocks of `blocks`, with the
/// block's fp16 header values (scale, and q4_1's min) as floats and its 32 outputs.
template <typename Widen>
void dequantizeRows(const char *what, const uint8_t *blocks, int64_t k, int64_t n, int64_t blockBytes, int64_t halves,
                    float *out, Widen widen) {
  if (k <= 0 || k % kQuantBlock != 0 || n < 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) +
                                " is not a positive multiple of the quantization block (32)");
  const int64_t count = n * (k / kQuantBlock);
  for (int64_t b = 0; b < count; ++b) {
    const uint8_t *block = blocks + b * blockBytes;
    float header[2] = {0.0f, 0.0f};
    for (int64_t h = 0; h < halves; ++h) {
      uint16_t bits;
      std::memcpy(&bits, block + 2 * h, sizeof bits);
      header[h] = fromFp16(bits);
    }
    widen(block + 2 * halves, header, out + b * kQuantBlock);
  }
}

} // namespace

void dequantizeQ8_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out) {
  dequantizeRows("dequantizeQ8_0Rows", blocks, k, n, kQ8_0BlockBytes, 1, out,
                 [](const uint8_t *codes, const float *header, float *values) {
                   for (int64_t i = 0; i < kQuantBlock; ++i)
                     values[i] = static_cast<float>(static_cast<int8_t>(codes[i])) * header[0];
                 });
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

namespace {

/// Calls `widen(block, out)` for each of the n * k / `values` blocks of `blockBytes` bytes, `out`
/// being the block's `values` outputs; rows are split over `threads`.
template <typename Widen>
void dequantizeBlocks(const char *what, const uint8_t *blocks, int64_t k, int64_t n, int64_t values, int64_t blockBytes,
                      float *out, int64_t threads, Widen widen) {
  if (k <= 0 || k % values != 0 || n < 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) +
                                " is not a positive multiple of the block (" + std::to_string(values) + ")");
  const int64_t perRow = k / values;
  parallelFor(n, threads, [&](int64_t firstRow, int64_t endRow) {
    for (int64_t b = firstRow * perRow; b < endRow * perRow; ++b) widen(blocks + b * blockBytes, out + b * values);
  });
}

/// Weight i of a q5_0/q5_1 block: low nibble of byte i (i < 16) or high nibble of byte i - 16,
/// with bit i of qh as its fifth bit.
uint32_t fiveBitCode(const uint8_t *nibbles, uint32_t highBits, int64_t i) {
  const uint32_t low = i < 16 ? nibbles[i] & 0x0Fu : nibbles[i - 16] >> 4;
  return low | ((highBits >> i) & 1u) << 4;
}

} // namespace

void widenQ5_0Block(const uint8_t *block, float *values) {
  const float d = halfAt(block);
  uint32_t highBits;
  std::memcpy(&highBits, block + 2, sizeof highBits);
  for (int64_t i = 0; i < kQuantBlock; ++i)
    values[i] = d * static_cast<float>(static_cast<int>(fiveBitCode(block + 6, highBits, i)) - 16);
}

void widenQ5_1Block(const uint8_t *block, float *values) {
  const float d = halfAt(block), m = halfAt(block + 2);
  uint32_t highBits;
  std::memcpy(&highBits, block + 4, sizeof highBits);
  for (int64_t i = 0; i < kQuantBlock; ++i) {
    // Product and sum rounded apart, as gguf's numpy computes them.
    const float product = d * static_cast<float>(fiveBitCode(block + 8, highBits, i));
    values[i] = product + m;
  }
}

namespace {

#ifdef __SSE2__
/// Four floats of `codes` (16 unsigned bytes, each below 256) from byte 4 `quarter` on.
__m128 quarterAsFloats(__m128i codes, int quarter) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i words = quarter < 2 ? _mm_unpacklo_epi8(codes, zero) : _mm_unpackhi_epi8(codes, zero);
  return _mm_cvtepi32_ps(quarter % 2 == 0 ? _mm_unpacklo_epi16(words, zero) : _mm_unpackhi_epi16(words, zero));
}
#endif

/// q4_K and q5_K: sub-block s (32 weights) takes the nibbles of bytes 32 (s / 2) .. + 31 of
/// `nibbles`, low ones for even s, high ones for odd s; q5_K adds bit s of highs[i] as the fifth bit
/// (`highs` null for q4_K). Each weight is (d * scale) * q - (dmin * min): the same products and
/// differences, rounded one at a time, whether 4 at once (SSE2, a load's LM head and token table
/// are hundreds of millions of weights) or one.
void widenKBlock(const uint8_t *block, const uint8_t *highs, const uint8_t *nibbles, float *values) {
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

} // namespace

void widenQ4_KBlock(const uint8_t *block, float *values) { widenKBlock(block, nullptr, block + 16, values); }

void widenQ5_KBlock(const uint8_t *block, float *values) { widenKBlock(block, block + 16, block + 16 + 32, values); }

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

void dequantizeQ5_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads) {
  dequantizeBlocks("dequantizeQ5_0Rows", blocks, k, n, kQuantBlock, kQ5_0BlockBytes, out, threads, widenQ5_0Block);
}

void dequantizeQ5_1Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads) {
  dequantizeBlocks("dequantizeQ5_1Rows", blocks, k, n, kQuantBlock, kQ5_1BlockBytes, out, threads, widenQ5_1Block);
}

void dequantizeQ4_KRows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads) {
  dequantizeBlocks("dequantizeQ4_KRows", blocks, k, n, kSuperBlock, kQ4_KBlockBytes, out, threads, widenQ4_KBlock);
}

void dequantizeQ5_KRows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads) {
  dequantizeBlocks("dequantizeQ5_KRows", blocks, k, n, kSuperBlock, kQ5_KBlockBytes, out, threads, widenQ5_KBlock);
}

void dequantizeQ6_KRows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads) {
  dequantizeBlocks("dequantizeQ6_KRows", blocks, k, n, kSuperBlock, kQ6_KBlockBytes, out, threads, widenQ6_KBlock);
}

} // namespace gpt::kernels
