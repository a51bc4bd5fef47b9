// What every format's repacking shares (FormatKernelUtils.h): the blocks of a GGUF tensor's parts,
// converted and checked a block at a time (ConvertedBlocks) and the checks of a repack's shape (the
// repacking of the formats of 32-weight blocks, a template over their LaneFormat, is in
// FormatKernelUtils.h). Each format's own repack is its file in formats/ (see GgufRepacking.h).
#include "cc/kernels/GgufRepacking.h"

#include "cc/kernels/BlockTranscoding.h"
#include "cc/kernels/FormatKernelUtils.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpt::kernels {

ConvertedBlocks::ConvertedBlocks(const std::vector<BlockRows> &parts, const char *target, int64_t bytes, bool checked)
    : targetBytes(bytes), severalParts(parts.size() > 1), checked(checked) {
  for (const BlockRows &part : parts)
    conversions.push_back(&blockConversion(part.type.empty() ? target : part.type, target));
}

void ConvertedBlocks::checkK(int64_t k, const char *what) const {
  for (const BlockConversion *conversion : conversions)
    if (k % conversion->values != 0)
      throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) + " is not a multiple of " +
                                  conversion->name + "'s block (" + std::to_string(conversion->values) + ")");
}

const uint8_t *ConvertedBlocks::convertedOrWhole(const BlockConversion &conversion, const uint8_t *row, int64_t b,
                                                 int64_t c) {
  const int64_t perBlock = conversion.values / kQuantBlock, index = b / perBlock;
  const uint8_t *block = row + index * conversion.bytes;
  uint8_t *slot = slots.data() + c * kMostPerBlock * targetBytes;
  if (b % perBlock == 0) {
    if (checked) checkHalves(conversion, block, c, index);
    if (conversion.convert) try {
        conversion.convert(block, slot);
      } catch (const std::invalid_argument &error) {
        throw std::invalid_argument(where(conversion, c, index) + ": " + error.what());
      }
  }
  return conversion.convert ? slot + b % perBlock * targetBytes : block;
}

std::string ConvertedBlocks::where(const BlockConversion &conversion, int64_t c, int64_t index) const {
  const auto [part, row] = columns[c];
  return std::string(conversion.name) + " block " + std::to_string(index) + " of row " + std::to_string(row) +
         (severalParts ? " of part " + std::to_string(part) : "") + " (values " +
         std::to_string(index * conversion.values) + " to " + std::to_string((index + 1) * conversion.values - 1) + ")";
}

void ConvertedBlocks::throwNonFinite(const BlockConversion &conversion, int64_t c, int64_t index, int64_t h,
                                     uint16_t bits) const {
  throw std::invalid_argument(where(conversion, c, index) + " has fp16 " + conversion.halfNames[h] + " " +
                              (bits & 0x03FFu   ? "nan"
                               : bits & 0x8000u ? "-inf"
                                                : "inf") +
                              "; " + conversion.name + " " + conversion.halfNames[h] + "s must be finite");
}

int64_t checkedColumns(const char *what, const std::vector<BlockRows> &parts, int64_t paddedN, int64_t width) {
  int64_t n = 0;
  for (const BlockRows &part : parts) {
    if (part.rows < 0)
      throw std::invalid_argument(std::string(what) + ": a part of " + std::to_string(part.rows) + " rows");
    if (part.permutedHeads < 0 || (part.permutedHeads > 0 && part.rows % (2 * part.permutedHeads) != 0))
      throw std::invalid_argument(std::string(what) + ": a part of " + std::to_string(part.rows) +
                                  " rows is not an even row count for each of " + std::to_string(part.permutedHeads) +
                                  " permuted heads");
    n += part.rows;
  }
  if (paddedN < n || width <= 0 || paddedN % width != 0)
    throw std::invalid_argument(std::string(what) + ": the padded column count " + std::to_string(paddedN) +
                                " must be at least " + std::to_string(n) + " and a multiple of the panel width " +
                                std::to_string(width));
  return n;
}

ConvertedBlocks checkedSuperBlockSource(const char *what, const char *superBlock, const char *target,
                                        int64_t targetBytes, const std::vector<BlockRows> &parts, int64_t k,
                                        int64_t paddedN, int64_t width) {
  if (k <= 0 || k % kSuperBlock != 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) + " is not a positive multiple of " +
                                superBlock + " (" + std::to_string(kSuperBlock) + ")");
  ConvertedBlocks source(parts, target, targetBytes, true);
  source.checkK(k, what);
  checkedColumns(what, parts, paddedN, width);
  return source;
}

void checkLaneRepack(const LaneFormat &format, const ConvertedBlocks &source, const std::vector<BlockRows> &parts,
                     int64_t k, int64_t paddedN, int64_t width) {
  if (k <= 0 || k % kQuantBlock != 0)
    throw std::invalid_argument(std::string(format.what) + ": K = " + std::to_string(k) +
                                " is not a positive multiple of the quantization block (32)");
  source.checkK(k, format.what);
  checkedColumns(format.what, parts, paddedN, width);
}

} // namespace gpt::kernels
