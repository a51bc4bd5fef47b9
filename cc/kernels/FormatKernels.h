// Each format's kernels, a section per format as ggml-quants.h lists each type's: its block, its
// quantizer, the packing and reading of its lanes (WeightFormats.h), the repacking of a GGUF file's
// blocks into them (GgufRepacking.h), their widening to f32 and the conversions into its blocks.
// Each section is defined by one file of formats/ (q4_1's by formats/Q4_1.cpp), over the walks
// and checks that several formats share (FormatKernelUtils.h).
// Private to //cc/kernels: outside it a format's kernels are reached through its row of the tables,
// WeightFormatTraits (WeightFormats.h) and GgufBlockType / BlockConversion (BlockTranscoding.h), all
// three in WeightFormats.cpp, so that a format is named by the tables, its own section here and its
// own file, not by every file it uses.
//
// Conventions of every section: K is the reduction dimension of a row-major [K, N] matmul weight
// (a GGUF tensor's [out, in] rows are its columns); blocks run along K; lane words are
// [N/P, K * codeBits / 32, P] for panels of P columns, and fp16 scale bits keep their column
// panels (PanelPacking.h's packPanels). Kernels given `threads` split their work over that many
// threads (ParallelFor.h); the result does not depend on it. A shape they cannot take throws
// std::invalid_argument.
#ifndef GPT_CC_KERNELS_FORMATKERNELS_H
#define GPT_CC_KERNELS_FORMATKERNELS_H

#include "cc/kernels/BlockTranscoding.h"
#include "cc/kernels/GgufRepacking.h"
#include "cc/kernels/Quantization.h"

#include <cstdint>
#include <vector>

namespace gpt::kernels {

/// Weights per super-block of llama.cpp's K-quants (q4_K, q5_K, q6_K: QK_K).
constexpr int64_t kSuperBlock = 256;

/// The conversions into one stored format: blockConversion's rows (BlockTranscoding.h) for
/// `target`, its own type first (no conversion), then the types whose blocks its section converts.
struct ConversionsInto {
  const char *target;
  std::vector<BlockConversion> conversions;
};
/// Every stored block format's conversions, in the format table's order: the table beside it in
/// WeightFormats.cpp, which blockConversion and convertedTypes look up.
const std::vector<ConversionsInto> &conversionsIntoFormats();
/// What that table takes, in words, for blockConversion's error: "x takes a, b and c; ...".
const char *conversionsTaken();

// ---- bf16 --------------------------------------------------------------------------------------
// Lanes [N/P, K/2, P]: out[p][r][c] = bf16(w[r][j]) | bf16(w[r + K/2][j]) << 16 for column
// j = p P + c, rows r and r + K/2 being the two contiguous halves of an activation row, which
// vdpbf16ps multiplies as 2 bf16 pairs per lane.

constexpr int64_t kBf16RowsPerWord = 2;

/// bf16 lanes of a row-major [rows, cols] f32 matrix, each value rounded to nearest even
/// (toBf16). `rows` must be even and `cols` a multiple of `width`. `packed` holds cols / width *
/// rows / 2 * width words.
void packBf16Lanes(const float *matrix, int64_t rows, int64_t cols, int64_t width, uint32_t *packed,
                   int64_t threads = 1);
/// The [rows, cols] f32 matrix of those lanes: each weight its bf16 value, exactly.
void dequantizeBf16Lanes(const uint32_t *lanes, int64_t rows, int64_t cols, int64_t width, float *matrix);

// ---- q8_0 --------------------------------------------------------------------------------------
// A block of 32 weights: an fp16 scale d, then 32 int8 codes q; w = q * d. Lanes [N/P, K/4, P]:
// byte i of out[p][8 b + q][c] = code(w[32 b + q + 8 i][j]) (int8), so that the 8 lanes of block b
// take its rows with stride 8 and lane q's 4 activations (vpdpbusd's byte pairs) come from 4
// contiguous runs of 8 (whole vectors, no gather). Scales [N/P, K/32, P].

constexpr int64_t kQ8_0BlockBytes = 2 + kQuantBlock;
constexpr int64_t kQ8_0RowsPerWord = 4;

/// q8_0 of a row-major [K, N] matrix, blocks of kQuantBlock rows of one column: per block,
/// d = max|w| / 127 (f32), `scales[b][n]` = toFp16(d), and `codes[k][n]` = round(w / d) (half
/// away from zero) in [-127, 127], 0 for an all-zero block. K must be a multiple of kQuantBlock.
void quantizeQ8_0(const float *matrix, int64_t rows, int64_t cols, int8_t *codes, uint16_t *scales,
                  int64_t threads = 1);
/// The same q8_0 of a row-major [n, k] matrix whose ROWS hold the blocks (each row k / 32 blocks
/// of 32 consecutive weights), written as llama.cpp's blocks of kQ8_0BlockBytes, rows split over
/// `threads`. Bit for bit what quantizeQ8_0 gives the transposed [k, n] matrix: how the tied
/// embedding [V, D] becomes the q8_0 LM head [D, V] without a transposed float32 copy
/// (quantizeRowsToQ8_0Lanes).
void quantizeQ8_0Rows(const float *matrix, int64_t n, int64_t k, uint8_t *blocks, int64_t threads = 1);
/// One such block: the 32 consecutive `weights` as the 34 bytes at `block`.
void quantizeQ8_0Block(const float *weights, uint8_t *block);

/// q8_0 lanes of a row-major [rows, cols] matrix of int8 codes (quantizeQ8_0's), each code as its
/// two's-complement byte. `rows` must be a multiple of the quantization block (32) and `cols` of
/// `width`. `packed` holds cols / width * rows / 4 * width words.
void packQ8_0Lanes(const int8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed,
                   int64_t threads = 1);
/// The [rows, cols] f32 matrix of q8_0 lanes and their fp16 scale panels: each weight code * scale,
/// rounded once to f32.
void dequantizeQ8_0Lanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix);

