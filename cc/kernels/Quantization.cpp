// The fp16 and bf16 roundings (Quantization.h), shared by every format's kernels; each format's
// quantizer is in its own file in formats/ (FormatKernels.h).
#include "cc/kernels/Quantization.h"

#include <cstring>

namespace gpt::kernels {
namespace {

uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
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

} // namespace gpt::kernels
