// Weights quantized by llama.cpp (GGUF q8_0 / q4_0 / q4_1 tensors) repacked, block by block, into the
// lane layouts compiled code reads (LanePacking.h), without widening them to f32.
#ifndef GPT_CC_KERNELS_GGUFREPACKING_H
#define GPT_CC_KERNELS_GGUFREPACKING_H

#include "cc/kernels/Quantization.h"

#include <cstdint>
#include <string>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace gpt::kernels {

/// Bytes of one llama.cpp block: an fp16 scale, then 32 int8 codes (q8_0) or 16 bytes of 4-bit
/// codes, byte i holding code i in its low nibble and code i + 16 in its high one (q4_0).
constexpr int64_t kQ8_0BlockBytes = 2 + kQuantBlock;
constexpr int64_t kQ4_0BlockBytes = 2 + kQuantBlock / 2;
/// q4_1: an fp16 scale, an fp16 min, then q4_0's 16 bytes of codes.
constexpr int64_t kQ4_1BlockBytes = 4 + kQuantBlock / 2;

/// `blocks` holds `n` rows of `k` weights in llama.cpp blocks (torch's [out, in] layout: row j is
/// column j of the [K, N] matmul weight), each row k / 32 blocks. Writes the codes in the q8_0
/// lanes [paddedN / width, K / 4, width] (repackQ8_0Rows) or q4_0 lanes [paddedN / width, K / 8,
/// width] (repackQ4_0Rows) of LanePacking.h, and the fp16 scale bits in panels [paddedN / width,
/// K / 32, width]. Columns n .. paddedN - 1 are padding: zero scales, q8_0 code 0, q4_0 code 8
/// (both dequantize to 0). The codes and scales are the file's, bit for bit; only their places
/// change (q4_0: the nibbles are re-paired, llama.cpp's i with i + 16 becoming the lanes' i with
/// i + 4 within each octet). K must be a positive multiple of 32 and paddedN a multiple of
/// `width`, at least n (std::invalid_argument otherwise).
/// The panels are split over `threads` threads (ParallelFor.h); the result does not depend on it.
void repackQ8_0Rows(const uint8_t *blocks, int64_t k, int64_t n, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
void repackQ4_0Rows(const uint8_t *blocks, int64_t k, int64_t n, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
/// q4_1: codes as for q4_0, and each block's fp16 scale and min in rows 2 b and 2 b + 1 of
/// `scales` [paddedN / width, K / 16, width] (padding: zero scale and min, code 0).
void repackQ4_1Rows(const uint8_t *blocks, int64_t k, int64_t n, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);

/// Consecutive rows of one matrix held apart: a fused weight's parts (the rows of q, k and v, or
/// of gate and up), each still in the file's memory, so that fusing them copies nothing. `type`
/// is the GGUF type of the part's blocks when it is not the repacking's format (empty): any type
/// blockConversion (BlockTranscoding.h) converts into it, a block at a time as the lanes are
/// written, with no copy of the tensor in that format (a q6_k part of a q8_0 weight: its rows
/// requantized as requantizeRowsToQ8_0 would, the same bits).
struct BlockRows {
  const uint8_t *blocks;
  int64_t rows;
  std::string type = {};
};
/// The repacking above of the matrix whose rows are the parts' rows in order (n = their sum).
/// Every block's fp16 fields (scales, mins; the file's, before any conversion) are checked: a NaN
/// or infinite one throws std::invalid_argument naming its type, row (and part) and block (the
/// one-array versions above lay out the blocks unchecked).
void repackQ8_0Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
void repackQ4_0Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
void repackQ4_1Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);

/// repackQ8_0Rows of quantizeQ8_0Rows(matrix [n, k]), the same bits, made a few panels at a time
/// in a buffer of each thread's own (a few MB), not in one temporary of all n rows' blocks: how the
/// q8_0 LM head is laid out from the [V, D] embedding table.
void quantizeRowsToQ8_0Lanes(const float *matrix, int64_t n, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                             uint16_t *scales, int64_t threads = 1);

/// Bytes of the other blocks llama.cpp's quantizers write (Q4_K_M files hold Q4_K, Q6_K and Q5_0
/// tensors): q5_0 {fp16 d; uint32 qh; 16 bytes of low nibbles}, q5_1 {fp16 d, m; qh; nibbles},
/// and the super-blocks of 256 weights q4_K {fp16 d, dmin; 12 bytes of 6-bit scales and mins;
/// 128 bytes of nibbles}, q5_K (q4_K's, then 32 bytes of high bits before the nibbles) and q6_K
/// {128 bytes of low nibbles; 64 of 2-bit highs; 16 int8 scales; fp16 d}.
constexpr int64_t kQ5_0BlockBytes = 2 + 4 + kQuantBlock / 2;
constexpr int64_t kQ5_1BlockBytes = 4 + 4 + kQuantBlock / 2;
constexpr int64_t kSuperBlock = 256;
constexpr int64_t kQ4_KBlockBytes = 4 + 12 + kSuperBlock / 2;
constexpr int64_t kQ5_KBlockBytes = 4 + 12 + kSuperBlock / 8 + kSuperBlock / 2;
constexpr int64_t kQ6_KBlockBytes = kSuperBlock / 2 + kSuperBlock / 4 + kSuperBlock / 16 + 2;

/// repackQ4_1Rows of parts whose type is q4_k: q4_K super-blocks repacked as q4_1, super-block by super-block as
/// q4_KAsQ4_1 makes them: the file's codes, each sub-block's scale and min rounded once to fp16,
/// with no copy of the tensor in q4_1 blocks. K must be a positive multiple of 256.
void repackQ4_KRowsAsQ4_1(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width,
                          uint32_t *codes, uint16_t *scales, int64_t threads = 1);

/// q4_K kept as it is (WeightFormat::Q4_K): the file's codes in q4_1's lanes [paddedN / width,
/// K / 8, width], and kQ4_KScaleRows 16-bit values per super-block of 256 weights and column in
/// `scales` [paddedN / width, K / 32 + K / 128, width]: each panel's rows 0 .. K / 32 - 1 hold
/// sub-block b's 6-bit scale | 6-bit min << 8, its rows K / 32 + 2 s and K / 32 + 2 s + 1
/// super-block s's fp16 d and dmin bits (4.625 bits per weight, the file's 4.5 with the scales
/// unpacked to a byte each; sub-blocks first, so that the matmul reads them as one [.., K / 32, ..]
/// view). Sub-block b's weights are d * scale_b * q - dmin * min_b. Padding columns get zeros. d and dmin are checked
/// as the other repackings check their fp16 fields (NaN or infinite: std::invalid_argument naming the block). K must be
/// a positive multiple of 256.
constexpr int64_t kQ4_KScaleRows = 2 + kSuperBlock / kQuantBlock;
void repackQ4_KRows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);