/// `blocks` holds `n` rows of `k` weights in llama.cpp q8_0 blocks, each row k / 32 blocks. Writes
/// the codes in q8_0 lanes [paddedN / width, K / 4, width] and the fp16 scale bits in panels
/// [paddedN / width, K / 32, width]; columns n .. paddedN - 1 are padding (zero scales, code 0: they
/// dequantize to 0). The codes and scales are the file's, bit for bit; only their places change. K
/// must be a positive multiple of 32 and paddedN a multiple of `width`, at least n. This one-array
/// form lays out the blocks unchecked (quantizeRowsToQ8_0Lanes' own blocks); the parts form below
/// is the table's.
void repackQ8_0Rows(const uint8_t *blocks, int64_t k, int64_t n, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
/// The repacking above of the matrix whose rows are the parts' rows in order (n = their sum), each
/// part's blocks of q8_0 or of a type blockConversion converts into q8_0, a block at a time.
/// Every block's fp16 fields (scales, mins; the file's, before any conversion) are checked: a NaN
/// or infinite one throws std::invalid_argument naming its type, row (and part) and block. The
/// other formats' parts repackings below check and convert the same way.
void repackQ8_0Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);

/// `blocks` (`n` rows of `k` weights in q8_0 blocks) widened to f32 `out` [n, k] as llama.cpp's and
/// gguf's dequantizers compute them, d * q. K must be a positive multiple of 32.
void dequantizeQ8_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out);

/// A q4_0 block as a q8_0 block, exactly: the same fp16 scale, and codes q - 8.
void q4_0AsQ8_0(const uint8_t *block, uint8_t *out);
/// A q5_0 block as a q8_0 block, exactly: the same fp16 scale, and codes q - 16 (bit i of qh as
/// code i's fifth bit).
void q5_0AsQ8_0(const uint8_t *block, uint8_t *out);
/// A block of `values` weights with a min or sub-block scales (which q8_0's codes cannot hold),
/// widened by `widen` as llama.cpp dequantizes it (its type's widen*Block) and quantized as
/// quantizeQ8_0Rows quantizes a row: q8_0 blocks are made 32 weights at a time, so a block at a
/// time gives the row's bits. Writes values / 32 q8_0 blocks at `out`.
template <int64_t values, void (*widen)(const uint8_t *, float *)>
void widenAsQ8_0(const uint8_t *block, uint8_t *out) {
  float widened[values];
  widen(block, widened);
  for (int64_t b = 0; b < values / kQuantBlock; ++b)
    quantizeQ8_0Block(widened + b * kQuantBlock, out + b * kQ8_0BlockBytes);
}

