// A GGUF file's blocks rewritten as blocks of another format the compiler stores (q4_K's as q4_1,
// any type's as q8_0), without a float32 copy of the tensor: how a fused weight of parts of
// several types, or a file asked for another format, loads. The tables here, a row per GGUF block
// type and per conversion, are how everything outside the kernels reaches a type's kernels
// (FormatKernels.h).
#ifndef GPT_CC_KERNELS_BLOCKTRANSCODING_H
#define GPT_CC_KERNELS_BLOCKTRANSCODING_H

#include <cstdint>
#include <string>
#include <vector>

namespace gpt::kernels {

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
  /// dequantize_row_* do (FormatKernels.h), on `threads` threads where the type's kernel splits rows.
  void (*dequantizeRows)(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads);
};
/// Every type, the compiler's own formats first.
const std::vector<GgufBlockType> &ggufBlockTypes();
/// The row of `type`, or null.
const GgufBlockType *findGgufBlockType(const std::string &type);
/// The row of `type`; std::invalid_argument naming the types otherwise.
const GgufBlockType &ggufBlockType(const std::string &type);

/// How one block of a GGUF type becomes blocks of a format the compiler stores: what the repacking
/// (WeightFormatTraits::repack) converts a tensor's parts with, a block at a time as it writes the
/// lanes, with no copy of the tensor in the target format; transcodeRows makes the same bits a row
/// at a time.
struct BlockConversion : GgufBlockType {
  /// Writes values / 32 blocks of the target format at `out`; null when the type is the target
  /// (its blocks are repacked as they are).
  void (*convert)(const uint8_t *block, uint8_t *out);
};
/// The conversion of `type`'s blocks (any of ggufBlockTypes) into `target`'s (a stored format's
/// name: convertedTypes(target) lists the types it takes); std::invalid_argument for another pair.
const BlockConversion &blockConversion(const std::string &type, const std::string &target);
/// The GGUF types blockConversion converts into `target`, its own first (none for another target).
std::vector<std::string> convertedTypes(const std::string &target);

/// `n` rows of `k` weights in blocks of GGUF `type` rewritten as blocks of `target` (`out`: each row
/// k / values blocks of the target's row of ggufBlockTypes), each block as blockConversion(type,
/// target) converts it (a copy where the type is the target): the bits the repacking converts a
/// part into, a whole tensor at a time. A conversion keeps the file's codes where the target's
/// blocks can hold them, and otherwise widens a block to float32 exactly as llama.cpp dequantizes
/// it and quantizes that as the target's own quantizer does (WeightFormats.cpp's tables). Every
/// block's fp16 fields are checked first: a NaN or infinite one throws std::invalid_argument naming
/// its block and row, as does a K that is no positive multiple of the type's block, or a pair that
/// blockConversion lacks. Rows are split over `threads`.
void transcodeRows(const std::string &type, const std::string &target, const uint8_t *blocks, int64_t k, int64_t n,
                   uint8_t *out, int64_t threads = 1);

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_BLOCKTRANSCODING_H
