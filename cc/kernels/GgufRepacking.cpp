// What every format's repacking shares (FormatKernelUtils.h): the blocks of a GGUF tensor's parts,
// converted and checked a block at a time (ConvertedBlocks), the checks of a repack's shape, and
// the repacking of the formats of 32-weight blocks, which differ only in their block's header and
// lane words (LaneFormat). Each format's own repack is its file in formats/ (see GgufRepacking.h).
#include "cc/kernels/GgufRepacking.h"

#include "cc/kernels/BlockTranscoding.h"
#include "cc/kernels/FormatKernelUtils.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

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

namespace {

/// Writes four columns' lane words (`words[q][w]`, word w of column q, w < `wordsPerBlock`, a
/// multiple of 4) into their word rows `width` apart: each row's four words in one 16-byte store,
/// where a word at a time took four.
void storeFourColumns(const uint32_t (*words)[kMostLaneWordsPerBlock], int64_t wordsPerBlock, uint32_t *rows,
                      int64_t width) {
#ifdef __SSE2__
  for (int64_t w = 0; w < wordsPerBlock; w += 4) {
    // A 4 x 4 transpose of 32-bit words: column q's words w .. w + 3 in, row w + j's columns out.
    const __m128i c0 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(words[0] + w));
    const __m128i c1 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(words[1] + w));
    const __m128i c2 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(words[2] + w));
    const __m128i c3 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(words[3] + w));
    const __m128i low01 = _mm_unpacklo_epi32(c0, c1), high01 = _mm_unpackhi_epi32(c0, c1);
    const __m128i low23 = _mm_unpacklo_epi32(c2, c3), high23 = _mm_unpackhi_epi32(c2, c3);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(rows + w * width), _mm_unpacklo_epi64(low01, low23));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(rows + (w + 1) * width), _mm_unpackhi_epi64(low01, low23));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(rows + (w + 2) * width), _mm_unpacklo_epi64(high01, high23));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(rows + (w + 3) * width), _mm_unpackhi_epi64(high01, high23));
  }
#else
  for (int64_t w = 0; w < wordsPerBlock; ++w)
    for (int64_t q = 0; q < 4; ++q) rows[w * width + q] = words[q][w];
#endif
}

} // namespace

void repackLanes(const LaneFormat &format, const std::vector<BlockRows> &parts, bool checked, int64_t k,
                 int64_t paddedN, int64_t width, uint32_t *codes, uint16_t *scales, int64_t threads) {
  const char *what = format.what;
  // A part of a type with no conversion into the format is reported before a bad K.
  ConvertedBlocks source(parts, format.name, format.blockBytes, checked);
  if (k <= 0 || k % kQuantBlock != 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) +
                                " is not a positive multiple of the quantization block (32)");
  source.checkK(k, what);
  checkedColumns(what, parts, paddedN, width);
  const int64_t halves = format.halves, wordsPerBlock = format.wordsPerBlock;
  const int64_t perRow = k / kQuantBlock, panelRows = perRow * wordsPerBlock;
  assert(wordsPerBlock <= kMostLaneWordsPerBlock);
  forEachPanelStepAcross(parts, source, k, paddedN, width, threads,
                         [&](int64_t panel, int64_t b, const uint8_t *const *blocks) {
                           uint16_t *scaleRow = scales + (panel * perRow + b) * halves * width;
                           for (int64_t c = 0; c < width; ++c)
                             for (int64_t h = 0; h < halves; ++h) {
                               uint16_t value = 0;
                               if (blocks[c]) std::memcpy(&value, blocks[c] + 2 * h, sizeof value);
                               scaleRow[h * width + c] = value;
                             }
                           uint32_t *codeRows = codes + (panel * panelRows + b * wordsPerBlock) * width;
                           const bool fourAtOnce = width % 4 == 0 && wordsPerBlock % 4 == 0;
                           for (int64_t c = 0; c < width; c += fourAtOnce ? 4 : 1) {
                             const int64_t columns = fourAtOnce ? 4 : 1;
                             uint32_t words[4][kMostLaneWordsPerBlock];
                             for (int64_t q = 0; q < columns; ++q)
                               if (blocks[c + q])
                                 format.blockWords(blocks[c + q] + 2 * halves, words[q]);
                               else
                                 std::fill(words[q], words[q] + wordsPerBlock, format.padWord);
                             if (fourAtOnce)
                               storeFourColumns(words, wordsPerBlock, codeRows + c, width);
                             else
                               for (int64_t w = 0; w < wordsPerBlock; ++w) codeRows[w * width + c] = words[0][w];
                           }
                         });
}

} // namespace gpt::kernels
