// What every weight format's quantization shares: the block of 32 weights along the reduction
// dimension K, and the fp16 and bf16 roundings. Each format's quantizer is its table row's
// (WeightFormatTraits::quantize, WeightFormats.h; the kernels are in FormatKernels.h).
#ifndef GPT_CC_KERNELS_QUANTIZATION_H
#define GPT_CC_KERNELS_QUANTIZATION_H

#include <cstdint>

namespace gpt::kernels {

/// Weights per quantization block (llama.cpp's QK8_0 and its other 32-weight blocks'), and per
/// sub-block of its K-quants.
constexpr int64_t kQuantBlock = 32;

/// `value` rounded to the nearest bf16, ties to even (NaN stays a quiet NaN): the upper 16 bits.
uint16_t toBf16(float value);
/// `value` rounded to the nearest IEEE half, ties to even, with subnormals; overflow gives +-inf.
uint16_t toFp16(float value);
float fromFp16(uint16_t bits);

/// `out[i] = toBf16(values[i])` for `count` values.
void quantizeBf16(const float *values, int64_t count, uint16_t *out);

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_QUANTIZATION_H
