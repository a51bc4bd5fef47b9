// q8_0's kernels (FormatKernels.h's q8_0 section): its quantizer, as llama.cpp's reference bit for
// bit, the packing and reading of its lanes, the repacking of a GGUF file's blocks into them (and of
// the LM head's, quantized from the [V, D] table), their widening to f32, and the conversions into
// q8_0 that keep a block's codes. q8_0 is the format every GGUF type converts into: the other
// types' blocks are widened and requantized (widenAsQ8_0, FormatKernels.h).
#include "cc/kernels/FormatKernelUtils.h"
#include "cc/kernels/GgufRepacking.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace gpt::kernels {
namespace {
/// q8_0 of the block of 32 weights w[i * stride]: writes its codes to `codes` and returns the fp16
/// bits of its scale. One definition for the matrix and the row layouts, so both give the same
/// bits. A code is std::round(w / d) (half away from zero; |w / d| <= 127): truncated by one
/// conversion and corrected by the exact remainder, with no branch and no libm call, so the loop
/// vectorizes (a third of the time of the tied LM head's quantization with std::round).
uint16_t quantizeBlockQ8_0(const float *w, int64_t stride, int8_t *codes) {
#ifdef __SSE2__
  // Contiguous weights (the rows layout: a load's LM head, hundreds of millions of weights) four at
  // a time, with the same operations in the same rounding: a compiler without -ffast-math keeps
  // the scalar max reduction below one weight at a time (std::max is not maxps), and this function
  // was 27% of an 8B load. max(v, amax) keeps amax for a NaN v, as std::max(amax, v) does, and max
  // is associative otherwise, so any order gives its bits.
  if (stride == 1) {
    const __m128 magnitude = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
    __m128 most = _mm_setzero_ps();
    for (int64_t i = 0; i < kQuantBlock; i += 4) most = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(w + i), magnitude), most);
    most = _mm_max_ps(most, _mm_shuffle_ps(most, most, _MM_SHUFFLE(1, 0, 3, 2)));
    most = _mm_max_ps(most, _mm_shuffle_ps(most, most, _MM_SHUFFLE(2, 3, 0, 1)));
    const float d = _mm_cvtss_f32(most) / 127.0f;
    if (d == 0.0f) {
      std::fill(codes, codes + kQuantBlock, int8_t{0});
      return toFp16(d);
    }
    const __m128 scale = _mm_set1_ps(d), half = _mm_set1_ps(0.5f), minusHalf = _mm_set1_ps(-0.5f);
    __m128i words[kQuantBlock / 4];
    for (int64_t i = 0; i < kQuantBlock; i += 4) {
      const __m128 v = _mm_div_ps(_mm_loadu_ps(w + i), scale);
      const __m128i truncated = _mm_cvttps_epi32(v);
      const __m128 remainder = _mm_sub_ps(v, _mm_cvtepi32_ps(truncated));
      // A true comparison is -1: up by one at >= 0.5, down by one at <= -0.5.
      words[i / 4] = _mm_add_epi32(_mm_sub_epi32(truncated, _mm_castps_si128(_mm_cmpge_ps(remainder, half))),
                                   _mm_castps_si128(_mm_cmple_ps(remainder, minusHalf)));
    }
    for (int64_t i = 0; i < kQuantBlock / 16; ++i) {
      const __m128i bytes = _mm_packs_epi16(_mm_packs_epi32(words[4 * i], words[4 * i + 1]),
                                            _mm_packs_epi32(words[4 * i + 2], words[4 * i + 3]));
      _mm_storeu_si128(reinterpret_cast<__m128i *>(codes + 16 * i), bytes);
    }
    return toFp16(d);
  }
#endif
  float amax = 0.0f;
  for (int64_t i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(w[i * stride]));
  const float d = amax / 127.0f;
  if (d == 0.0f) {
    std::fill(codes, codes + kQuantBlock, int8_t{0});
  } else {
    for (int64_t i = 0; i < kQuantBlock; ++i) {
      const float v = w[i * stride] / d;
      const int truncated = static_cast<int>(v);
      const float remainder = v - static_cast<float>(truncated); // exact: |remainder| < 1
      codes[i] = static_cast<int8_t>(truncated + (remainder >= 0.5f) - (remainder <= -0.5f));
    }
  }
  return toFp16(d);
}
} // namespace

