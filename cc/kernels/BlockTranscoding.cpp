// GGUF blocks rewritten in the formats the compiler stores (see BlockTranscoding.h).
#include "cc/kernels/BlockTranscoding.h"

#include "cc/kernels/FormatKernels.h"
#include "cc/kernels/ParallelFor.h"
#include "cc/kernels/Quantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace gpt::kernels {
namespace {

void dequantizeQ4_0(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t) {
  dequantizeQ4_0Rows(blocks, k, n, out);
}
void dequantizeQ4_1(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t) {
  dequantizeQ4_1Rows(blocks, k, n, out);
}
void dequantizeQ8_0(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t) {
  dequantizeQ8_0Rows(blocks, k, n, out);
}

// The rows of ggufBlockTypes(), named for the conversion tables below. The K-quants' fp16 fields are
// their super-blocks' d and dmin; q6_K's one d follows its codes and scales.
// clang-format off
constexpr GgufBlockType kQ8_0Type = {"q8_0", kQuantBlock, kQ8_0BlockBytes, 1, {0, 0}, {"scale", ""},    dequantizeQ8_0};
constexpr GgufBlockType kQ4_0Type = {"q4_0", kQuantBlock, kQ4_0BlockBytes, 1, {0, 0}, {"scale", ""},    dequantizeQ4_0};
constexpr GgufBlockType kQ4_1Type = {"q4_1", kQuantBlock, kQ4_1BlockBytes, 2, {0, 2}, {"scale", "min"}, dequantizeQ4_1};
constexpr GgufBlockType kQ5_0Type = {"q5_0", kQuantBlock, kQ5_0BlockBytes, 1, {0, 0}, {"scale", ""},    dequantizeQ5_0Rows};
constexpr GgufBlockType kQ5_1Type = {"q5_1", kQuantBlock, kQ5_1BlockBytes, 2, {0, 2}, {"scale", "min"}, dequantizeQ5_1Rows};
constexpr GgufBlockType kQ4_KType = {"q4_k", kSuperBlock, kQ4_KBlockBytes, 2, {0, 2}, {"scale", "min"}, dequantizeQ4_KRows};
constexpr GgufBlockType kQ5_KType = {"q5_k", kSuperBlock, kQ5_KBlockBytes, 2, {0, 2}, {"scale", "min"}, dequantizeQ5_KRows};
constexpr GgufBlockType kQ6_KType = {"q6_k", kSuperBlock, kQ6_KBlockBytes, 1, {kQ6_KBlockBytes - 2, 0}, {"scale", ""},
                                     dequantizeQ6_KRows};
// clang-format on

/// "no block type 'x' (q8_0, ...)".
std::string noBlockType(const std::string &type) {
  std::string known;
  for (const GgufBlockType &candidate : ggufBlockTypes())
    known += (known.empty() ? "" : ", ") + std::string(candidate.name);
  return "no block type '" + type + "' (" + known + ")";
}

/// The row of `type`, checked against a K of `k` weights a row (`what` names the caller).
const GgufBlockType &blockType(const std::string &type, int64_t k, const char *what) {
  const GgufBlockType *row = findGgufBlockType(type);
  if (!row) throw std::invalid_argument(std::string(what) + ": " + noBlockType(type));
  const GgufBlockType &found = *row;
  if (k <= 0 || k % found.values != 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) + " is not a positive multiple of " +
                                type + "'s block (" + std::to_string(found.values) + ")");
  return found;
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
    {kQ8_0Type, nullptr},
    {kQ4_0Type, narrowCodesAsQ8_0<false>},
    {kQ5_0Type, narrowCodesAsQ8_0<true>},
    {kQ4_1Type, widenAsQ8_0<kQuantBlock, widenQ4_1Block>},
    {kQ5_1Type, widenAsQ8_0<kQuantBlock, widenQ5_1Block>},
    {kQ4_KType, widenAsQ8_0<kSuperBlock, widenQ4_KBlock>},
    {kQ5_KType, widenAsQ8_0<kSuperBlock, widenQ5_KBlock>},
    {kQ6_KType, widenAsQ8_0<kSuperBlock, widenQ6_KBlock>},
};
const BlockConversion kToQ4_1[] = {
    {kQ4_1Type, nullptr},
    {kQ4_0Type, q4_0AsQ4_1},
    {kQ4_KType, q4_KAsQ4_1},
};
// q4_K and q6_K are kept as themselves only (repackQ4_KRows, repackQ6_KRows).
const BlockConversion kToQ4_K[] = {{kQ4_KType, nullptr}};
const BlockConversion kToQ6_K[] = {{kQ6_KType, nullptr}};
const BlockConversion kToQ4_0[] = {{kQ4_0Type, nullptr}};

} // namespace

const std::vector<GgufBlockType> &ggufBlockTypes() {
  static const std::vector<GgufBlockType> types = {kQ8_0Type, kQ4_0Type, kQ4_1Type, kQ4_KType,
                                                   kQ6_KType, kQ5_0Type, kQ5_1Type, kQ5_KType};
  return types;
}

const GgufBlockType *findGgufBlockType(const std::string &type) {
  for (const GgufBlockType &candidate : ggufBlockTypes())
    if (type == candidate.name) return &candidate;
  return nullptr;
}

const GgufBlockType &ggufBlockType(const std::string &type) {
  if (const GgufBlockType *row = findGgufBlockType(type)) return *row;
  throw std::invalid_argument(noBlockType(type));
}

const BlockConversion &blockConversion(const std::string &type, const std::string &target) {
  auto find = [&](const auto &table) -> const BlockConversion * {
    for (const BlockConversion &conversion : table)
      if (type == conversion.name) return &conversion;
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
    for (const BlockConversion &conversion : table) types.push_back(conversion.name);
  };
  if (target == "q8_0") add(kToQ8_0);
  if (target == "q4_1") add(kToQ4_1);
  if (target == "q4_0") add(kToQ4_0);
  if (target == "q4_k") add(kToQ4_K);
  if (target == "q6_k") add(kToQ6_K);
  return types;
}

void transcodeRows(const std::string &type, const std::string &target, const uint8_t *blocks, int64_t k, int64_t n,
                   uint8_t *out, int64_t threads) {
  const GgufBlockType &source = blockType(type, k, "transcodeRows");
  const BlockConversion &conversion = blockConversion(type, target);
  const GgufBlockType &written = ggufBlockType(target);
  const int64_t perRow = k / source.values, outBytes = source.values / written.values * written.bytes;
  parallelFor(n * perRow, threads, [&](int64_t first, int64_t end) {
    for (int64_t b = first; b < end; ++b) {
      const uint8_t *block = blocks + b * source.bytes;
      for (int64_t h = 0; h < conversion.halves; ++h)
        if ((halfBitsAt(block + conversion.halfOffsets[h]) & 0x7C00u) == 0x7C00u)
          throw std::invalid_argument("transcodeRows: block " + std::to_string(b % perRow) + " of row " +
                                      std::to_string(b / perRow) + " has a NaN or infinite " + conversion.halfNames[h]);
      uint8_t *into = out + b * outBytes;
      if (conversion.convert)
        conversion.convert(block, into);
      else
        std::memcpy(into, block, static_cast<size_t>(source.bytes));
    }
  });
}

} // namespace gpt::kernels
