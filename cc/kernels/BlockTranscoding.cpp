// GGUF blocks rewritten in the formats the compiler stores (see BlockTranscoding.h).
#include "cc/kernels/BlockTranscoding.h"

#include "cc/kernels/GgufRepacking.h"
#include "cc/kernels/ParallelFor.h"
#include "cc/kernels/Quantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace gpt::kernels {
namespace {

/// A GGUF block type: the weights one block holds, its bytes, and its widening to float32.
struct BlockType {
  const char *name;
  int64_t values;
  int64_t bytes;
  void (*dequantize)(const uint8_t *, int64_t, int64_t, float *, int64_t);
};

void dequantizeQ4_0(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t) {
  dequantizeQ4_0Rows(blocks, k, n, out);
}
void dequantizeQ4_1(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t) {
  dequantizeQ4_1Rows(blocks, k, n, out);
}
void dequantizeQ8_0(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t) {
  dequantizeQ8_0Rows(blocks, k, n, out);
}

constexpr BlockType kBlockTypes[] = {
    {"q8_0", kQuantBlock, kQ8_0BlockBytes, dequantizeQ8_0},
    {"q4_0", kQuantBlock, kQ4_0BlockBytes, dequantizeQ4_0},
    {"q4_1", kQuantBlock, kQ4_1BlockBytes, dequantizeQ4_1},
    {"q5_0", kQuantBlock, kQ5_0BlockBytes, dequantizeQ5_0Rows},
    {"q5_1", kQuantBlock, kQ5_1BlockBytes, dequantizeQ5_1Rows},
    {"q4_k", kSuperBlock, kQ4_KBlockBytes, dequantizeQ4_KRows},
    {"q5_k", kSuperBlock, kQ5_KBlockBytes, dequantizeQ5_KRows},
    {"q6_k", kSuperBlock, kQ6_KBlockBytes, dequantizeQ6_KRows},
};

const BlockType &blockType(const std::string &type, int64_t k, const char *what) {
  for (const BlockType &candidate : kBlockTypes) {
    if (type != candidate.name) continue;
    if (k <= 0 || k % candidate.values != 0)
      throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) + " is not a positive multiple of " +
                                  type + "'s block (" + std::to_string(candidate.values) + ")");
    return candidate;
  }
  throw std::invalid_argument(std::string(what) + ": no block type '" + type +
                              "' (q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k)");
}

uint16_t halfBitsAt(const uint8_t *bytes) {
  uint16_t bits;
  std::memcpy(&bits, bytes, sizeof bits);
  return bits;
}

/// A q8_0 block from a block of 32 codes `codes[i] + offset` (offset -8 for q4_0, -16 for q5_0)
/// under the fp16 scale `scaleBits`.
void writeQ8_0Block(uint16_t scaleBits, const uint8_t *codes, int offset, uint8_t *out) {
  std::memcpy(out, &scaleBits, sizeof scaleBits);
  for (int64_t i = 0; i < kQuantBlock; ++i) out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(codes[i] + offset));
}

} // namespace

BlockShape blockShape(const std::string &type) {
  for (const BlockType &candidate : kBlockTypes)
    if (type == candidate.name) return {candidate.values, candidate.bytes};
  return {blockType(type, 0, "blockShape").values, 0}; // throws, naming the types
}

void transcodeQ4_KToQ4_1Rows(const uint8_t *blocks, int64_t k, int64_t n, uint8_t *out, int64_t threads) {
  blockType("q4_k", k, "transcodeQ4_KToQ4_1Rows");
  constexpr int64_t perSuperBlock = kSuperBlock / kQuantBlock;
  parallelFor(n * (k / kSuperBlock), threads, [&](int64_t first, int64_t end) {
    for (int64_t b = first; b < end; ++b)
      q4_KAsQ4_1(blocks + b * kQ4_KBlockBytes, out + b * perSuperBlock * kQ4_1BlockBytes);
  });
}

void requantizeRowsToQ8_0(const std::string &type, const uint8_t *blocks, int64_t k, int64_t n, uint8_t *out,
                          int64_t threads) {
  const BlockType &source = blockType(type, k, "requantizeRowsToQ8_0");
  const int64_t inRow = k / source.values * source.bytes, outRow = k / kQuantBlock * kQ8_0BlockBytes;
  if (type == "q8_0") {
    std::memcpy(out, blocks, static_cast<size_t>(n * inRow));
    return;
  }
  if (type == "q4_0" || type == "q5_0") {
    // The same scale; codes q - 8 (q4_0) or q - 16 (q5_0, with bit i of qh as code i's fifth bit).
    const bool five = type == "q5_0";
    parallelFor(n * (k / kQuantBlock), threads, [&](int64_t first, int64_t end) {
      uint8_t codes[kQuantBlock];
      for (int64_t b = first; b < end; ++b) {
        const uint8_t *block = blocks + b * source.bytes;
        const uint8_t *nibbles = block + (five ? 6 : 2);
        uint32_t highBits = 0;
        if (five) std::memcpy(&highBits, block + 2, sizeof highBits);
        for (int64_t i = 0; i < kQuantBlock; ++i) {
          const uint32_t low = i < 16 ? nibbles[i] & 0x0Fu : nibbles[i - 16] >> 4;
          codes[i] = static_cast<uint8_t>(low | ((highBits >> i) & 1u) << 4);
        }
        const uint16_t scale = halfBitsAt(block);
        if ((scale & 0x7C00u) == 0x7C00u)
          throw std::invalid_argument("requantizeRowsToQ8_0: block " + std::to_string(b) +
                                      " has a NaN or infinite scale");
        writeQ8_0Block(scale, codes, five ? -16 : -8, out + b * kQ8_0BlockBytes);
      }
    });
    return;
  }
  // A row at a time through a float buffer of each thread's own.
  parallelFor(n, threads, [&](int64_t firstRow, int64_t endRow) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = firstRow; r < endRow; ++r) {
      source.dequantize(blocks + r * inRow, k, 1, row.data(), 1);
      if (!std::all_of(row.begin(), row.end(), [](float value) { return std::isfinite(value); }))
        throw std::invalid_argument("requantizeRowsToQ8_0: row " + std::to_string(r) + " holds NaN or infinity");
      quantizeQ8_0Rows(row.data(), 1, k, out + r * outRow, 1);
    }
  });
}

} // namespace gpt::kernels
