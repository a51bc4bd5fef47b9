// A GGUF file's blocks of formats the compiler does not store (llama.cpp's K-quants, q5_0, q5_1)
// rewritten as blocks of a format it does (q4_1, q8_0), without a float32 copy of the tensor:
// how a Q4_K_M file loads in its own precision.
#ifndef GPT_CC_KERNELS_BLOCKTRANSCODING_H
#define GPT_CC_KERNELS_BLOCKTRANSCODING_H

#include <cstdint>
#include <string>
#include <vector>

namespace gpt::kernels {

/// `n` rows of `k` weights in q4_K super-blocks (GgufRepacking.h) as llama.cpp q4_1 blocks
/// (`out`: n * k / 32 blocks of kQ4_1BlockBytes). A q4_K sub-block of 32 weights is q4_1 already:
/// its weights are (d * scale) * q - dmin * min with 4-bit codes q, so its codes are kept and its
/// q4_1 scale and min are the fp16 roundings of d * scale and -(dmin * min). Those products of an
/// fp16 and a 6-bit integer need up to 17 significant bits, so each is rounded once, by at most
/// 2^-12 of itself; the codes, which carry the quantization error, are the file's. K must be a
/// positive multiple of 256; a product beyond fp16's range throws std::invalid_argument (no
/// weights are that large). Rows are split over `threads`.
void transcodeQ4_KToQ4_1Rows(const uint8_t *blocks, int64_t k, int64_t n, uint8_t *out, int64_t threads = 1);

/// `n` rows of `k` weights of a GGUF type (any of ggufBlockTypes) as llama.cpp q8_0 blocks (`out`: n * k / 32 blocks of
/// kQ8_0BlockBytes). q4_0 and q5_0 blocks are q8_0 blocks with narrower codes: their scale and codes (q - 8, q - 16)
/// are kept, bit for bit. The others have a min or sub-block scales that q8_0 cannot hold: each row is widened to
/// float32 exactly as llama.cpp dequantizes it, in a buffer of one row, and quantized as
/// quantizeQ8_0Rows does (an error of at most half a step of 1/127 of the block's largest weight).
/// std::invalid_argument for another type or a K that is no multiple of the type's block.
void requantizeRowsToQ8_0(const std::string &type, const uint8_t *blocks, int64_t k, int64_t n, uint8_t *out,
                          int64_t threads = 1);

/// A block type of GGUF files the loaders read (llama.cpp's): its shape, the fp16 fields that must be
/// finite, and its widening to float32. One row per type, as ggml's type traits: the loaders' checks
/// (C++ and Python, _gpt.gguf_block_types) and dequantization (_gpt.dequantize_rows) read it.
struct GgufBlockType {
  const char *name;         // lower case, as llama.cpp's ggml_type_name ("q6_k")
  int64_t values;           // the weights of one block (32 or 256)
  int64_t bytes;            // and its bytes
  int64_t halves;           // how many fp16 fields (scales, mins) a block has: 1 or 2
  int64_t halfOffsets[2];   // their byte offsets
  const char *halfNames[2]; // "scale" and "min" (a K-quant's super-block d and dmin)
  /// Widens `n` rows of `k` weights to f32 [n, k] bit for bit as gguf.quants and llama.cpp's
  /// dequantize_row_* do (GgufDequantizing.h), on `threads` threads where the type's kernel splits rows.
  void (*dequantizeRows)(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads);
};
/// Every type, the compiler's own formats first.
const std::vector<GgufBlockType> &ggufBlockTypes();
/// The row of `type`, or null.
const GgufBlockType *findGgufBlockType(const std::string &type);
/// The row of `type`; std::invalid_argument naming the types otherwise.
const GgufBlockType &ggufBlockType(const std::string &type);

/// How one block of a GGUF type becomes blocks of a format the compiler stores (q8_0 or q4_1), the
/// same bits as requantizeRowsToQ8_0 and transcodeQ4_KToQ4_1Rows make them a row at a time: what
/// the repacking (GgufRepacking.h) converts a tensor with, a block at a time, with no copy of it.
struct BlockConversion : GgufBlockType {
  /// Writes values / 32 blocks of the target format at `out`; null when the type is the target
  /// (its blocks are repacked as they are).
  void (*convert)(const uint8_t *block, uint8_t *out);
};
/// The conversion of `type`'s blocks (any of ggufBlockTypes) into `target`'s (q8_0 from any of
/// them; q4_1 from q4_0, q4_1, q4_k; q4_0, q4_k and q6_k from themselves); std::invalid_argument
/// for another pair.
const BlockConversion &blockConversion(const std::string &type, const std::string &target);
/// The GGUF types blockConversion converts into `target`, its own first (none for another target).
std::vector<std::string> convertedTypes(const std::string &target);

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_BLOCKTRANSCODING_H
