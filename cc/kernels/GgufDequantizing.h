// Weights quantized by llama.cpp widened to f32, bit for bit as its and gguf's dequantizers compute
// them: how a model that stores f32 reads a quantized GGUF file, and how a file's token embedding
// becomes the table tokens are looked up in. The block layouts are GgufRepacking.h's.
#ifndef GPT_CC_KERNELS_GGUFDEQUANTIZING_H
#define GPT_CC_KERNELS_GGUFDEQUANTIZING_H

#include "cc/kernels/GgufRepacking.h"

#include <cstdint>

namespace gpt::kernels {

/// `blocks` (`n` rows of `k` weights in llama.cpp's q8_0, q4_0 or q4_1 blocks) widened to f32 `out` [n, k],
/// exactly as llama.cpp's and gguf's dequantizers compute them: q8_0 d * q, q4_0 d * (q - 8),
/// q4_1 d * q + m with the product and the sum rounded apart. How a model that stores f32 reads
/// a quantized GGUF file. K must be a positive multiple of 32 (std::invalid_argument otherwise).
void dequantizeQ8_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out);
void dequantizeQ4_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out);
void dequantizeQ4_1Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out);

/// The other blocks of llama.cpp's quantizers (q5_0, q5_1, q4_K, q5_K, q6_K) widened to f32 `out` [n, k], bit for bit
/// as gguf.quants (and llama.cpp's dequantize_row_*) compute them: products of f32 scale and code, and the min
/// subtracted (or added) in a second rounding. K must be a positive multiple of 32 (q5_0, q5_1) or 256 (the K-quants),
/// std::invalid_argument otherwise; the rows are split over `threads` threads. How a file's Q6_K token embedding
/// becomes the table the model looks tokens up in.
void dequantizeQ5_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads = 1);
void dequantizeQ5_1Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads = 1);
void dequantizeQ4_KRows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads = 1);
void dequantizeQ5_KRows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads = 1);
void dequantizeQ6_KRows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads = 1);

/// One block of those types widened to its 32 (q5_0, q5_1) or 256 (the K-quants) f32 `values`, as
/// the Rows functions above widen each: for a converter that works a block at a time
/// (BlockTranscoding.h), with no threads or checks to pay for per block.
void widenQ5_0Block(const uint8_t *block, float *values);
void widenQ5_1Block(const uint8_t *block, float *values);
void widenQ4_KBlock(const uint8_t *block, float *values);
void widenQ5_KBlock(const uint8_t *block, float *values);
void widenQ6_KBlock(const uint8_t *block, float *values);

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_GGUFDEQUANTIZING_H
