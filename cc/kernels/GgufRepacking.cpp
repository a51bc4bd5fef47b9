// llama.cpp's blocks repacked (and converted) into lane layouts (see GgufRepacking.h): each
// format's repacking (FormatKernels.h).
#include "cc/kernels/GgufRepacking.h"

#include "cc/kernels/BlockTranscoding.h"
#include "cc/kernels/FormatKernels.h"
#include "cc/kernels/KQuantScales.h"
#include "cc/kernels/ParallelFor.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpt::kernels {
namespace {

/// Words of codes one block of 32 weights fills in each lane layout.
constexpr int64_t kQ8_0WordsPerBlock = kQuantBlock / kQ8_0RowsPerWord;
constexpr int64_t kQ4_0WordsPerBlock = kQuantBlock / kQ4_0RowsPerWord;

/// One q8_0 block's 32 codes as its 8 lane words: byte i of word q is code q + 8 i.
void q8_0BlockWords(const uint8_t *codes, uint32_t *words) {
#ifdef __SSE2__
  // A 4 x 8 byte transpose in four unpacks (SSE2 is every x86-64's): interleaving the runs
  // 0-7 with 8-15 and 16-23 with 24-31 by bytes, then those by 16-bit pairs, puts codes q, q + 8,
  // q + 16, q + 24 side by side (the byte loop took 3 times the q4_0 repacking's time).
  const __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i *>(codes));
  const __m128i high = _mm_loadu_si128(reinterpret_cast<const __m128i *>(codes + 16));
  const __m128i pairsLow = _mm_unpacklo_epi8(low, _mm_srli_si128(low, 8));    // c0 c8 c1 c9 ...
  const __m128i pairsHigh = _mm_unpacklo_epi8(high, _mm_srli_si128(high, 8)); // c16 c24 c17 c25 ...
  _mm_storeu_si128(reinterpret_cast<__m128i *>(words), _mm_unpacklo_epi16(pairsLow, pairsHigh));
  _mm_storeu_si128(reinterpret_cast<__m128i *>(words + 4), _mm_unpackhi_epi16(pairsLow, pairsHigh));
#else
  for (int64_t q = 0; q < kQ8_0WordsPerBlock; ++q) {
    uint32_t word = 0;
    for (int64_t i = 0; i < kQ8_0RowsPerWord; ++i)
      word |= static_cast<uint32_t>(codes[q + kQ8_0WordsPerBlock * i]) << (8 * i);
    words[q] = word;
  }
#endif
}

#ifdef __SSE2__
/// The 4 lane words of 32 4-bit codes, n[0..15] in `low` and n[16..31] in `high` (one code per
/// byte): byte i of word o holds codes o + 8 i (low nibble) and o + 4 + 8 i (high nibble). Pairs
/// k = o + 8 i first (code k beside code k + 4), then a 4 x 4 byte transpose in two unpacks.
inline void nibbleLaneWords(__m128i low, __m128i high, uint32_t *words) {
  const __m128i pairsLow = _mm_or_si128(low, _mm_slli_epi16(_mm_srli_si128(low, 4), 4));    // k < 16
  const __m128i pairsHigh = _mm_or_si128(high, _mm_slli_epi16(_mm_srli_si128(high, 4), 4)); // k >= 16
  const __m128i i01 = _mm_unpacklo_epi8(pairsLow, _mm_srli_si128(pairsLow, 8));             // o, o + 8
  const __m128i i23 = _mm_unpacklo_epi8(pairsHigh, _mm_srli_si128(pairsHigh, 8));           // o + 16, o + 24
  _mm_storeu_si128(reinterpret_cast<__m128i *>(words), _mm_unpacklo_epi16(i01, i23));
}
#endif

/// One q4_0 block's 16 bytes as its 4 lane words. llama.cpp's byte m holds code m (low nibble)
/// and code m + 16 (high); byte i of word o must hold codes o + 8 i (low) and o + 4 + 8 i (high):
/// bytes o, o + 4, o + 8 and o + 12 hold all eight, low nibbles for i = 0, 1 and high ones for
/// i = 2, 3.
void q4_0BlockWords(const uint8_t *bytes, uint32_t *words) {
#ifdef __SSE2__
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i *>(bytes));
  const __m128i mask = _mm_set1_epi8(0x0F);
  nibbleLaneWords(_mm_and_si128(packed, mask), _mm_and_si128(_mm_srli_epi16(packed, 4), mask), words);
