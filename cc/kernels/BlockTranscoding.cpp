// GGUF blocks rewritten in the formats the compiler stores (see BlockTranscoding.h).
#include "cc/kernels/BlockTranscoding.h"

#include "cc/kernels/GgufDequantizing.h"
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

/// A q4_0 (five = false) or q5_0 block as a q8_0 block: the same fp16 scale, and codes q - 8 (q4_0)
/// or q - 16 (q5_0, with bit i of qh as code i's fifth bit), exactly.
template <bool five> void narrowCodesAsQ8_0(const uint8_t *block, uint8_t *out) {
  const uint8_t *nibbles = block + (five ? 6 : 2);
  uint32_t highBits = 0;
  if (five) std::memcpy(&highBits, block + 2, sizeof highBits);
  std::memcpy(out, block, 2);
  for (int64_t i = 0; i < kQuantBlock; ++i) {
    const uint32_t low = i < 16 ? nibbles[i] & 0x0Fu : nibbles[i - 16] >> 4;
    const int code = static_cast<int>(low | ((highBits >> i) & 1u) << 4) - (five ? 16 : 8);
    out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(code));
  }
}

/// A block with a min or sub-block scales, widened as llama.cpp dequantizes it and quantized as
/// quantizeQ8_0Rows quantizes a row: q8_0 blocks are made 32 weights at a time, so a block at a
/// time gives the row's bits.
template <int64_t values, void (*widen)(const uint8_t *, float *)>
void widenAsQ8_0(const uint8_t *block, uint8_t *out) {
  float widened[values];
  widen(block, widened);
  for (int64_t b = 0; b < values / kQuantBlock; ++b)
    quantizeQ8_0Block(widened + b * kQuantBlock, out + b * kQ8_0BlockBytes);
}

/// q4_1's blocks (32 weights) widened one at a time.
void widenQ4_1Block(const uint8_t *block, float *values) { dequantizeQ4_1Rows(block, kQuantBlock, 1, values); }

/// q4_0 as q4_1, exactly: d * (q - 8) is d * q + m with m = -8 d (a power of two times an fp16),
/// the codes unchanged.
void q4_0AsQ4_1(const uint8_t *block, uint8_t *out) {
  const uint16_t header[2] = {halfBitsAt(block), toFp16(fromFp16(halfBitsAt(block)) * -8.0f)};
  std::memcpy(out, header, sizeof header);
  std::memcpy(out + 4, block + 2, kQuantBlock / 2);
}

const BlockConversion kToQ8_0[] = {
    {"q8_0", kQuantBlock, kQ8_0BlockBytes, 1, {0, 0}, {"scale", ""}, nullptr},
    {"q4_0", kQuantBlock, kQ4_0BlockBytes, 1, {0, 0}, {"scale", ""}, narrowCodesAsQ8_0<false>},
    {"q5_0", kQuantBlock, kQ5_0BlockBytes, 1, {0, 0}, {"scale", ""}, narrowCodesAsQ8_0<true>},
    {"q4_1", kQuantBlock, kQ4_1BlockBytes, 2, {0, 2}, {"scale", "min"}, widenAsQ8_0<kQuantBlock, widenQ4_1Block>},
    {"q5_1", kQuantBlock, kQ5_1BlockBytes, 2, {0, 2}, {"scale", "min"}, widenAsQ8_0<kQuantBlock, widenQ5_1Block>},
    {"q4_k", kSuperBlock, kQ4_KBlockBytes, 2, {0, 2}, {"scale", "min"}, widenAsQ8_0<kSuperBlock, widenQ4_KBlock>},
    {"q5_k", kSuperBlock, kQ5_KBlockBytes, 2, {0, 2}, {"scale", "min"}, widenAsQ8_0<kSuperBlock, widenQ5_KBlock>},
    {"q6_k",
     kSuperBlock,
     kQ6_KBlockBytes,
     1,
     {kQ6_KBlockBytes - 2, 0},
     {"scale", ""},
     widenAsQ8_0<kSuperBlock, widenQ6_KBlock>},
};
const BlockConversion kToQ4_1[] = {
    {"q4_1", kQuantBlock, kQ4_1BlockBytes, 2, {0, 2}, {"scale", "min"}, nullptr},
    {"q4_0", kQuantBlock, kQ4_0BlockBytes, 1, {0, 0}, {"scale", ""}, q4_0AsQ4_1},
    {"q4_k", kSuperBlock, kQ4_KBlockBytes, 2, {0, 2}, {"scale", "min"}, q4_KAsQ4_1},
};
// q4_K is kept as itself only (repackQ4_KRows): its fp16 fields are the super-block's d and dmin.
const BlockConversion kToQ4_K[] = {
    {"q4_k", kSuperBlock, kQ4_KBlockBytes, 2, {0, 2}, {"scale", "min"}, nullptr},
};
// q6_K likewise (repackQ6_KRows): its one fp16 field is the super-block's d, after the codes and scales.
const BlockConversion kToQ6_K[] = {
    {"q6_k", kSuperBlock, kQ6_KBlockBytes, 1, {kQ6_KBlockBytes - 2, 0}, {"scale", ""}, nullptr},
};
const BlockConversion kToQ4_0[] = {
    {"q4_0", kQuantBlock, kQ4_0BlockBytes, 1, {0, 0}, {"scale", ""}, nullptr},
};

} // namespace