// ---- q4_0 --------------------------------------------------------------------------------------
// A block of 32 weights: an fp16 scale d, then 16 bytes of 4-bit codes q, byte m holding code m
// in its low nibble and code m + 16 in its high one; w = (q - 8) * d. Lanes [N/P, K/8, P]:
// byte i of out[p][4 b + o][c] = code(w[32 b + o + 8 i][j]) | code(w[32 b + 4 + o + 8 i][j]) << 4,
// so that the low nibbles are q8_0's lane q = o and the high ones lane q = o + 4: one mask, or one
// shift and one mask, of a word gives a vpdpbusd operand. Scales [N/P, K/32, P].

constexpr int64_t kQ4_0BlockBytes = 2 + kQuantBlock / 2;
constexpr int64_t kQ4_0RowsPerWord = 8;
/// The q4_0 word of a column whose codes are all 8: every weight dequantizes to 0, whatever the
/// scale. Padding columns (past the real N) hold it.
constexpr uint32_t kQ4_0ZeroWord = 0x88888888u;
/// Words of codes one block of 32 weights fills in q4_0's lanes.
constexpr int64_t kQ4_0WordsPerBlock = kQuantBlock / kQ4_0RowsPerWord;

/// The row of K that the low nibble of byte `i` of q4_0 word row `r` holds (its high nibble holds
/// the row 4 further): word o = r % 4 of block r / 4 pairs q8_0's lanes o and o + 4. Inline: the
/// lane readers of every format with q4_0's lanes call it per byte.
inline int64_t q4_0LowRow(int64_t r, int64_t i) {
  const int64_t words = kQuantBlock / kQ4_0RowsPerWord, q8Lanes = kQuantBlock / kQ8_0RowsPerWord;
  return r / words * kQuantBlock + r % words + q8Lanes * i;
}

/// q4_0 of a row-major [K, N] matrix, blocks as for q8_0: per block, m = the weight of largest
/// magnitude with its sign (the first one on a tie), d = m / -8 (f32), `scales[b][n]` =
/// toFp16(d), and `codes[k][n]` = min(15, trunc(w / d + 8.5)) in [0, 15], 8 (zero) for an all-zero
/// block.
void quantizeQ4_0(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales,
                  int64_t threads = 1);
/// q4_0 lanes of a row-major [rows, cols] matrix of codes in [0, 15] (a larger code is
/// std::invalid_argument). `rows` must be a multiple of 32 and `cols` of `width`. `packed` holds
/// cols / width * rows / 8 * width words. The other 4-bit formats' lanes are these.
void packQ4_0Lanes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed,
                   int64_t threads = 1);
/// The [rows, cols] f32 matrix of q4_0 lanes and their fp16 scale panels: (code - 8) * scale.
void dequantizeQ4_0Lanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix);
/// q4_0 blocks repacked as repackQ8_0Rows' parts form repacks q8_0's, into q4_0 lanes: the nibbles
/// re-paired (llama.cpp's i with i + 16 becoming the lanes' i with i + 4 within each octet),
/// padding columns code 8.
void repackQ4_0Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
/// q4_0 blocks widened to f32 as dequantizeQ8_0Rows widens q8_0's: d * (q - 8).
void dequantizeQ4_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out);
/// One q4_0 block's 16 bytes of codes as its 4 lane words (kQ4_0WordsPerBlock). llama.cpp's byte m
/// holds code m (low nibble) and code m + 16 (high); byte i of word o must hold codes o + 8 i (low)
/// and o + 4 + 8 i (high): bytes o, o + 4, o + 8 and o + 12 hold all eight, low nibbles for
/// i = 0, 1 and high ones for i = 2, 3. The other 4-bit formats' codes, in these bytes, make
/// their words so too.
void q4_0BlockWords(const uint8_t *bytes, uint32_t *words);

// ---- q4_1 --------------------------------------------------------------------------------------
// A block of 32 weights: an fp16 scale d, an fp16 min m, then q4_0's 16 bytes of codes;
// w = q * d + m. Lanes: q4_0's. Scales and mins [N/P, K/16, P], each block's scale in row 2 b of a
// panel and its min in row 2 b + 1 (packPanels of a [K/32 * 2, N] matrix of alternating scale and
// min rows).

