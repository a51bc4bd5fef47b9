// The scales of llama.cpp's K-quant blocks as the K-quants' kernels (formats/) read them: an fp16
// field, and q4_K's and q5_K's packed 6-bit sub-block scales and mins.
#ifndef GPT_CC_KERNELS_KQUANTSCALES_H
#define GPT_CC_KERNELS_KQUANTSCALES_H

#include "cc/kernels/Quantization.h"

#include <cstdint>
#include <cstring>

namespace gpt::kernels {

/// The fp16 value at `bytes` (unaligned), as f32.
inline float halfAt(const uint8_t *bytes) {
  uint16_t bits;
  std::memcpy(&bits, bytes, sizeof bits);
  return fromFp16(bits);
}

/// q4_K's and q5_K's eight 6-bit sub-block scales and mins from their 12 bytes: bytes 0-3 hold
/// scales 0-3 (low 6 bits), 4-7 mins 0-3, 8-11 the low 4 bits of scales (mins) 4-7 in their low
/// (high) nibbles, whose top 2 bits are the top bits of bytes 0-3 (4-7).
inline void scalesAndMins(const uint8_t *packed, uint8_t *scales, uint8_t *mins) {
  for (int64_t s = 0; s < 4; ++s) {
    scales[s] = packed[s] & 0x3F;
    mins[s] = packed[s + 4] & 0x3F;
    scales[s + 4] = static_cast<uint8_t>((packed[s + 8] & 0x0F) | ((packed[s] >> 2) & 0x30));
    mins[s + 4] = static_cast<uint8_t>((packed[s + 8] >> 4) | ((packed[s + 4] >> 2) & 0x30));
  }
}
inline void scalesAndMins(const uint8_t *packed, float *scales, float *mins) {
  uint8_t scaleBytes[8], minBytes[8];
  scalesAndMins(packed, scaleBytes, minBytes);
  for (int64_t s = 0; s < 8; ++s) {
    scales[s] = static_cast<float>(scaleBytes[s]);
    mins[s] = static_cast<float>(minBytes[s]);
  }
}

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_KQUANTSCALES_H