BlockShape blockShape(const std::string &type) {
  for (const BlockType &candidate : kBlockTypes)
    if (type == candidate.name) return {candidate.values, candidate.bytes};
  return {blockType(type, 0, "blockShape").values, 0}; // throws, naming the types
}

const BlockConversion &blockConversion(const std::string &type, const std::string &target) {
  auto find = [&](const auto &table) -> const BlockConversion * {
    for (const BlockConversion &conversion : table)
      if (type == conversion.type) return &conversion;
    return nullptr;
  };
  const BlockConversion *found = target == "q8_0"   ? find(kToQ8_0)
                                 : target == "q4_1" ? find(kToQ4_1)
                                 : target == "q4_0" ? find(kToQ4_0)
                                 : target == "q4_k" ? find(kToQ4_K)
                                 : target == "q6_k" ? find(kToQ6_K)
                                                    : nullptr;
  if (!found)
    throw std::invalid_argument("no conversion of " + type + " blocks into " + target +
                                " (q8_0 takes q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k and q6_k; q4_1 takes q4_0, "
                                "q4_1 and q4_k; q4_0, q4_k and q6_k only themselves)");
  return *found;
}

std::vector<std::string> convertedTypes(const std::string &target) {
  std::vector<std::string> types;
  auto add = [&](const auto &table) {
    for (const BlockConversion &conversion : table) types.push_back(conversion.type);
  };
  if (target == "q8_0") add(kToQ8_0);
  if (target == "q4_1") add(kToQ4_1);
  if (target == "q4_0") add(kToQ4_0);
  if (target == "q4_k") add(kToQ4_K);
  if (target == "q6_k") add(kToQ6_K);
  return types;
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
  const BlockConversion &conversion = blockConversion(type, "q8_0");
  const int64_t perBlock = source.values / kQuantBlock;
  parallelFor(n * (k / source.values), threads, [&](int64_t first, int64_t end) {
    for (int64_t b = first; b < end; ++b) {
      const uint8_t *block = blocks + b * source.bytes;
      for (int64_t h = 0; h < conversion.halves; ++h)
        if ((halfBitsAt(block + conversion.halfOffsets[h]) & 0x7C00u) == 0x7C00u)
          throw std::invalid_argument("requantizeRowsToQ8_0: block " + std::to_string(b % (k / source.values)) +
                                      " of row " + std::to_string(b / (k / source.values)) + " has a NaN or infinite " +
                                      conversion.halfNames[h]);
      uint8_t *target = out + b * perBlock * kQ8_0BlockBytes;
      if (conversion.convert)
        conversion.convert(block, target);
      else
        std::memcpy(target, block, static_cast<size_t>(source.bytes));
    }
  });
}

} // namespace gpt::kernels