constexpr int64_t kQ4_1BlockBytes = 4 + kQuantBlock / 2;

/// q4_1 of a row-major [K, N] matrix, blocks as for q8_0, as llama.cpp's quantize_row_q4_1_ref:
/// per block, lo and hi = its smallest and largest weight, d = (hi - lo) / 15 (f32),
/// `scales[2 b][n]` = toFp16(d), `scales[2 b + 1][n]` = toFp16(lo) (scales is [K / 32, 2, N]:
/// each block's scale and min), and `codes[k][n]` = min(15, trunc((w - lo) / d + 0.5)) in
/// [0, 15], 0 where d = 0. Its codes are packed by packQ4_0Lanes.
void quantizeQ4_1(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales,
                  int64_t threads = 1);
/// quantizeQ4_1 with codes in [0, `steps`] (q4_1: 15, q5_1: 31).
void quantizeWithMins(const float *matrix, int64_t rows, int64_t cols, int steps, uint8_t *codes, uint16_t *scales,
                      int64_t threads = 1);
/// The [rows, cols] f32 matrix of q4_0 lanes and each block's fp16 scale and min
/// [cols / width, rows / 32, 2, width]: code * scale + min in f32, as llama.cpp's
/// dequantize_row_q4_1 computes it.
void dequantizeQ4_1Lanes(const uint32_t *lanes, const uint16_t *scalesAndMins, int64_t rows, int64_t cols,
                         int64_t width, float *matrix);
/// q4_1 blocks (or blocks blockConversion converts into q4_1) repacked as repackQ4_0Rows repacks
/// q4_0's, each block's fp16 scale and min in rows 2 b and 2 b + 1 of `scales` [paddedN / width,
/// K / 16, width] (padding: zero scale and min, code 0).
void repackQ4_1Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
/// q4_1 blocks widened to f32 as dequantizeQ8_0Rows widens q8_0's: d * q + m, the product and the
/// sum rounded apart.
void dequantizeQ4_1Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out);
/// One q4_1 block widened to its 32 f32 `values`, as widenQ4_KBlock widens a q4_K super-block.
void widenQ4_1Block(const uint8_t *block, float *values);
/// A q4_0 block as a q4_1 block, exactly: d * (q - 8) is d * q + m with m = -8 d (a power of two
/// times an fp16), the codes unchanged.
void q4_0AsQ4_1(const uint8_t *block, uint8_t *out);
/// A q4_K super-block as eight q4_1 blocks (8 * kQ4_1BlockBytes at `out`). Sub-block s's weights
/// are (d * scale_s) * q - dmin * min_s with 4-bit codes q: a q4_1 block already, whose fp16 scale
/// and min are those products, each rounded once (they need up to 17 significant bits: at most
/// 2^-12 of themselves apart); its codes are the file's. std::invalid_argument when a product is
/// beyond fp16's range or not finite (no weights are that large).
void q4_KAsQ4_1(const uint8_t *superBlock, uint8_t *out);

// ---- q4_K --------------------------------------------------------------------------------------
// A super-block of 256 weights: fp16 d and dmin, 12 bytes of 6-bit sub-block scales and mins
// (KQuantScales.h), 128 bytes of nibbles; sub-block s's 32 weights are (d * scale_s) * q - dmin *
// min_s. Kept as it is (WeightFormat::Q4_K): the file's codes in q4_0's lanes, and kQ4_KScaleRows
// 16-bit values per super-block and column [N/P, K/32 + K/128, P]: a panel's rows 0 .. K/32 - 1
// hold sub-block b's 6-bit scale | 6-bit min << 8, its rows K/32 + 2 s and K/32 + 2 s + 1
// super-block s's fp16 d and dmin bits (4.625 bits per weight, the file's 4.5 with the scales
// unpacked to a byte each; sub-blocks first, so that the matmul reads them as one [.., K/32, ..]
// view).

constexpr int64_t kQ4_KBlockBytes = 4 + 12 + kSuperBlock / 2;
constexpr int64_t kQ4_KScaleRows = 2 + kSuperBlock / kQuantBlock;

