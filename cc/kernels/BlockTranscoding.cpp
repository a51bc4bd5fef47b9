// GGUF blocks rewritten in the formats the compiler stores (see BlockTranscoding.h): the lookups of
// the block-type and conversion tables and the transcoding of whole rows. The tables, a row per type
// and per conversion, are WeightFormats.cpp's; the conversions themselves are their target format's
// kernels (FormatKernels.h).
#include "cc/kernels/BlockTranscoding.h"

#include "cc/kernels/FormatKernels.h"
#include "cc/kernels/ParallelFor.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpt::kernels {
namespace {

/// "no block type 'x' (...)", the parenthesis listing the known types.
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

} // namespace

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
  for (const ConversionsInto &into : conversionsIntoFormats())
    if (target == into.target)
      for (const BlockConversion &conversion : into.conversions)
        if (type == conversion.name) return conversion;
  throw std::invalid_argument("no conversion of " + type + " blocks into " + target + " (" + conversionsTaken() + ")");
}

std::vector<std::string> convertedTypes(const std::string &target) {
  std::vector<std::string> types;
  for (const ConversionsInto &into : conversionsIntoFormats())
    if (target == into.target)
      for (const BlockConversion &conversion : into.conversions) types.push_back(conversion.name);
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
