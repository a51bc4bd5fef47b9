// The kernels of q5_0 and q5_1 (FormatKernels.h's section of the two): GGUF types the compiler
// reads but never stores, so only their widening to f32, bit for bit as gguf's and llama.cpp's
// dequantizers compute it, which the conversions into a stored format widen with.
#include "cc/kernels/FormatKernelUtils.h"
#include "cc/kernels/KQuantScales.h"

#include <cstring>

namespace gpt::kernels {
namespace {

/// Weight i of a q5_0/q5_1 block: low nibble of byte i (i < 16) or high nibble of byte i - 16,
/// with bit i of qh as its fifth bit.
uint32_t fiveBitCode(const uint8_t *nibbles, uint32_t highBits, int64_t i) {
  const uint32_t low = i < 16 ? nibbles[i] & 0x0Fu : nibbles[i - 16] >> 4;
  return low | ((highBits >> i) & 1u) << 4;
}

} // namespace

void widenQ5_0Block(const uint8_t *block, float *values) {
  const float d = halfAt(block);
  uint32_t highBits;
  std::memcpy(&highBits, block + 2, sizeof highBits);
  for (int64_t i = 0; i < kQuantBlock; ++i)
    values[i] = d * static_cast<float>(static_cast<int>(fiveBitCode(block + 6, highBits, i)) - 16);
}

void widenQ5_1Block(const uint8_t *block, float *values) {
  const float d = halfAt(block), m = halfAt(block + 2);
  uint32_t highBits;
  std::memcpy(&highBits, block + 4, sizeof highBits);
  for (int64_t i = 0; i < kQuantBlock; ++i) {
    // Product and sum rounded apart, as gguf's numpy computes them.
    const float product = d * static_cast<float>(fiveBitCode(block + 8, highBits, i));
    values[i] = product + m;
  }
}

void dequantizeQ5_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads) {
  dequantizeBlocks("dequantizeQ5_0Rows", blocks, k, n, kQuantBlock, kQ5_0BlockBytes, out, threads, widenQ5_0Block);
}

void dequantizeQ5_1Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads) {
  dequantizeBlocks("dequantizeQ5_1Rows", blocks, k, n, kQuantBlock, kQ5_1BlockBytes, out, threads, widenQ5_1Block);
}

} // namespace gpt::kernels