#else
  for (int64_t o = 0; o < kQ4_0WordsPerBlock; ++o) {
    const uint32_t a = bytes[o], b = bytes[o + 4], c = bytes[o + 8], d = bytes[o + 12];
    words[o] = ((a & 0xFu) | (b & 0xFu) << 4) | ((c & 0xFu) | (d & 0xFu) << 4) << 8 | ((a >> 4) | (b & 0xF0u)) << 16 |
               ((c >> 4) | (d & 0xF0u)) << 24;
  }
#endif
}

/// Each part's blocks in its own GGUF type (BlockRows::type), read as blocks of 32 weights of the
/// repacking's format: a block the format's own is handed out where it lies in the file; another
/// is converted (BlockConversion) when block b starts it, into the column's slot, and handed out
/// from there. Every block's fp16 fields are checked first. Each thread works on its own copy,
/// made for panels of `width` columns, told each column's part and row before its blocks.
struct ConvertedBlocks {
  static constexpr int64_t kMostPerBlock = kSuperBlock / kQuantBlock;
  std::vector<const BlockConversion *> conversions; // by part
  int64_t targetBytes = 0;
  bool severalParts = false;
  bool checked = true;                             // the fp16 fields
  std::vector<uint8_t> slots;                      // [width][kMostPerBlock blocks of the format]
  std::vector<std::pair<size_t, int64_t>> columns; // each column's part and row within it

  ConvertedBlocks(const std::vector<BlockRows> &parts, const char *target, int64_t bytes, bool checked)
      : targetBytes(bytes), severalParts(parts.size() > 1), checked(checked) {
    for (const BlockRows &part : parts)
      conversions.push_back(&blockConversion(part.type.empty() ? target : part.type, target));
  }
  /// K must be a multiple of each part's block (256 for the K-quants).
  void checkK(int64_t k, const char *what) const {
    for (const BlockConversion *conversion : conversions)
      if (k % conversion->values != 0)
        throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) + " is not a multiple of " +
                                    conversion->name + "'s block (" + std::to_string(conversion->values) + ")");
  }
  int64_t rowBytes(int64_t k, size_t part) const { return k / conversions[part]->values * conversions[part]->bytes; }
  void forPanels(int64_t width) {
    slots.assign(width * kMostPerBlock * targetBytes, 0);
    columns.assign(width, {0, 0});
  }
  void column(int64_t c, size_t part, int64_t row) { columns[c] = {part, row}; }
  const uint8_t *operator()(const uint8_t *row, int64_t b, int64_t c) {
    const BlockConversion &conversion = *conversions[columns[c].first];
    const int64_t perBlock = conversion.values / kQuantBlock, index = b / perBlock;
    const uint8_t *block = row + index * conversion.bytes;
    uint8_t *slot = slots.data() + c * kMostPerBlock * targetBytes;
    if (b % perBlock == 0) {
      for (int64_t h = 0; checked && h < conversion.halves; ++h) {
        uint16_t bits;
        std::memcpy(&bits, block + conversion.halfOffsets[h], sizeof bits);
        if ((bits & 0x7C00u) == 0x7C00u)
          throw std::invalid_argument(where(conversion, c, index) + " has fp16 " + conversion.halfNames[h] + " " +
                                      (bits & 0x03FFu   ? "nan"
                                       : bits & 0x8000u ? "-inf"
                                                        : "inf") +
                                      "; " + conversion.name + " " + conversion.halfNames[h] + "s must be finite");
      }
      if (conversion.convert) try {
          conversion.convert(block, slot);
        } catch (const std::invalid_argument &error) {
          throw std::invalid_argument(where(conversion, c, index) + ": " + error.what());
        }
    }
    return conversion.convert ? slot + b % perBlock * targetBytes : block;
  }
  /// "q6_k block 3 of row 5 (values 768 to 1023)", with " of part 2" after the row for a fused weight.
  std::string where(const BlockConversion &conversion, int64_t c, int64_t index) const {
    const auto [part, row] = columns[c];
    return std::string(conversion.name) + " block " + std::to_string(index) + " of row " + std::to_string(row) +
           (severalParts ? " of part " + std::to_string(part) : "") + " (values " +
           std::to_string(index * conversion.values) + " to " + std::to_string((index + 1) * conversion.values - 1) +
           ")";
  }
};