/// q4_K of a row-major [K, N] matrix (K a multiple of 256), in repackQ4_KRows' numbers, a simpler
/// search than llama.cpp's quantize_row_q4_K: per column and sub-block of 32 weights the range
/// [lo, hi] with lo <= 0, step (hi - lo) / 15 and min -lo; per super-block d and dmin = the largest
/// step and min over 63 (fp16); each sub-block's 6-bit scale and min = round(step / d),
/// round(min / dmin); codes = clamp(round((w + dmin * min_s) / (d * scale_s)), 0, 15). `scales` is
/// [K / 32 + K / 128, N]: each sub-block's scale | min << 8, then each super-block's d and dmin
/// (the rows of repackQ4_KRows' panels). Its codes are packed by packQ4_0Lanes.
void quantizeQ4_K(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales,
                  int64_t threads = 1);
/// The [rows, cols] f32 matrix of q4_0 lanes and q4_K's scales: each weight (d * scale) * q -
/// dmin * min in f32, as gguf's dequantize computes it.
void dequantizeQ4_KLanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix);
/// q4_K super-blocks repacked into that layout, as repackQ8_0Rows' parts form repacks q8_0's (d
/// and dmin checked to be finite); padding columns get zeros. K must be a positive multiple of 256.
void repackQ4_KRows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
/// q4_K super-blocks widened to f32 `out` [n, k] bit for bit as gguf.quants (and llama.cpp's
/// dequantize_row_q4_K) compute them, rows split over `threads`; K a positive multiple of 256.
void dequantizeQ4_KRows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads = 1);
/// One super-block widened to its 256 f32 `values`, as dequantizeQ4_KRows widens each: for a
/// converter that works a block at a time (widenAsQ8_0), with no threads or checks to pay for per
/// block. The other widen*Block functions are the same for their types.
void widenQ4_KBlock(const uint8_t *block, float *values);
/// A super-block laid out as q4_K's, its nibbles at `nibbles`, widened as widenQ4_KBlock widens
/// one: sub-block s (32 weights) takes the nibbles of bytes 32 (s / 2) .. + 31, low ones for even
/// s, high ones for odd s, and, where `highs` is not null, bit s of highs[i] as the fifth bit of
/// its code i (q5_K's super-block). Each weight is (d * scale) * q - (dmin * min).
void widenQ4_KLayoutBlock(const uint8_t *block, const uint8_t *highs, const uint8_t *nibbles, float *values);
/// Sub-block s (of 8) of a q4_K super-block's 128 bytes of `nibbles` as the 16 bytes of a 32-weight
/// block's codes (q4_0's: code m in the low nibble of byte m, code m + 16 in its high one).
void q4_KSubBlockBytes(const uint8_t *nibbles, int64_t s, uint8_t *bytes);

// ---- q6_K --------------------------------------------------------------------------------------
// A super-block of 256 weights: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales (one
// per run of 16 weights), fp16 d; run h's weights are (d * scale_h) * (q - 32) with 6-bit codes q.
// Kept as it is (WeightFormat::Q6_K): each run of a column as kQ6_KWordsPerRun lane words
// (q6_KRunWords), [N/P, K * 3/16, P], and kQ6_KScaleRows 16-bit values per super-block and column
// [N/P, K/32 + K/256, P]: a panel's row b < K/32 holds the int8 scales of runs 2 b (low byte) and
// 2 b + 1 (high byte), its row K/32 + s super-block s's fp16 d bits. 6.5625 bits per weight, the
// file's own.

constexpr int64_t kQ6_KBlockBytes = kSuperBlock / 2 + kSuperBlock / 4 + kSuperBlock / 16 + 2;
constexpr int64_t kQ6_KScaleRows = kSuperBlock / kQuantBlock + 1;
/// A run of 16 six-bit codes (one int8 scale) fills 3 words: K * 3 / 16 words per column (6 bits a
/// code, not a whole number of rows per word).
constexpr int64_t kQ6_KRunValues = 16;
constexpr int64_t kQ6_KWordsPerRun = 3;