void quantizeQ8_0(const float *matrix, int64_t rows, int64_t cols, int8_t *codes, uint16_t *scales, int64_t threads) {
  forEachBlockColumn(rows, cols, kQuantBlock, "the quantization block", threads, [&](int64_t b, int64_t n) {
    const int64_t first = b * kQuantBlock;
    int8_t block[kQuantBlock];
    scales[b * cols + n] = quantizeBlockQ8_0(matrix + first * cols + n, cols, block);
    for (int64_t i = 0; i < kQuantBlock; ++i) codes[(first + i) * cols + n] = block[i];
  });
}

void quantizeQ8_0Block(const float *weights, uint8_t *block) {
  int8_t codes[kQuantBlock];
  const uint16_t scale = quantizeBlockQ8_0(weights, 1, codes);
  std::memcpy(block, &scale, sizeof scale);
  std::memcpy(block + 2, codes, sizeof codes);
}

void quantizeQ8_0Rows(const float *matrix, int64_t n, int64_t k, uint8_t *blocks, int64_t threads) {
  if (n < 0 || k < 0 || k % kQuantBlock != 0)
    throw std::invalid_argument("quantizeQ8_0Rows: K = " + std::to_string(k) +
                                " is not a multiple of the quantization block (" + std::to_string(kQuantBlock) + ")");
  const int64_t perRow = k / kQuantBlock, blockBytes = 2 + kQuantBlock;
  parallelFor(n, threads, [&](int64_t firstRow, int64_t endRow) {
    for (int64_t b = firstRow * perRow; b < endRow * perRow; ++b)
      quantizeQ8_0Block(matrix + b * kQuantBlock, blocks + b * blockBytes);
  });
}

namespace {

/// The row of K that byte `i` of q8_0 word row `r` holds: lane q = r % 8 of block r / 8 takes the
/// block's rows q, q + 8, q + 16, q + 24.
int64_t q8_0Row(int64_t r, int64_t i) {
  const int64_t lanes = kQuantBlock / kQ8_0RowsPerWord;
  return r / lanes * kQuantBlock + r % lanes + lanes * i;
}

} // namespace

void packQ8_0Lanes(const int8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed, int64_t threads) {
  checkLaneShape("packQ8_0Lanes", rows, cols, width, kQuantBlock, "the quantization block");
  writeLanes(rows, cols, width, kQ8_0RowsPerWord, packed, threads, [&](int64_t r, int64_t j) {
    uint32_t word = 0;
    for (int64_t i = 0; i < kQ8_0RowsPerWord; ++i)
      word |= static_cast<uint32_t>(static_cast<uint8_t>(codes[q8_0Row(r, i) * cols + j])) << (8 * i);
    return word;
  });
}

void dequantizeQ8_0Lanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix) {
  readQuantizedLanes("dequantizeQ8_0Lanes", lanes, scales, rows, cols, width, kQ8_0RowsPerWord, 1,
                     [&](int64_t r, int64_t j, uint32_t word, float scale, float) {
                       for (int64_t i = 0; i < kQ8_0RowsPerWord; ++i)
                         matrix[q8_0Row(r, i) * cols + j] = static_cast<int8_t>(word >> (8 * i)) * scale;
                     });
}

namespace {

/// Words of codes one block of 32 weights fills in q8_0's lanes.
constexpr int64_t kQ8_0WordsPerBlock = kQuantBlock / kQ8_0RowsPerWord;

/// One q8_0 block's 32 codes as its 8 lane words: byte i of word q is code q + 8 i.
void q8_0BlockWords(const uint8_t *codes, uint32_t *words) {
#ifdef __SSE2__
  // A 4 x 8 byte transpose in four unpacks (SSE2 is every x86-64's): interleaving the runs
  // 0-7 with 8-15 and 16-23 with 24-31 by bytes, then those by 16-bit pairs, puts codes q, q + 8,
  // q + 16, q + 24 side by side (the byte loop took 3 times the q4_0 repacking's time).
  const __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i *>(codes));
  const __m128i high = _mm_loadu_si128(reinterpret_cast<const __m128i *>(codes + 16));
  const __m128i pairsLow = _mm_unpacklo_epi8(low, _mm_srli_si128(low, 8));    // c0 c8 c1 c9 ...
  const __m128i pairsHigh = _mm_unpacklo_epi8(high, _mm_srli_si128(high, 8)); // c16 c24 c17 c25 ...
  _mm_storeu_si128(reinterpret_cast<__m128i *>(words), _mm_unpacklo_epi16(pairsLow, pairsHigh));
  _mm_storeu_si128(reinterpret_cast<__m128i *>(words + 4), _mm_unpackhi_epi16(pairsLow, pairsHigh));
#else
  for (int64_t q = 0; q < kQ8_0WordsPerBlock; ++q) {
    uint32_t word = 0;
    for (int64_t i = 0; i < kQ8_0RowsPerWord; ++i)
      word |= static_cast<uint32_t>(codes[q + kQ8_0WordsPerBlock * i]) << (8 * i);
    words[q] = word;
  }
#endif
}