/// The columns `parts` hold together, checked as every repack checks them: no part of negative
/// rows, and a padded column count of at least that many and a multiple of the panel width
/// (std::invalid_argument naming `what` otherwise).
int64_t checkedColumns(const char *what, const std::vector<BlockRows> &parts, int64_t paddedN, int64_t width) {
  int64_t n = 0;
  for (const BlockRows &part : parts) {
    if (part.rows < 0)
      throw std::invalid_argument(std::string(what) + ": a part of " + std::to_string(part.rows) + " rows");
    n += part.rows;
  }
  if (paddedN < n || width <= 0 || paddedN % width != 0)
    throw std::invalid_argument(std::string(what) + ": the padded column count " + std::to_string(paddedN) +
                                " must be at least " + std::to_string(n) + " and a multiple of the panel width " +
                                std::to_string(width));
  return n;
}

/// The walk every repack takes. Panels are independent, so each thread writes whole panels;
/// within a panel, `step` blocks at a time across its columns, so each word row of the panel is
/// written front to back and the columns' next blocks sit beside the ones just read. Calls
/// `visit(panel, i, c, block)` for step i of column c, `block` being its first block
/// (`source(row, i * step, c)`), or null for a padding column.
template <typename Source, typename Visit>
void forEachPanelStep(const std::vector<BlockRows> &parts, const Source &source, int64_t k, int64_t paddedN,
                      int64_t width, int64_t step, int64_t threads, Visit visit) {
  const int64_t steps = k / kQuantBlock / step;
  parallelFor(paddedN / width, threads, [&](int64_t firstPanel, int64_t endPanel) {
    Source blocksOf = source; // this thread's
    blocksOf.forPanels(width);
    std::vector<const uint8_t *> rows(width); // each column's row of blocks; null for padding
    size_t part = 0;
    int64_t partStart = 0; // the first row of part `part`
    for (int64_t panel = firstPanel; panel < endPanel; ++panel) {
      for (int64_t c = 0; c < width; ++c) {
        const int64_t j = panel * width + c;
        while (part < parts.size() && j >= partStart + parts[part].rows) partStart += parts[part++].rows;
        rows[c] = part < parts.size() ? parts[part].blocks + (j - partStart) * source.rowBytes(k, part) : nullptr;
        if (rows[c]) blocksOf.column(c, part, j - partStart);
      }
      for (int64_t i = 0; i < steps; ++i)
        for (int64_t c = 0; c < width; ++c) visit(panel, i, c, rows[c] ? blocksOf(rows[c], i * step, c) : nullptr);
    }
  });
}

/// Repacks `n` rows of `k` weights in llama.cpp blocks (`halves` fp16 header values: the scale,
/// and for q4_1 the min; then codes), block b of column c's row given by `source(row, b, c)` (ConvertedBlocks), into
/// lane words [paddedN / w, K / 32 * wordsPerBlock, w] made by `blockWords`, and the header
/// values [paddedN / w, K / 32, halves, w]. Columns n .. paddedN - 1 get zero scales and mins
/// and `padWord` words.
template <typename BlockWords, typename Source>
void repackRows(const char *what, const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width,
                Source source, int64_t halves, int64_t wordsPerBlock, uint32_t padWord, BlockWords blockWords,
                uint32_t *codes, uint16_t *scales, int64_t threads) {
  if (k <= 0 || k % kQuantBlock != 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) +
                                " is not a positive multiple of the quantization block (32)");
  source.checkK(k, what);
  checkedColumns(what, parts, paddedN, width);
  const int64_t perRow = k / kQuantBlock, panelRows = perRow * wordsPerBlock;
  static_assert(kQ8_0WordsPerBlock >= kQ4_0WordsPerBlock);
  forEachPanelStep(parts, source, k, paddedN, width, 1, threads,
                   [&](int64_t panel, int64_t b, int64_t c, const uint8_t *block) {
                     uint16_t *scaleRow = scales + (panel * perRow + b) * halves * width;
                     uint32_t *codeRows = codes + (panel * panelRows + b * wordsPerBlock) * width;
                     for (int64_t h = 0; h < halves; ++h) {
                       uint16_t value = 0;
                       if (block) std::memcpy(&value, block + 2 * h, sizeof value);
                       scaleRow[h * width + c] = value;
                     }
                     uint32_t words[kQ8_0WordsPerBlock];
                     if (block)
                       blockWords(block + 2 * halves, words);
                     else
                       std::fill(words, words + wordsPerBlock, padWord);
                     for (int64_t w = 0; w < wordsPerBlock; ++w) codeRows[w * width + c] = words[w];
                   });
}