/// q6_K of a row-major [K, N] matrix (K a multiple of 256), in repackQ6_KRows' numbers, a simpler
/// search than llama.cpp's quantize_row_q6_K: per column and run of 16 weights the step
/// max|w| / 31.5 (so that codes - 32 in [-32, 31] reach the largest one); per super-block d = the
/// largest step over 127 (fp16, rounded up); each run's int8 scale = ceil(step / d) (so no code is
/// clipped); codes = clamp(round(w / (d * scale)) + 32, 0, 63), within half a step. `scales` is
/// [K / 32 + K / 256, N]: each pair of runs' int8 scales (low byte: the even run), then each
/// super-block's d (the rows of repackQ6_KRows' panels).
void quantizeQ6_K(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales,
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
/// [0, 63] (a larger code is std::invalid_argument). `rows` must be a multiple of 256 and `cols`
/// of `width`.
void packQ6_KLanes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed,
                   int64_t threads = 1);
/// The [rows, cols] f32 matrix of q6_k lanes and q6_K's scales: each weight (d * scale) * (q - 32)
/// in f32, as gguf's dequantize computes it.
void dequantizeQ6_KLanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix);
/// q6_K super-blocks repacked into that layout, as repackQ8_0Rows' parts form repacks q8_0's (d
/// checked to be finite); padding columns get zeros. K must be a positive multiple of 256.
void repackQ6_KRows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
/// A q6_K super-block's 256 codes (0 .. 63) in K order, from its low nibbles and 2-bit highs.
void q6_KCodes(const uint8_t *block, uint8_t *codes);
/// q6_K super-blocks widened to f32 as dequantizeQ4_KRows widens q4_K's.
void dequantizeQ6_KRows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads = 1);
void widenQ6_KBlock(const uint8_t *block, float *values);

// ---- q5_K --------------------------------------------------------------------------------------
// q4_K's super-block with 32 bytes of high bits before the nibbles (176 bytes): bit s of highs[i] is
// the fifth bit of code i of sub-block s; sub-block s's 32 weights are (d * scale_s) * q - dmin *
// min_s with 5-bit codes q. Kept as it is (WeightFormat::Q5_K): per sub-block and column
// kQ5_KWordsPerBlock lane words, q4_K's 4 nibble words (q4_0's layout of the low 4 bits) and a word
// whose bit j is code j's fifth bit, [N/P, K * 5/32, P]; q4_K's kQ4_KScaleRows 16-bit values per
// super-block and column (5.625 bits per weight, the file's 5.5 with the scales unpacked to a byte
// each). A code lane of the matmul (byte i of lane l: code l + 8 i) takes its fifth bits from bits
// l, l + 8, l + 16, l + 24 of the last word: one shift and mask puts them at bit 4 of its bytes.

constexpr int64_t kQ5_KBlockBytes = 4 + 12 + kSuperBlock / 8 + kSuperBlock / 2;
constexpr int64_t kQ5_KWordsPerBlock = kQ4_0WordsPerBlock + 1;

/// q5_K of a row-major [K, N] matrix (K a multiple of 256), a simpler search than llama.cpp's
/// quantize_row_q5_K: per column and sub-block of 32 weights the range [lo, hi] with lo <= 0; per
/// super-block dmin = the largest -lo over 63 and then d = the largest (hi + min) / 31 over 63,
/// each rounded up to fp16; each sub-block's 6-bit min = ceil(-lo / dmin) and scale = ceil((hi +
/// dmin * min) / 31 / d), so that its 32 codes = clamp(round((w + dmin * min) / (d * scale)), 0,
/// 31) cover the whole range. `scales` as quantizeQ4_K's. Its codes are packed by packQ5_KLanes.
void quantizeQ5_K(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales,
                  int64_t threads = 1);
/// The 5 lane words of a 32-weight block's codes (0 .. 31, in K order).
void q5_KBlockWords(const uint8_t *codes, uint32_t *words);
/// q5_k lanes [cols / width, rows * 5 / 32, width] of a row-major [rows, cols] matrix of codes in
/// [0, 31] (a larger code is std::invalid_argument). `rows` must be a multiple of 256 and `cols`
/// of `width`.
void packQ5_KLanes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed,
                   int64_t threads = 1);