constexpr LaneFormat kQ8_0Lanes{"repackQ8_0Rows", "q8_0", kQ8_0BlockBytes, 1, kQ8_0WordsPerBlock, 0u, q8_0BlockWords};

} // namespace

// One array of blocks: the layout alone, unchecked (quantizeRowsToQ8_0Lanes' own blocks). Parts: a
// file's tensors, each block's fp16 fields checked.
void repackQ8_0Rows(const uint8_t *blocks, int64_t k, int64_t n, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  repackLanes<kQ8_0Lanes>({{blocks, n}}, false, k, paddedN, width, codes, scales, threads);
}

void repackQ8_0Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  repackLanes<kQ8_0Lanes>(parts, true, k, paddedN, width, codes, scales, threads);
}

void quantizeRowsToQ8_0Lanes(const float *matrix, int64_t n, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                             uint16_t *scales, int64_t threads) {
  if (k <= 0 || k % kQuantBlock != 0)
    throw std::invalid_argument("quantizeRowsToQ8_0Lanes: K = " + std::to_string(k) +
                                " is not a positive multiple of the quantization block (32)");
  if (n < 0 || paddedN < n || width <= 0 || paddedN % width != 0)
    throw std::invalid_argument("quantizeRowsToQ8_0Lanes: the padded column count " + std::to_string(paddedN) +
                                " must be at least " + std::to_string(n) + " and a multiple of the panel width " +
                                std::to_string(width));
  const int64_t rowBytes = k / kQuantBlock * kQ8_0BlockBytes, panels = paddedN / width;
  // Chunks of panels whose blocks take about 4 MiB: cache-sized, and many chunks per thread.
  const int64_t chunk = std::max<int64_t>(1, (int64_t{4} << 20) / (rowBytes * width));
  parallelFor((panels + chunk - 1) / chunk, threads, [&](int64_t firstChunk, int64_t endChunk) {
    std::unique_ptr<uint8_t[]> blocks(new uint8_t[chunk * width * rowBytes]); // written before read: no zero fill
    for (int64_t c = firstChunk; c < endChunk; ++c) {
      const int64_t firstPanel = c * chunk, endPanel = std::min(panels, firstPanel + chunk);
      const int64_t firstRow = firstPanel * width,
                    rows = std::max<int64_t>(0, std::min(n, endPanel * width) - firstRow);
      quantizeQ8_0Rows(matrix + firstRow * k, rows, k, blocks.get());
      // Panels are independent: these are written at their own offsets.
      repackQ8_0Rows(blocks.get(), k, rows, (endPanel - firstPanel) * width, width,
                     codes + firstPanel * (k / kQ8_0RowsPerWord) * width,
                     scales + firstPanel * (k / kQuantBlock) * width);
    }
  });
}

void dequantizeQ8_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out) {
  dequantizeRows("dequantizeQ8_0Rows", blocks, k, n, kQ8_0BlockBytes, 1, out,
                 [](const uint8_t *codes, const float *header, float *values) {
                   for (int64_t i = 0; i < kQuantBlock; ++i)
                     values[i] = static_cast<float>(static_cast<int8_t>(codes[i])) * header[0];
                 });
}

namespace {

/// A q4_0 (five = false) or q5_0 block as a q8_0 block: the same fp16 scale, and codes q - 8 (q4_0)
/// or q - 16 (q5_0, with bit i of qh as code i's fifth bit), exactly.
template <bool five> void narrowCodesAsQ8_0(const uint8_t *block, uint8_t *out) {
  const uint8_t *nibbles = block + (five ? 6 : 2);
  uint32_t highBits = 0;
  if (five) std::memcpy(&highBits, block + 2, sizeof highBits);
  std::memcpy(out, block, 2);
  for (int64_t i = 0; i < kQuantBlock; ++i) {
    const uint32_t low = i < 16 ? nibbles[i] & 0x0Fu : nibbles[i - 16] >> 4;
    const int code = static_cast<int>(low | ((highBits >> i) & 1u) << 4) - (five ? 16 : 8);
    out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(code));
  }
}

} // namespace

void q4_0AsQ8_0(const uint8_t *block, uint8_t *out) { narrowCodesAsQ8_0<false>(block, out); }

void q5_0AsQ8_0(const uint8_t *block, uint8_t *out) { narrowCodesAsQ8_0<true>(block, out); }

} // namespace gpt::kernels