/// A lane format's blocks and words (FormatKernels.h): q8_0's, q4_0's, q4_1's.
struct LaneFormat {
  const char *what, *name;
  int64_t blockBytes, halves, wordsPerBlock;
  uint32_t padWord; // the words of a padding column
  void (*blockWords)(const uint8_t *, uint32_t *);
};
// q4_1's codes are q4_0's nibbles, paired the same way; a zero scale and min make padding 0.
constexpr LaneFormat kQ8_0Lanes{"repackQ8_0Rows", "q8_0", kQ8_0BlockBytes, 1, kQ8_0WordsPerBlock, 0u, q8_0BlockWords};
constexpr LaneFormat kQ4_0Lanes{"repackQ4_0Rows",   "q4_0",        kQ4_0BlockBytes, 1,
                                kQ4_0WordsPerBlock, kQ4_0ZeroWord, q4_0BlockWords};
constexpr LaneFormat kQ4_1Lanes{"repackQ4_1Rows", "q4_1", kQ4_1BlockBytes, 2, kQ4_0WordsPerBlock, 0u, q4_0BlockWords};

void repackAs(const LaneFormat &format, const std::vector<BlockRows> &parts, bool checked, int64_t k, int64_t paddedN,
              int64_t width, uint32_t *codes, uint16_t *scales, int64_t threads) {
  repackRows(format.what, parts, k, paddedN, width, ConvertedBlocks(parts, format.name, format.blockBytes, checked),
             format.halves, format.wordsPerBlock, format.padWord, format.blockWords, codes, scales, threads);
}

} // namespace

// One array of blocks: the layout alone, unchecked (quantizeRowsToQ8_0Lanes' own blocks). Parts: a
// file's tensors, each block's fp16 fields checked.
void repackQ8_0Rows(const uint8_t *blocks, int64_t k, int64_t n, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  repackAs(kQ8_0Lanes, {{blocks, n}}, false, k, paddedN, width, codes, scales, threads);
}

void repackQ8_0Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  repackAs(kQ8_0Lanes, parts, true, k, paddedN, width, codes, scales, threads);
}

void repackQ4_0Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  repackAs(kQ4_0Lanes, parts, true, k, paddedN, width, codes, scales, threads);
}

void repackQ4_1Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  repackAs(kQ4_1Lanes, parts, true, k, paddedN, width, codes, scales, threads);
}

void quantizeRowsToQ8_0Lanes(const float *matrix, int64_t n, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                             uint16_t *scales, int64_t threads) {
  if (k <= 0 || k % kQuantBlock != 0)
    throw std::invalid_argument("quantizeRowsToQ8_0Lanes: K = " + std::to_string(k) +
                                " is not a positive multiple of the quantization block (32)");
  if (n < 0 || paddedN < n || width <= 0 || paddedN % width != 0)
    throw std::invalid_argument("quantizeRowsToQ8_0Lanes: the padded column count " + std::to_string(paddedN) +
                                " must be at least " + std::to_string(n) + " and a multiple of the panel width " +
                                std::to_string(width));
  const int64_t rowBytes = k / kQuantBlock * kQ8_0BlockBytes, panels = paddedN / width;
  // Chunks of panels whose blocks take about 4 MiB: cache-sized, and many chunks per thread.
  const int64_t chunk = std::max<int64_t>(1, (int64_t{4} << 20) / (rowBytes * width));
  parallelFor((panels + chunk - 1) / chunk, threads, [&](int64_t firstChunk, int64_t endChunk) {
    std::unique_ptr<uint8_t[]> blocks(new uint8_t[chunk * width * rowBytes]); // written before read: no zero fill
    for (int64_t c = firstChunk; c < endChunk; ++c) {
      const int64_t firstPanel = c * chunk, endPanel = std::min(panels, firstPanel + chunk);
      const int64_t firstRow = firstPanel * width,
                    rows = std::max<int64_t>(0, std::min(n, endPanel * width) - firstRow);
      quantizeQ8_0Rows(matrix + firstRow * k, rows, k, blocks.get());
      // Panels are independent: these are written at their own offsets.
      repackQ8_0Rows(blocks.get(), k, rows, (endPanel - firstPanel) * width, width,
                     codes + firstPanel * (k / kQ8_0RowsPerWord) * width,
                     scales + firstPanel * (k / kQuantBlock) * width);
    }
  });
}

