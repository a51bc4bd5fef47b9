// Weight quantization done once, when a model's weights are bound: bf16, and llama.cpp's q8_0,
// q4_0 and q4_1 block formats, over blocks of 32 consecutive weights along the reduction dimension K.
#ifndef GPT_CC_KERNELS_QUANTIZATION_H
#define GPT_CC_KERNELS_QUANTIZATION_H

#include <cstdint>

namespace gpt::kernels {

/// Weights per quantization block (llama.cpp's QK8_0, QK4_0 and QK4_1).
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
/// The blocks are split over `threads` threads (ParallelFor.h) in these three; the result does not
/// depend on it.
void quantizeQ8_0(const float *matrix, int64_t rows, int64_t cols, int8_t *codes, uint16_t *scales,
                  int64_t threads = 1);

/// The same q8_0 of a row-major [n, k] matrix whose ROWS hold the blocks (each row k / 32 blocks
/// of 32 consecutive weights), written as llama.cpp's blocks: per block the fp16 scale, then the
/// 32 int8 codes (34 bytes, GgufRepacking.h's kQ8_0BlockBytes), rows split over `threads`. Bit for
/// bit what quantizeQ8_0 gives the transposed [k, n] matrix: how the tied embedding [V, D] becomes
/// the q8_0 LM head [D, V] without a transposed float32 copy.
void quantizeQ8_0Rows(const float *matrix, int64_t n, int64_t k, uint8_t *blocks, int64_t threads = 1);
/// One such block: the 32 consecutive `weights` as the 34 bytes at `block`.
void quantizeQ8_0Block(const float *weights, uint8_t *block);

/// q4_0 of a row-major [K, N] matrix, blocks as for q8_0: per block, m = the weight of largest
/// magnitude with its sign (the first one on a tie), d = m / -8 (f32), `scales[b][n]` =
/// toFp16(d), and `codes[k][n]` = min(15, trunc(w / d + 8.5)) in [0, 15], 8 (zero) for an all-zero
/// block; a weight dequantizes to (code - 8) * d.
void quantizeQ4_0(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales,
                  int64_t threads = 1);

/// q4_1 of a row-major [K, N] matrix, blocks as for q8_0, as llama.cpp's quantize_row_q4_1_ref:
/// per block, lo and hi = its smallest and largest weight, d = (hi - lo) / 15 (f32),
/// `scales[2 b][n]` = toFp16(d), `scales[2 b + 1][n]` = toFp16(lo) (scales is [K / 32, 2, N]:
/// each block's scale and min), and `codes[k][n]` = min(15, trunc((w - lo) / d + 0.5)) in
/// [0, 15], 0 where d = 0; a weight dequantizes to code * d + lo.
void quantizeQ4_1(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales,
                  int64_t threads = 1);

/// q4_K of a row-major [K, N] matrix (K a multiple of 256), in repackQ4_KRows' numbers
/// (GgufRepacking.h), a simpler search than llama.cpp's quantize_row_q4_K: per column and
/// sub-block of 32 weights the range [lo, hi] with lo <= 0, step (hi - lo) / 15 and min -lo; per
/// super-block d and dmin = the largest step and min over 63 (fp16); each sub-block's 6-bit scale and
/// min = round(step / d), round(min / dmin); codes = clamp(round((w + dmin * min_s) / (d *
/// scale_s)), 0, 15). `scales` is [K / 32 + K / 128, N]: each sub-block's scale | min << 8, then each
/// super-block's d and dmin (the rows of repackQ4_KRows' panels).
void quantizeQ4_K(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales,
                  int64_t threads = 1);

/// q6_K of a row-major [K, N] matrix (K a multiple of 256), in repackQ6_KRows' numbers
/// (GgufRepacking.h), a simpler search than llama.cpp's quantize_row_q6_K: per column and run of 16
/// weights the step max|w| / 31.5 (so that codes - 32 in [-32, 31] reach the largest one); per
/// super-block d = the largest step over 127 (fp16, rounded up); each run's int8 scale = ceil(step / d)
/// (so no code is clipped); codes = clamp(round(w / (d * scale)) + 32, 0, 63), within half a step. `scales` is [K / 32
/// + K / 256, N]: each pair of runs' int8 scales (low byte: the even run), then each super-block's d (the rows of
/// repackQ6_KRows' panels).
void quantizeQ6_K(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales,
                  int64_t threads = 1);

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_QUANTIZATION_H
