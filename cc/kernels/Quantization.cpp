// The fp16 and bf16 roundings (Quantization.h) and each format's quantizer (FormatKernels.h).
#include "cc/kernels/Quantization.h"

#include "cc/kernels/FormatKernels.h"
#include "cc/kernels/ParallelFor.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gpt::kernels {
namespace {

uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

/// Calls `quantize(block, n)` for column n of every block of `blockRows` rows of K in a [rows, cols]
/// matrix, the blocks split over `threads` threads; throws unless rows is a multiple of `blockRows`
/// (`what`: the block's name). A template: each format's per-column loops compile as written inline.
template <typename QuantizeColumn>
void forEachBlockColumn(int64_t rows, int64_t cols, int64_t blockRows, const char *what, int64_t threads,
                        QuantizeColumn quantize) {
  if (rows < 0 || cols < 0 || rows % blockRows != 0)
    throw std::invalid_argument("the reduction dimension K = " + std::to_string(rows) + " is not a multiple of " +
                                what + " (" + std::to_string(blockRows) + ")");
  parallelFor(rows / blockRows, threads, [&](int64_t firstBlock, int64_t endBlock) {
    for (int64_t block = firstBlock; block < endBlock; ++block)
      for (int64_t n = 0; n < cols; ++n) quantize(block, n);
  });
}

} // namespace

uint16_t toBf16(float value) {
  uint32_t bits = bitsOf(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u); // quiet NaN
  // Adding 0x7fff plus the lowest kept bit carries into the kept bits exactly when the dropped
  // half is above one half ulp, or equal to it with an odd kept part: round half to even.
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

uint16_t toFp16(float value) {
  uint32_t bits = bitsOf(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u; // >= 65520 rounds past 65504: infinity
  const uint32_t exponent = magnitude >> 23, mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  // Round `value` to `kept` with `dropped` bits below it, half to even.
  auto roundEven = [](uint32_t kept, uint32_t dropped, uint32_t half) {
    return dropped > half || (dropped == half && (kept & 1u)) ? kept + 1 : kept;
  };
  if (magnitude < 0x38800000u) {              // below 2^-14: a subnormal half, n * 2^-24
    if (magnitude < 0x33000000u) return sign; // below 2^-25 (half the smallest subnormal)
    const uint32_t shift = 126 - exponent;    // 14 .. 24
    const uint32_t kept = mantissa >> shift, dropped = mantissa & ((1u << shift) - 1);
    return sign | static_cast<uint16_t>(roundEven(kept, dropped, 1u << (shift - 1)));
  }
  const uint32_t kept = ((exponent - 112) << 10) | ((magnitude & 0x7fffffu) >> 13);
  return sign | static_cast<uint16_t>(roundEven(kept, magnitude & 0x1fffu, 0x1000u));
}

float fromFp16(uint16_t bits) {
  // By the bits, with no libm call (a load converts one or two scales per block of 32 weights):
  // a normal half's exponent is rebiased (15 -> 127) and its mantissa widened; a subnormal is its
  // mantissa times 2^-24, exactly; infinity and NaN keep their mantissa.
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t magnitudeBits = bits & 0x7fffu;
  uint32_t out;
  if (magnitudeBits >= 0x7c00u) {
    out = 0x7f800000u | (magnitudeBits & 0x3ffu) << 13;
  } else if (magnitudeBits >= 0x0400u) {
    out = (magnitudeBits + ((127u - 15u) << 10)) << 13;
  } else {
    out = bitsOf(static_cast<float>(magnitudeBits) * 0x1p-24f);
  }
  out |= sign;
  float result;
  std::memcpy(&result, &out, sizeof result);
  return result;
}

void quantizeBf16(const float *values, int64_t count, uint16_t *out) {
  for (int64_t i = 0; i < count; ++i) out[i] = toBf16(values[i]);
}

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

void quantizeQ4_1(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales, int64_t threads) {
  forEachBlockColumn(rows, cols, kQuantBlock, "the quantization block", threads, [&](int64_t block, int64_t n) {
    const int64_t first = block * kQuantBlock;
    float lo = matrix[first * cols + n], hi = lo;
    for (int64_t k = first; k < first + kQuantBlock; ++k) {
      lo = std::min(lo, matrix[k * cols + n]);
      hi = std::max(hi, matrix[k * cols + n]);
    }
    const float d = (hi - lo) / 15.0f, inverse = d == 0.0f ? 0.0f : 1.0f / d;
    scales[(2 * block) * cols + n] = toFp16(d);
    scales[(2 * block + 1) * cols + n] = toFp16(lo);
    for (int64_t k = first; k < first + kQuantBlock; ++k) {
      // Two statements, as llama.cpp writes them: no multiply-add contracted into one rounding.
      const float scaled = (matrix[k * cols + n] - lo) * inverse;
      const float shifted = scaled + 0.5f;
      codes[k * cols + n] = static_cast<uint8_t>(std::min(15.0f, std::trunc(shifted)));
    }
  });
}

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

} // namespace gpt::kernels