/// Sub-block s (of 8) of a q4_K super-block's 128 bytes of nibbles as its 4 lane words (as
/// q4_0BlockWords lays out a block). Sub-block s's 32 codes are the low (even s) or high (odd s)
/// nibbles of bytes 32 (s / 2) .. + 31, code m in byte m.
void q4_KSubBlockWords(const uint8_t *nibbles, int64_t s, uint32_t *words) {
  const uint8_t *bytes = nibbles + 32 * (s / 2);
  const int shift = 4 * static_cast<int>(s % 2);
#ifdef __SSE2__
  const __m128i mask = _mm_set1_epi8(0x0F), count = _mm_cvtsi32_si128(shift);
  const __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i *>(bytes));
  const __m128i high = _mm_loadu_si128(reinterpret_cast<const __m128i *>(bytes + 16));
  nibbleLaneWords(_mm_and_si128(_mm_srl_epi16(low, count), mask), _mm_and_si128(_mm_srl_epi16(high, count), mask),
                  words);
#else
  uint8_t q4_0Bytes[kQuantBlock / 2]; // code m low and code m + 16 high, as q4_0's
  for (int64_t m = 0; m < kQuantBlock / 2; ++m)
    q4_0Bytes[m] = static_cast<uint8_t>(((bytes[m] >> shift) & 0x0F) | (((bytes[m + 16] >> shift) & 0x0F) << 4));
  q4_0BlockWords(q4_0Bytes, words);
#endif
}

void repackQ4_KRows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  const char *what = "repackQ4_KRows";
  if (k <= 0 || k % kSuperBlock != 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) +
                                " is not a positive multiple of q4_K's super-block (256)");
  ConvertedBlocks source(parts, "q4_k", kQ4_KBlockBytes, true);
  source.checkK(k, what);
  checkedColumns(what, parts, paddedN, width);
  constexpr int64_t subBlocks = kSuperBlock / kQuantBlock;
  const int64_t superBlocks = k / kSuperBlock, panelRows = k / kQ4_0RowsPerWord;
  // Super-block by super-block: each column's sub-block scales and mins unpacked once.
  forEachPanelStep(parts, source, k, paddedN, width, subBlocks, threads,
                   [&](int64_t panel, int64_t sb, int64_t c, const uint8_t *block) {
                     // The panel's sub-block rows, then its (d, dmin) rows (FormatKernels.h's q4_K section).
                     uint16_t *panelScales = scales + panel * superBlocks * kQ4_KScaleRows * width;
                     uint16_t *subRows = panelScales + sb * subBlocks * width;
                     uint16_t *superRows = panelScales + (superBlocks * subBlocks + 2 * sb) * width;
                     uint32_t *codeRows = codes + (panel * panelRows + sb * subBlocks * kQ4_0WordsPerBlock) * width;
                     if (!block) {
                       for (int64_t s = 0; s < subBlocks; ++s) subRows[s * width + c] = 0;
                       superRows[c] = superRows[width + c] = 0;
                       for (int64_t w = 0; w < subBlocks * kQ4_0WordsPerBlock; ++w) codeRows[w * width + c] = 0;
                       return;
                     }
                     std::memcpy(&superRows[c], block, sizeof(uint16_t));             // d
                     std::memcpy(&superRows[width + c], block + 2, sizeof(uint16_t)); // dmin
                     uint8_t scaleBytes[subBlocks], minBytes[subBlocks];
                     uint32_t words[kQ4_0WordsPerBlock];
                     scalesAndMins(block + 4, scaleBytes, minBytes);
                     for (int64_t s = 0; s < subBlocks; ++s) {
                       subRows[s * width + c] = static_cast<uint16_t>(scaleBytes[s] | minBytes[s] << 8);
                       q4_KSubBlockWords(block + 16, s, words);
                       for (int64_t w = 0; w < kQ4_0WordsPerBlock; ++w)
                         codeRows[(s * kQ4_0WordsPerBlock + w) * width + c] = words[w];
                     }
                   });
}

