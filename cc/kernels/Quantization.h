// Weight quantization done once, when a model's weights are bound: bf16, and llama.cpp's q8_0 and
// q4_0 block formats, over blocks of 32 consecutive weights along the reduction dimension K.
#ifndef GPT_CC_KERNELS_QUANTIZATION_H
#define GPT_CC_KERNELS_QUANTIZATION_H

#include <cstdint>

namespace gpt::kernels {

/// Weights per quantization block (llama.cpp's QK8_0 and QK4_0).
constexpr int64_t kQuantBlock = 32;

/// `value` rounded to the nearest bf16, ties to even (NaN stays a quiet NaN): the upper 16 bits.
uint16_t toBf16(float value);
/// `value` rounded to the nearest IEEE half, ties to even, with subnormals; overflow gives +-inf.
uint16_t toFp16(float value);
float fromFp16(uint16_t bits);

/// `out[i] = toBf16(values[i])` for `count` values.
void quantizeBf16(const float *values, int64_t count, uint16_t *out);

/// q8_0 of a row-major [K, N] matrix, blocks of kQuantBlock rows of one column: per block,
/// d = max|w| / 127 (f32), `scales[b][n]` = toFp16(d), and `codes[k][n]` = round(w / d) (half
/// away from zero) in [-127, 127], 0 for an all-zero block. K must be a multiple of kQuantBlock
/// (std::invalid_argument otherwise).
void quantizeQ8_0(const float *matrix, int64_t rows, int64_t cols, int8_t *codes, uint16_t *scales);

/// q4_0 of a row-major [K, N] matrix, blocks as for q8_0: per block, m = the weight of largest
/// magnitude with its sign (the first one on a tie), d = m / -8 (f32), `scales[b][n]` =
/// toFp16(d), and `codes[k][n]` = min(15, trunc(w / d + 8.5)) in [0, 15], 8 (zero) for an all-zero
/// block; a weight dequantizes to (code - 8) * d.
void quantizeQ4_0(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales);

/// Bytes of one llama.cpp block: an fp16 scale, then 32 int8 codes (q8_0) or 16 bytes of 4-bit
/// codes, byte i holding code i in its low nibble and code i + 16 in its high one (q4_0).
constexpr int64_t kQ8_0BlockBytes = 2 + kQuantBlock;
constexpr int64_t kQ4_0BlockBytes = 2 + kQuantBlock / 2;

/// A weight quantized by llama.cpp (a GGUF tensor), laid out as compiled code reads it without
/// widening it: `blocks` holds `n` rows of `k` weights (torch's [out, in] layout: row j is column
/// j of the [K, N] matmul weight), each row k / 32 blocks. Writes the codes and fp16 scale bits
/// in the panels of `packPanels` (q8_0: codes [paddedN/w, K, w]) or `packNibblePanels` (q4_0),
/// scales [paddedN/w, K/32, w]; columns n .. paddedN - 1 get zero codes and scales.
void repackQ8_0Rows(const uint8_t *blocks, int64_t k, int64_t n, int64_t paddedN, int64_t width, int8_t *codes,
                    uint16_t *scales);
void repackQ4_0Rows(const uint8_t *blocks, int64_t k, int64_t n, int64_t paddedN, int64_t width, uint8_t *codes,
                    uint16_t *scales);

/// The [K, N] f32 matrix a compiled program computes with, from a weight stored in [N / width]
/// column panels (PanelPacking.h): bf16 halves [N/w, K, w]; q8_0 codes [N/w, K, w] and fp16
/// scale bits [N/w, K/32, w]; q4_0 nibble codes [N/w, K/2, w] (packNibblePanels' layout) and
/// scales. Exact: each weight is code * scale (q4_0: (code - 8) * scale) rounded once to f32.
void dequantizeBf16Panels(const uint16_t *halves, int64_t rows, int64_t cols, int64_t width, float *matrix);
void dequantizeQ8_0Panels(const int8_t *codes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                          float *matrix);
void dequantizeQ4_0Panels(const uint8_t *codes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                          float *matrix);

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_QUANTIZATION_H
