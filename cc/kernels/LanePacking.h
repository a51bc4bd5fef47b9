// Low-precision matmul weights in lane layouts, made once when a model's weights are bound, and
// read back to f32 for CompiledModel::storedWeight.
//
// The packed matmul multiplies with the CPU's dot-product instructions, which see a 32-bit lane
// as several narrow values along K: vdpbf16ps multiplies 2 bf16 pairs per lane, vpdpbusd 4 byte
// pairs. So each 32-bit word of a lane layout holds weights of ONE column, and a panel row of P
// words is one zmm-sized load that feeds P columns at once. With P the panel width, panel p
// holding columns j = p P + c (c < P) of a row-major [K, N] weight w:
//
//   bf16:  out[N/P][K/2][P],     out[p][r][c] = bf16(w[r][j]) | bf16(w[r + K/2][j]) << 16
//   q8_0:  out[N/P][K/4][P],     byte i of out[p][8 b + q][c] = code(w[32 b + q + 8 i][j])   (int8)
//   q4_0:  out[N/P][K/8][P],     byte i of out[p][4 b + o][c] = code(w[32 b + o + 8 i][j])
//                                                   | code(w[32 b + 4 + o + 8 i][j]) << 4
//
// Which rows share a word is chosen for the activations, which compiled code converts at run
// time into the same lanes: rows r and r + K/2 are the two contiguous halves of an activation
// row, and the 8 lanes of a quantization block b take its rows with stride 8, so that lane q's 4
// activations come from 4 contiguous runs of 8 (whole vectors, no gather). q4_0's low nibbles are
// q8_0's lane q = o and its high nibbles lane q = o + 4: one mask, or one shift and one mask, of a
// word gives a vpdpbusd operand. Byte i is bits 8 i .. 8 i + 7 (little-endian). The fp16 scales of
// q8_0/q4_0 keep their panel layout [N/P, K/32, P] (PanelPacking.h's packPanels); q4_1 stores
// q4_0's code lanes, and its scales and mins as [N/P, K/16, P] (packPanels of a [K/32 * 2, N]
// matrix of alternating scale and min rows).
#ifndef GPT_CC_KERNELS_LANEPACKING_H
#define GPT_CC_KERNELS_LANEPACKING_H

#include <cstdint>

namespace gpt::kernels {

/// Rows of K one 32-bit word holds in each layout.
constexpr int64_t kBf16RowsPerWord = 2;
constexpr int64_t kQ8_0RowsPerWord = 4;
constexpr int64_t kQ4_0RowsPerWord = 8;

/// q6_k's lanes hold 6-bit codes, a run of 16 rows (one int8 scale of q6_K's) in 3 words: K * 3 / 16
/// words per column (6 bits a code, not a whole number of rows per word).
constexpr int64_t kQ6_KRunValues = 16;
constexpr int64_t kQ6_KWordsPerRun = 3;

/// The q4_0 word of a column whose codes are all 8: every weight dequantizes to 0, whatever the
/// scale. Padding columns (past the real N) hold it.
constexpr uint32_t kQ4_0ZeroWord = 0x88888888u;

/// The three packings split their panels over `threads` threads (ParallelFor.h); the result does
/// not depend on it.
///
/// bf16 lanes of a row-major [rows, cols] f32 matrix, each value rounded to nearest even
/// (toBf16). `rows` must be even and `cols` a multiple of `width` (std::invalid_argument
/// otherwise). `packed` holds cols / width * rows / 2 * width words.
void packBf16Lanes(const float *matrix, int64_t rows, int64_t cols, int64_t width, uint32_t *packed,
                   int64_t threads = 1);

/// q8_0 lanes of a row-major [rows, cols] matrix of int8 codes (quantizeQ8_0's), each code as its
/// two's-complement byte. `rows` must be a multiple of the quantization block (32) and `cols` of
/// `width`. `packed` holds cols / width * rows / 4 * width words.
void packQ8_0Lanes(const int8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed,
                   int64_t threads = 1);

/// q4_0 lanes of a row-major [rows, cols] matrix of codes in [0, 15] (quantizeQ4_0's; a larger
/// code is std::invalid_argument). `rows` must be a multiple of 32 and `cols` of `width`.
/// `packed` holds cols / width * rows / 8 * width words.
void packQ4_0Lanes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed,
                   int64_t threads = 1);

/// A run of 16 six-bit codes (`codes`, in K order) as its 3 lane words. The packed matmul reads the
/// run's activations as 4 lanes, lane l holding rows l + 4 i in byte i, so that no lane mixes two
/// runs (each run has its own scale): byte i of word 0 holds the low nibbles of codes 4 i (bits
/// 0-3) and 4 i + 2 (bits 4-7), of word 1 those of codes 4 i + 1 and 4 i + 3, and of word 2 the
/// top 2 bits of codes 4 i, 4 i + 1, 4 i + 2 and 4 i + 3 in bits 0-1, 2-3, 4-5 and 6-7. A lane's
/// codes are a nibble mask of word 0 or 1 (or a shift and a mask) or'ed with a shift and a mask
/// of word 2.
void q6_KRunWords(const uint8_t *codes, uint32_t *words);
/// q6_k lanes [cols / width, rows * 3 / 16, width] of a row-major [rows, cols] matrix of codes in
/// [0, 63] (quantizeQ6_K's; a larger code is std::invalid_argument). `rows` must be a multiple of
/// 256 and `cols` of `width`.
void packQ6_KLanes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed,
                   int64_t threads = 1);

/// The [rows, cols] f32 matrix a compiled program computes with, from the lane layouts above and
/// (q8_0, q4_0) fp16 scale bits in panels [cols / width, rows / 32, width]. Exact: each weight is
/// its bf16 value, or code * scale (q4_0: (code - 8) * scale) rounded once to f32.
void dequantizeBf16Lanes(const uint32_t *lanes, int64_t rows, int64_t cols, int64_t width, float *matrix);
void dequantizeQ8_0Lanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix);
void dequantizeQ4_0Lanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix);
/// q4_1: the q4_0 lanes and each block's fp16 scale and min [cols / width, rows / 32, 2, width];
/// each weight is code * scale + min in f32, as llama.cpp's dequantize_row_q4_1 computes it.
void dequantizeQ4_1Lanes(const uint32_t *lanes, const uint16_t *scalesAndMins, int64_t rows, int64_t cols,
                         int64_t width, float *matrix);
/// q4_K (repackQ4_KRows' layout): q4_1's lanes and [cols / width, rows / 32 + rows / 128, width]
/// scales, each sub-block's 6-bit scale and min bytes, then each super-block's fp16 d and dmin; each
/// weight is (d * scale) * q - dmin * min in f32, as gguf's dequantize computes it.
void dequantizeQ4_KLanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix);
/// q6_K (repackQ6_KRows' layout): q6_k's lanes and [cols / width, rows / 32 + rows / 256, width]
/// scales, each pair of runs' int8 scales, then each super-block's fp16 d; each weight is
/// (d * scale) * (q - 32) in f32, as gguf's dequantize computes it.
void dequantizeQ6_KLanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix);

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_LANEPACKING_H