void q6_KCodes(const uint8_t *block, uint8_t *codes) {
  // Weight j of run s of 32 in half g of 128 takes the low (s < 2) or high nibble of
  // low[64 g + 32 (s % 2) + j] and bits 2 s, 2 s + 1 of high[32 g + j] (dequantizeQ6_KRows).
  const uint8_t *low = block, *high = block + kSuperBlock / 2;
  for (int64_t g = 0; g < 2; ++g)
    for (int64_t s = 0; s < 4; ++s)
      for (int64_t j = 0; j < kQuantBlock; ++j)
        codes[128 * g + 32 * s + j] = static_cast<uint8_t>(((low[64 * g + 32 * (s % 2) + j] >> (4 * (s / 2))) & 0x0F) |
                                                           ((high[32 * g + j] >> (2 * s)) & 0x03) << 4);
}

#ifdef __SSE2__
__m128i q6_KRunCodes(const uint8_t *block, int64_t h) {
  // Run h = 8 g + 2 s + half: half `half` of q6_KCodes' run of 32 s in half g of 128.
  const int64_t g = h / 8, s = h % 8 / 2, half = h % 2;
  const __m128i nibble = _mm_set1_epi8(0x0F), pair = _mm_set1_epi8(0x03);
  __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + 64 * g + 32 * (s % 2) + 16 * half));
  __m128i top = _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + kSuperBlock / 2 + 32 * g + 16 * half));
  codes = _mm_and_si128(_mm_srl_epi16(codes, _mm_cvtsi32_si128(static_cast<int>(4 * (s / 2)))), nibble);
  top = _mm_and_si128(_mm_srl_epi16(top, _mm_cvtsi32_si128(static_cast<int>(2 * s))), pair);
  return _mm_or_si128(codes, _mm_slli_epi16(top, 4));
}
#endif

namespace {
constexpr int64_t kQ6_KRuns = kSuperBlock / kQ6_KRunValues;

/// A q6_K super-block's 16 runs as their lane words, run h's 3 at words[3 h ..] (q6_KCodes, then
/// q6_KRunWords per run; in SSE2 four runs at a time, with no byte array between).
void q6_KSuperBlockWords(const uint8_t *block, uint32_t *words) {
#ifdef __SSE2__
  __m128i runs[kQ6_KRuns];
  for (int64_t h = 0; h < kQ6_KRuns; ++h) runs[h] = q6_KRunCodes(block, h);
  // Lane i of a run (32 bits) holds codes 4 i .. 4 i + 3, a byte each; byte i of each of its
  // words is a function of that lane alone (q6_KRunWords), computed in the lane, then four runs'
  // lanes narrowed to bytes together: word k of run 4 q + r in lane r of `narrowed`.
  auto bits = [](__m128i lane, int shift, int mask) {
    return _mm_and_si128(_mm_srli_epi32(lane, shift), _mm_set1_epi32(mask));
  };
  for (int q = 0; q < kQ6_KRuns / 4; ++q) {
    __m128i perRun[kQ6_KWordsPerRun][4];
    for (int r = 0; r < 4; ++r) {
      const __m128i lane = runs[4 * q + r];
      perRun[0][r] = _mm_or_si128(bits(lane, 0, 0x0F), bits(lane, 12, 0xF0));
      perRun[1][r] = _mm_or_si128(bits(lane, 8, 0x0F), bits(lane, 20, 0xF0));
      perRun[2][r] = _mm_or_si128(_mm_or_si128(bits(lane, 4, 0x03), bits(lane, 10, 0x0C)),
                                  _mm_or_si128(bits(lane, 16, 0x30), bits(lane, 22, 0xC0)));
    }
    for (int k = 0; k < kQ6_KWordsPerRun; ++k) {
      const __m128i narrowed =
          _mm_packus_epi16(_mm_packs_epi32(perRun[k][0], perRun[k][1]), _mm_packs_epi32(perRun[k][2], perRun[k][3]));
      uint32_t four[4];
      _mm_storeu_si128(reinterpret_cast<__m128i *>(four), narrowed);
      for (int r = 0; r < 4; ++r) words[(4 * q + r) * kQ6_KWordsPerRun + k] = four[r];
    }
  }
#else
  uint8_t codes[kSuperBlock];
  q6_KCodes(block, codes);
  for (int64_t h = 0; h < kQ6_KRuns; ++h) q6_KRunWords(codes + h * kQ6_KRunValues, words + h * kQ6_KWordsPerRun);
#endif
}
} // namespace