/// packQ5_KLanes for any `rows` a multiple of `rowMultiple` (named `multipleName` in errors;
/// q5_0's and q5_1's: 32), `what` naming the caller.
void packFiveBitLanes(const char *what, int64_t rowMultiple, const char *multipleName, const uint8_t *codes,
                      int64_t rows, int64_t cols, int64_t width, uint32_t *packed, int64_t threads = 1);
/// The [rows, cols] f32 matrix of q5_k lanes and q5_K's scales: each weight (d * scale) * q - dmin
/// * min in f32, as gguf's dequantize computes it.
void dequantizeQ5_KLanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix);
/// q5_K super-blocks repacked into that layout, as repackQ4_KRows repacks q4_K's (d and dmin
/// checked to be finite); padding columns get zeros. K must be a positive multiple of 256.
void repackQ5_KRows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
/// q5_K super-blocks widened to f32 as dequantizeQ4_KRows widens q4_K's.
void dequantizeQ5_KRows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads = 1);
void widenQ5_KBlock(const uint8_t *block, float *values);

// ---- q5_0 and q5_1 ------------------------------------------------------------------------------
// q5_0 {fp16 d; uint32 qh; 16 bytes of low nibbles}: w = d * (q - 16), bit i of qh code i's fifth
// bit; q5_1 {fp16 d, m; qh; nibbles}: w = d * q + m. Lanes: q5_K's words of the block's codes
// (kQ5_KWordsPerBlock a block and column: q4_0's 4 nibble words and qh itself, [N/P, K * 5/32,
// P]), 5.5 and 6 bits per weight with the scales, the file's. Scales [N/P, K/32, P] (q5_0) or
// q4_1's scale and min rows [N/P, K/16, P] (q5_1).

constexpr int64_t kQ5_0BlockBytes = 2 + 4 + kQuantBlock / 2;
constexpr int64_t kQ5_1BlockBytes = 4 + 4 + kQuantBlock / 2;

/// q5_0 of a row-major [K, N] matrix (K a multiple of 32), as llama.cpp's quantize_row_q5_0_ref:
/// per block d = the weight of largest magnitude / -16, `scales[b][n]` = toFp16(d), codes =
/// min(31, trunc(w / d + 16.5)) (with w times 1 / d), 16 where d = 0. Packed by packQ5_0Lanes.
void quantizeQ5_0(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales,
                  int64_t threads = 1);
/// q5_1 as quantizeQ4_1 with 31 steps (llama.cpp's quantize_row_q5_1_ref): codes in [0, 31], each
/// block's scale and min in `scales` rows 2 b and 2 b + 1. Packed by packQ5_0Lanes.
void quantizeQ5_1(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales,
                  int64_t threads = 1);
/// q5_0 and q5_1 lanes of a [rows, cols] matrix of codes in [0, 31]: packFiveBitLanes of 32-row blocks.
void packQ5_0Lanes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed,
                   int64_t threads = 1);
/// The [rows, cols] f32 matrix of q5_0 lanes and scales: d * (q - 16).
void dequantizeQ5_0Lanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix);
/// The [rows, cols] f32 matrix of q5_1 lanes and scales and mins: d * q + m, product and sum
/// rounded apart as llama.cpp's dequantizer computes them.
void dequantizeQ5_1Lanes(const uint32_t *lanes, const uint16_t *scalesAndMins, int64_t rows, int64_t cols,
                         int64_t width, float *matrix);
/// q5_0 (q5_1, or q5_0 converted) blocks repacked into their lanes and scales (fp16 fields checked
/// to be finite); padding columns get zero words and scales. K a positive multiple of 32.
void repackQ5_0Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
void repackQ5_1Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
/// A q5_0 block as the q5_1 block of the same weights: d, a min of -16 d (exact in fp16; one beyond
/// its range is std::invalid_argument), the same qh and nibbles.
void q5_0AsQ5_1(const uint8_t *block, uint8_t *out);
/// q5_0 and q5_1 blocks widened to f32 as dequantizeQ4_KRows widens q4_K's (K a positive multiple
/// of 32); the q8_0 conversions widen with them (q8_0's section).
void dequantizeQ5_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads = 1);
void widenQ5_0Block(const uint8_t *block, float *values);
void dequantizeQ5_1Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads = 1);
void widenQ5_1Block(const uint8_t *block, float *values);

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_FORMATKERNELS_H