/// q6_K kept as it is (WeightFormat::Q6_K): each run of 16 weights of a column (one int8 scale of
/// the file's) as kQ6_KWordsPerRun lane words (q6_KRunWords) in `codes` [paddedN / width, K * 3 / 16,
/// width], and kQ6_KScaleRows 16-bit values per super-block of 256 weights and column in `scales`
/// [paddedN / width, K / 32 + K / 256, width]: each panel's row b < K / 32 holds the int8 scales of
/// runs 2 b (low byte) and 2 b + 1 (high byte), its row K / 32 + s super-block s's fp16 d bits.
/// 6.5625 bits per weight, the file's own. Run h's weights are (d * scale_h) * (q - 32) with 6-bit
/// codes q. Padding columns get zeros. d is checked as the other repackings check their fp16 fields
/// (NaN or infinite: std::invalid_argument naming the block). K must be a positive multiple of 256.
constexpr int64_t kQ6_KScaleRows = kSuperBlock / kQuantBlock + 1;
void repackQ6_KRows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads = 1);
/// A q6_K super-block's 256 codes (0 .. 63) in K order, from its low nibbles and 2-bit highs.
void q6_KCodes(const uint8_t *block, uint8_t *codes);
#ifdef __SSE2__
/// Run h (0 .. 15) of those codes, 16 h .. 16 h + 15, one per byte: q6_KCodes 16 at a time.
__m128i q6_KRunCodes(const uint8_t *block, int64_t h);
#endif

/// A q4_K super-block (256 weights) as eight q4_1 blocks (8 * kQ4_1BlockBytes at `out`). Sub-block
/// s's weights are (d * scale_s) * q - dmin * min_s with 4-bit codes q: a q4_1 block already, whose
/// fp16 scale and min are those products, each rounded once (they need up to 17 significant bits:
/// at most 2^-12 of themselves apart); its codes are the file's. std::invalid_argument when a
/// product is beyond fp16's range or not finite (no weights are that large).
void q4_KAsQ4_1(const uint8_t *superBlock, uint8_t *out);

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_GGUFREPACKING_H