void repackQ6_KRows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  const char *what = "repackQ6_KRows";
  if (k <= 0 || k % kSuperBlock != 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) +
                                " is not a positive multiple of q6_K's super-block (256)");
  ConvertedBlocks source(parts, "q6_k", kQ6_KBlockBytes, true);
  source.checkK(k, what);
  checkedColumns(what, parts, paddedN, width);
  constexpr int64_t runs = kSuperBlock / kQ6_KRunValues, pairs = kSuperBlock / kQuantBlock;
  constexpr int64_t wordsPerSuperBlock = runs * kQ6_KWordsPerRun;
  constexpr int64_t scalesAt = kSuperBlock / 2 + kSuperBlock / 4, dAt = scalesAt + runs;
  const int64_t superBlocks = k / kSuperBlock, panelRows = superBlocks * wordsPerSuperBlock;
  // Super-block by super-block: each column's codes unpacked once.
  forEachPanelStep(parts, source, k, paddedN, width, pairs, threads,
                   [&](int64_t panel, int64_t sb, int64_t c, const uint8_t *block) {
                     // The panel's rows of scale pairs, then its d rows (FormatKernels.h's q6_K section).
                     uint16_t *panelScales = scales + panel * superBlocks * kQ6_KScaleRows * width;
                     uint16_t *pairRows = panelScales + sb * pairs * width;
                     uint16_t *dRow = panelScales + (superBlocks * pairs + sb) * width;
                     uint32_t *codeRows = codes + (panel * panelRows + sb * wordsPerSuperBlock) * width;
                     if (!block) {
                       for (int64_t p = 0; p < pairs; ++p) pairRows[p * width + c] = 0;
                       dRow[c] = 0;
                       for (int64_t w = 0; w < wordsPerSuperBlock; ++w) codeRows[w * width + c] = 0;
                       return;
                     }
                     std::memcpy(&dRow[c], block + dAt, sizeof(uint16_t));
                     for (int64_t p = 0; p < pairs; ++p)
                       pairRows[p * width + c] =
                           static_cast<uint16_t>(block[scalesAt + 2 * p] | block[scalesAt + 2 * p + 1] << 8);
                     uint32_t words[wordsPerSuperBlock];
                     q6_KSuperBlockWords(block, words);
                     for (int64_t w = 0; w < wordsPerSuperBlock; ++w) codeRows[w * width + c] = words[w];
                   });
}

void q4_KAsQ4_1(const uint8_t *superBlock, uint8_t *out) {
  const float d = halfAt(superBlock), dmin = halfAt(superBlock + 2);
  float scales[8], mins[8];
  scalesAndMins(superBlock + 4, scales, mins);
  for (int64_t s = 0; s < kSuperBlock / kQuantBlock; ++s, out += kQ4_1BlockBytes) {
    const uint16_t header[2] = {toFp16(d * scales[s]), toFp16(-(dmin * mins[s]))};
    if (((header[0] & 0x7C00u) == 0x7C00u) | ((header[1] & 0x7C00u) == 0x7C00u))
      throw std::invalid_argument("a q4_K sub-block's scale or min (d or dmin times a 6-bit integer) is beyond "
                                  "fp16's range, or not finite");
    std::memcpy(out, header, sizeof header);
    // Sub-block s's 32 codes are the low (even s) or high (odd s) nibbles of 32 bytes; q4_1's
    // byte m holds code m low and code m + 16 high.
    const uint8_t *bytes = superBlock + 16 + 32 * (s / 2);
    const int shift = 4 * static_cast<int>(s % 2);
    for (int64_t m = 0; m < kQuantBlock / 2; ++m)
      out[4 + m] = static_cast<uint8_t>(((bytes[m] >> shift) & 0x0F) | (((bytes[m + 16] >> shift) & 0x0F) << 4));
  }
}

} // namespace gpt::kernels
