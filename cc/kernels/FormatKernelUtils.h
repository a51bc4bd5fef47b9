// What several formats' kernels (FormatKernels.h, one file per format in formats/) share: the walks
// over a matrix's blocks, over the words of a lane layout and over a GGUF tensor's blocks, into which
// each format's file puts its own block, and the checks the walks make. The walks are templates so
// that a format's per-block code compiles inline into them, as if each format wrote its own loops;
// their out-of-line parts are in LanePacking.cpp and GgufRepacking.cpp. Private to //cc/kernels.
#ifndef GPT_CC_KERNELS_FORMATKERNELUTILS_H
#define GPT_CC_KERNELS_FORMATKERNELUTILS_H

#include "cc/kernels/BlockTranscoding.h"
#include "cc/kernels/FormatKernels.h"
#include "cc/kernels/ParallelFor.h"
#include "cc/kernels/Quantization.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace gpt::kernels {

// ---- quantizing a [K, N] matrix ----------------------------------------------------------------

/// Calls `quantize(block, n)` for column n of every block of `blockRows` rows of K in a [rows, cols]
/// matrix, the blocks split over `threads` threads; throws unless rows is a multiple of `blockRows`
/// (`what`: the block's name). A template: each format's per-column loops compile as written inline.
template <typename QuantizeColumn>
void forEachBlockColumn(int64_t rows, int64_t cols, int64_t blockRows, const char *what, int64_t threads,
                        QuantizeColumn quantize) {
  if (rows < 0 || cols < 0 || rows % blockRows != 0)
    throw std::invalid_argument("the reduction dimension K = " + std::to_string(rows) + " is not a multiple of " +
                                what + " (" + std::to_string(blockRows) + ")");
  parallelFor(rows / blockRows, threads, [&](int64_t firstBlock, int64_t endBlock) {
    for (int64_t block = firstBlock; block < endBlock; ++block)
      for (int64_t n = 0; n < cols; ++n) quantize(block, n);
  });
}

// ---- packing and reading lanes (WeightFormats.h's layouts) -------------------------------------

/// The value whose bits are those of `value` (C++20's std::bit_cast, in the C++17 this builds as).
template <typename To, typename From> To bitCast(From value) {
  static_assert(sizeof(To) == sizeof(From));
  To result;
  std::memcpy(&result, &value, sizeof result);
  return result;
}

/// Throws unless a [rows, cols] matrix divides into whole panels of `width` columns and whole
/// groups of `rowMultiple` rows along K (the words' rows, or the quantization block).
void checkLaneShape(const char *what, int64_t rows, int64_t cols, int64_t width, int64_t rowMultiple, const char *why);

/// Throws unless each of the rows * cols `codes` fits in `Bits` bits. With the throw out of line the
/// loop is small enough to inline into each caller, where it compares against a constant, as the
/// loops written out per format did (same instructions, same speed).
[[noreturn]] void throwWideCode(const char *what, int bits, int code, int64_t row, int64_t column);
template <int Bits> void checkCodeBits(const char *what, const uint8_t *codes, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i)
    if (codes[i] > (1 << Bits) - 1) throwWideCode(what, Bits, codes[i], i / cols, i % cols);
}

/// Calls `word(panelRow, column)` for every word of a lane layout with `rowsPerWord` rows of K
/// per word and stores what it returns, panel by panel: the words are written front to back and
/// each panel row reads `rowsPerWord` runs of `width` consecutive source elements; panels are
/// split over `threads` threads.
template <typename MakeWord>
void writeLanes(int64_t rows, int64_t cols, int64_t width, int64_t rowsPerWord, uint32_t *packed, int64_t threads,
                MakeWord word) {
  const int64_t panelRows = rows / rowsPerWord;
  // Panels are independent: each thread writes whole ones.
  parallelFor(cols / width, threads, [&](int64_t firstPanel, int64_t endPanel) {
    for (int64_t panel = firstPanel; panel < endPanel; ++panel)
      for (int64_t r = 0; r < panelRows; ++r) {
        uint32_t *out = packed + (panel * panelRows + r) * width;
        for (int64_t c = 0; c < width; ++c) out[c] = word(r, panel * width + c);
      }
  });
}

/// Calls `store(wordRow, column, word, scale, min)` for every word of a lane layout of 32-weight
/// blocks, with the f32 scale of its block and, where the block has `halves` = 2 fp16 values per
/// column ([.., 2, width] scale panels: a scale, then a min), its min, else 0. Checks the shape
/// first (checkLaneShape; `what` names the caller).
template <typename Store>
void readQuantizedLanes(const char *what, const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols,
                        int64_t width, int64_t rowsPerWord, int64_t halves, Store store) {
  checkLaneShape(what, rows, cols, width, kQuantBlock, "the quantization block");
  const int64_t blocks = rows / kQuantBlock, panelRows = rows / rowsPerWord, wordsPerBlock = kQuantBlock / rowsPerWord;
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t r = 0; r < panelRows; ++r)
      for (int64_t c = 0; c < width; ++c) {
        const uint16_t *header = scales + (panel * blocks + r / wordsPerBlock) * halves * width + c;
        const float scale = fromFp16(header[0]), min = halves == 2 ? fromFp16(header[width]) : 0.0f;
        store(r, panel * width + c, lanes[(panel * panelRows + r) * width + c], scale, min);
      }
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

/// Sub-block s (of 8) of a q4_K super-block's 128 bytes of `nibbles` as its 4 lane words
/// (q4_0BlockWords' layout), made with no byte array between (q4_KSubBlockBytes' bytes). Inline: the
/// q4_K and q5_K repacks call it for every sub-block, some 40 million times at 1.7B Q4_K_M.
inline void q4_KSubBlockWords(const uint8_t *nibbles, int64_t s, uint32_t *words) {
#ifdef __SSE2__
  const uint8_t *bytes = nibbles + 32 * (s / 2);
  const int shift = 4 * static_cast<int>(s % 2);
  const __m128i mask = _mm_set1_epi8(0x0F), count = _mm_cvtsi32_si128(shift);
  const __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i *>(bytes));
  const __m128i high = _mm_loadu_si128(reinterpret_cast<const __m128i *>(bytes + 16));
  nibbleLaneWords(_mm_and_si128(_mm_srl_epi16(low, count), mask), _mm_and_si128(_mm_srl_epi16(high, count), mask),
                  words);
#else
  uint8_t q4_0Bytes[kQuantBlock / 2];
  q4_KSubBlockBytes(nibbles, s, q4_0Bytes);
  q4_0BlockWords(q4_0Bytes, words);
#endif
}

// ---- repacking a GGUF tensor's blocks (GgufRepacking.h) ----------------------------------------

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

  ConvertedBlocks(const std::vector<BlockRows> &parts, const char *target, int64_t bytes, bool checked);
  /// K must be a multiple of each part's block (256 for the K-quants).
  void checkK(int64_t k, const char *what) const;
  int64_t rowBytes(int64_t k, size_t part) const { return k / conversions[part]->values * conversions[part]->bytes; }
  void forPanels(int64_t width) {
    slots.assign(width * kMostPerBlock * targetBytes, 0);
    columns.assign(width, {0, 0});
  }
  void column(int64_t c, size_t part, int64_t row) { columns[c] = {part, row}; }
  /// Whether every part's blocks are the format's own blocks of `values` weights (32, or a
  /// super-block's 256): handed out where they lie in the file, no conversion, so that a walk may
  /// read them without operator().
  bool ownBlocksOnly(int64_t values = kQuantBlock) const {
    for (const BlockConversion *conversion : conversions)
      if (conversion->convert || conversion->values != values) return false;
    return true;
  }
  /// Checks the fp16 fields of own block `index` of column c (ownBlocksOnly), where `block` lies.
  void checkOwn(const uint8_t *block, int64_t c, int64_t index) const {
    if (checked) checkHalves(*conversions[columns[c].first], block, c, index);
  }
  /// Block b (of 32 weights) of column c's row. Inline for a block of the format's own, of 32
  /// weights (a weight whose other parts are converted: the walks take a weight of own blocks only
  /// without this, ownBlocksOnly); out of line otherwise.
  const uint8_t *operator()(const uint8_t *row, int64_t b, int64_t c) {
    const BlockConversion &conversion = *conversions[columns[c].first];
    if (conversion.convert || conversion.values != kQuantBlock) return convertedOrWhole(conversion, row, b, c);
    const uint8_t *block = row + b * conversion.bytes;
    if (checked) checkHalves(conversion, block, c, b);
    return block;
  }
  /// operator() for a block that is converted, or is part of a super-block.
  const uint8_t *convertedOrWhole(const BlockConversion &conversion, const uint8_t *row, int64_t b, int64_t c);
  /// Throws (throwNonFinite) where an fp16 field of block `index` of column c is a NaN or infinite.
  void checkHalves(const BlockConversion &conversion, const uint8_t *block, int64_t c, int64_t index) const {
    for (int64_t h = 0; h < conversion.halves; ++h) {
      uint16_t bits;
      std::memcpy(&bits, block + conversion.halfOffsets[h], sizeof bits);
      if ((bits & 0x7C00u) == 0x7C00u) throwNonFinite(conversion, c, index, h, bits);
    }
  }
  /// "<type> block 3 of row 5 (values 768 to 1023)", with " of part 2" after the row for a fused
  /// weight.
  std::string where(const BlockConversion &conversion, int64_t c, int64_t index) const;
  /// The error of fp16 field `h` (bits `bits`, a NaN or infinity) of block `index` of column c.
  [[noreturn]] void throwNonFinite(const BlockConversion &conversion, int64_t c, int64_t index, int64_t h,
                                   uint16_t bits) const;
};

/// The columns `parts` hold together, checked as every repack checks them: no part of negative
/// rows, permuted heads of an even row count each (BlockRows::permutedHeads), and a padded column count of at least
/// that many and a multiple of the panel width (std::invalid_argument naming `what` otherwise).
int64_t checkedColumns(const char *what, const std::vector<BlockRows> &parts, int64_t paddedN, int64_t width);

/// The blocks of a repacking into a format of super-blocks (`target`'s blocks of `targetBytes`),
/// after the checks its repack makes first: K a positive multiple of the super-block (`superBlock`
/// names it, "x's super-block") and of each part's block, and the columns (checkedColumns).
ConvertedBlocks checkedSuperBlockSource(const char *what, const char *superBlock, const char *target,
                                        int64_t targetBytes, const std::vector<BlockRows> &parts, int64_t k,
                                        int64_t paddedN, int64_t width);

/// Where a panel's columns read: each column's row of blocks and its length in bytes (null and 0
/// for a padding column), and each real column's part and row in that part.
struct PanelRows {
  std::vector<const uint8_t *> rows;
  std::vector<int64_t> bytes, parts, partRows;
};

/// Finds the rows of panels taken in increasing order (a cursor over the parts).
template <typename Source> class PanelRowCursor {
public:
  PanelRowCursor(const std::vector<BlockRows> &parts, const Source &source, int64_t k, int64_t width)
      : parts(parts), source(source), k(k), width(width) {}
  /// Panel `panel`'s rows into `out`; panels at or after the last one asked for.
  void locate(int64_t panel, PanelRows &out) {
    out.rows.resize(width);
    out.bytes.resize(width);
    out.parts.resize(width);
    out.partRows.resize(width);
    for (int64_t c = 0; c < width; ++c) {
      const int64_t j = panel * width + c;
      while (part < parts.size() && j >= partStart + parts[part].rows) partStart += parts[part++].rows;
      const bool real = part < parts.size();
      out.bytes[c] = real ? source.rowBytes(k, part) : 0;
      out.rows[c] = real ? parts[part].row(j - partStart, out.bytes[c]) : nullptr;
      out.parts[c] = static_cast<int64_t>(part);
      out.partRows[c] = j - partStart;
    }
  }

private:
  const std::vector<BlockRows> &parts;
  const Source &source;
  int64_t k, width;
  size_t part = 0;
  int64_t partStart = 0; // the first row of part `part`
};

/// The panels of a repack, split over `threads` (each thread writes whole panels): calls
/// `visitPanel(panel, rows, next, blocksOf)` with the panel's rows, the next panel's (or no rows,
/// after this thread's last) and this thread's copy of `source`, told each real column's part and
/// file row (for its errors).
template <typename Source, typename VisitPanel>
void forEachPanel(const std::vector<BlockRows> &parts, const Source &source, int64_t k, int64_t paddedN, int64_t width,
                  int64_t threads, VisitPanel visitPanel) {
  parallelFor(paddedN / width, threads, [&](int64_t firstPanel, int64_t endPanel) {
    Source blocksOf = source; // this thread's
    blocksOf.forPanels(width);
    PanelRowCursor<Source> cursor(parts, source, k, width);
    PanelRows rows, next, none;
    cursor.locate(firstPanel, next);
    for (int64_t panel = firstPanel; panel < endPanel; ++panel) {
      std::swap(rows, next);
      if (panel + 1 < endPanel) cursor.locate(panel + 1, next);
      for (int64_t c = 0; c < width; ++c)
        if (rows.rows[c])
          blocksOf.column(c, rows.parts[c],
                          parts[rows.parts[c]].fileRow(rows.partRows[c])); // errors name the file's row
      visitPanel(panel, rows.rows, panel + 1 < endPanel ? next : none, blocksOf);
    }
  });
}

/// The walk of a repack into super-blocks: within a panel, one column at a time, its row read
/// front to back `step` blocks at a time. Calls `visit(panel, i, c, block)` for step i of column c,
/// `block` being its first block (`source(row, i * step, c)`), or null for a padding column.
///
/// Each column is a row of the file. Super-blocks (144 or 210 bytes) go one column at a time: 32
/// rows read a super-block at a time kept q4_K's repack waiting for memory, 2x the time of one row
/// after another (75 MB of blocks, 2 threads: 21-24 ms against 41-47; q6_K 50 against 57).
template <typename Source, typename Visit>
void forEachPanelStep(const std::vector<BlockRows> &parts, const Source &source, int64_t k, int64_t paddedN,
                      int64_t width, int64_t step, int64_t threads, Visit visit) {
  const int64_t steps = k / kQuantBlock / step;
  // A step of the format's own blocks is one block of `step` 32-weight blocks, taken where it lies
  // and checked inline: the source's operator() was a call per super-block (convertedOrWhole), 19%
  // of a Q4_K_M load's samples.
  const bool ownBlocks = source.ownBlocksOnly(step * kQuantBlock);
  forEachPanel(parts, source, k, paddedN, width, threads,
               [&](int64_t panel, const std::vector<const uint8_t *> &rows, const PanelRows &, Source &blocksOf) {
                 for (int64_t c = 0; c < width; ++c)
                   for (int64_t i = 0; i < steps; ++i) {
                     const uint8_t *block = nullptr;
                     if (rows[c] && ownBlocks) {
                       block = rows[c] + i * blocksOf.targetBytes;
                       blocksOf.checkOwn(block, c, i);
                     } else if (rows[c]) {
                       block = blocksOf(rows[c], i * step, c);
                     }
                     visit(panel, i, c, block);
                   }
               });
}

/// The walk of a repack into lanes of 32-weight blocks (34 or 18 bytes): within a panel, one block
/// step at a time across all its columns, so that each word row of the panel is written front to
/// back. Calls `visitStep(panel, i, rows, blocksOf, blocks)` with the panel's rows (null for a
/// padding column), this thread's source, whose `blocksOf(rows[c], i, c)` is column c's block of
/// step i, and room for the step's `width` block pointers.
///
/// A step reads a block from each of the panel's 32 rows: more streams than the hardware prefetcher
/// follows, and a q8_0 repack waited on those reads (its samples sat on the first load of each
/// block). So each step also asks for its share of the next panel's rows, front to back, one row
/// after another. With four columns' words stored together (repackLanes), 143 MB of q8_0
/// blocks repack in 46 ms instead of 62 on one thread (tools/bench/bench_repack.py).
template <typename Source, typename VisitStep>
void forEachPanelStepAcross(const std::vector<BlockRows> &parts, const Source &source, int64_t k, int64_t paddedN,
                            int64_t width, int64_t threads, VisitStep visitStep) {
  constexpr int64_t kLineBytes = 64;
  const int64_t steps = k / kQuantBlock;
  forEachPanel(parts, source, k, paddedN, width, threads,
               [&](int64_t panel, const std::vector<const uint8_t *> &rows, const PanelRows &next, Source &blocksOf) {
                 std::vector<const uint8_t *> blocks(width);
                 int64_t nextLines = 0; // the next panel's lines, row after row
                 for (int64_t bytes : next.bytes) nextLines += (bytes + kLineBytes - 1) / kLineBytes;
                 const int64_t linesPerStep = (nextLines + steps - 1) / steps;
                 size_t column = 0;
                 int64_t offset = 0; // the next line to ask for: byte `offset` of next column `column`'s row
                 for (int64_t i = 0; i < steps; ++i) {
                   for (int64_t asked = 0; asked < linesPerStep && column < next.rows.size(); ++asked) {
                     while (column < next.rows.size() && offset >= next.bytes[column]) ++column, offset = 0;
                     if (column == next.rows.size()) break;
                     __builtin_prefetch(next.rows[column] + offset);
                     offset += kLineBytes;
                   }
                   visitStep(panel, i, rows.data(), blocksOf, blocks.data());
                 }
               });
}

/// The super-block values of a scale panel's column at most: one per sub-block of 32 weights, and
/// two header values (a scale and a min).
constexpr int64_t kMostSuperBlockScaleValues = kSuperBlock / kQuantBlock + 2;
/// The lane words a super-block of one column fills at most: 8-bit codes, 4 to a word.
constexpr int64_t kMostSuperBlockWords = kSuperBlock / 4;

/// The repack of a format of super-blocks: the parts' rows of super-blocks (of `target` or
/// converted into it; checkedSuperBlockSource's checks) into lanes [paddedN / w, K / 256 *
/// wordsPerSuperBlock, w] and scale panels whose column holds, per super-block, one 16-bit value
/// per sub-block of 32 weights and `headerRows` more: a panel's rows are every super-block's
/// sub-block values, then every super-block's header values (so that the matmul reads the former
/// as one [.., K/32, ..] view). `column(block, values, words)` makes a column's values (sub-blocks
/// first) and words from its super-block; padding columns get zeros. Super-block by super-block,
/// so that each column's super-block is unpacked once.
template <typename Column>
void repackSuperBlocks(const char *what, const char *superBlock, const char *target, int64_t targetBytes,
                       int64_t headerRows, int64_t wordsPerSuperBlock, const std::vector<BlockRows> &parts, int64_t k,
                       int64_t paddedN, int64_t width, uint32_t *codes, uint16_t *scales, int64_t threads,
                       Column column) {
  const ConvertedBlocks source =
      checkedSuperBlockSource(what, superBlock, target, targetBytes, parts, k, paddedN, width);
  constexpr int64_t subRows = kSuperBlock / kQuantBlock;
  const int64_t superBlocks = k / kSuperBlock, panelRows = superBlocks * wordsPerSuperBlock;
  const int64_t panelScaleRows = superBlocks * (subRows + headerRows);
  assert(subRows + headerRows <= kMostSuperBlockScaleValues && wordsPerSuperBlock <= kMostSuperBlockWords);
  forEachPanelStep(parts, source, k, paddedN, width, subRows, threads,
                   [&](int64_t panel, int64_t sb, int64_t c, const uint8_t *block) {
                     uint16_t values[kMostSuperBlockScaleValues];
                     uint32_t words[kMostSuperBlockWords];
                     if (block) {
                       column(block, values, words);
                     } else {
                       std::fill(values, values + subRows + headerRows, uint16_t{0});
                       std::fill(words, words + wordsPerSuperBlock, 0u);
                     }
                     uint16_t *panelScales = scales + panel * panelScaleRows * width + c;
                     for (int64_t s = 0; s < subRows; ++s) panelScales[(sb * subRows + s) * width] = values[s];
                     for (int64_t h = 0; h < headerRows; ++h)
                       panelScales[(superBlocks * subRows + sb * headerRows + h) * width] = values[subRows + h];
                     uint32_t *codeRows = codes + (panel * panelRows + sb * wordsPerSuperBlock) * width + c;
                     for (int64_t w = 0; w < wordsPerSuperBlock; ++w) codeRows[w * width] = words[w];
                   });
}

/// The lane words one block of 32 weights fills at most: 8-bit codes, 4 to a word.
constexpr int64_t kMostLaneWordsPerBlock = kQuantBlock / 4;

/// A format of 32-weight blocks whose lanes repackLanes writes: llama.cpp's block (`halves` fp16
/// header values, a scale and maybe a min, then the codes) and the lane words of its codes.
struct LaneFormat {
  const char *what, *name; // the repack's name for errors; the format's, as blockConversion takes it
  int64_t blockBytes, halves, wordsPerBlock;
  uint32_t padWord; // the words of a padding column
  void (*blockWords)(const uint8_t *codes, uint32_t *words);
};

/// Writes four columns' lane words (`words[q][w]`, word w of column q, w < `wordsPerBlock`, a
/// multiple of 4) into their word rows `width` apart: each row's four words in one 16-byte store,
/// where a word at a time took four.
inline void storeFourColumns(const uint32_t (*words)[kMostLaneWordsPerBlock], int64_t wordsPerBlock, uint32_t *rows,
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

/// The checks every repackLanes makes before it writes: K a positive multiple of 32 and of each
/// part's block, and the columns (checkedColumns); std::invalid_argument naming `format` otherwise.
void checkLaneRepack(const LaneFormat &format, const ConvertedBlocks &source, const std::vector<BlockRows> &parts,
                     int64_t k, int64_t paddedN, int64_t width);

/// Repacks the parts' rows of blocks (of `Format` or of a type blockConversion converts into it)
/// into lane words [paddedN / w, K / 32 * wordsPerBlock, w] made by the format's blockWords and the
/// header values [paddedN / w, K / 32, halves, w]. Columns n .. paddedN - 1 get zero scales and
/// mins and padWord words. `checked`: every block's fp16 fields checked to be finite.
///
/// A template over the format, instantiated in its own file, so that its blockWords compiles
/// inline. Parts all in the format's own blocks (a Q8_0 file's tensors into q8_0, the common case)
/// take their blocks where they lie and test a step's fp16 fields once, the source's per-block
/// check naming the block only when one fails. The per-block source lookup and check, and
/// blockWords called through a pointer, took a fifth of the repack: 143 MB of q8_0 blocks in
/// 59 ms on one thread and 34 on two, 47-50 and 26-28 without them (tools/bench/bench_repack.py,
/// the AMX Xeon of 2026-12-03); a first load of the 1.7B Q8_0 file 0.89 -> 0.70 s.
template <const LaneFormat &Format>
void repackLanes(const std::vector<BlockRows> &parts, bool checked, int64_t k, int64_t paddedN, int64_t width,
                 uint32_t *codes, uint16_t *scales, int64_t threads) {
  // A part of a type with no conversion into the format is reported before a bad K.
  ConvertedBlocks source(parts, Format.name, Format.blockBytes, checked);
  checkLaneRepack(Format, source, parts, k, paddedN, width);
  constexpr int64_t halves = Format.halves, wordsPerBlock = Format.wordsPerBlock;
  static_assert(wordsPerBlock <= kMostLaneWordsPerBlock);
  const int64_t perRow = k / kQuantBlock, panelRows = perRow * wordsPerBlock;
  const bool ownBlocks = source.ownBlocksOnly();
  const bool fourAtOnce = width % 4 == 0 && wordsPerBlock % 4 == 0;
  forEachPanelStepAcross(
      parts, source, k, paddedN, width, threads,
      [&](int64_t panel, int64_t b, const uint8_t *const *rows, ConvertedBlocks &blocksOf, const uint8_t **blocks) {
        // Own blocks where they lie; others through the source, which converts and checks them.
        if (ownBlocks)
          for (int64_t c = 0; c < width; ++c) blocks[c] = rows[c] ? rows[c] + b * Format.blockBytes : nullptr;
        else
          for (int64_t c = 0; c < width; ++c) blocks[c] = rows[c] ? blocksOf(rows[c], b, c) : nullptr;
        uint16_t *scaleRow = scales + (panel * perRow + b) * halves * width;
        bool nonFinite = false; // some fp16 field has every exponent bit set: NaN or inf
        for (int64_t c = 0; c < width; ++c)
          for (int64_t h = 0; h < halves; ++h) {
            uint16_t value = 0;
            if (blocks[c]) std::memcpy(&value, blocks[c] + 2 * h, sizeof value);
            scaleRow[h * width + c] = value;
            nonFinite |= (value & 0x7C00u) == 0x7C00u;
          }
        if (ownBlocks && checked && nonFinite) // the source's check names the first and throws
          for (int64_t c = 0; c < width; ++c)
            if (rows[c]) blocksOf(rows[c], b, c);
        uint32_t *codeRows = codes + (panel * panelRows + b * wordsPerBlock) * width;
        for (int64_t c = 0; c < width; c += fourAtOnce ? 4 : 1) {
          const int64_t columns = fourAtOnce ? 4 : 1;
          uint32_t words[4][kMostLaneWordsPerBlock];
          for (int64_t q = 0; q < columns; ++q)
            if (blocks[c + q])
              Format.blockWords(blocks[c + q] + 2 * halves, words[q]);
            else
              std::fill(words[q], words[q] + wordsPerBlock, Format.padWord);
          if (fourAtOnce)
            storeFourColumns(words, wordsPerBlock, codeRows + c, width);
          else
            for (int64_t w = 0; w < wordsPerBlock; ++w) codeRows[w * width + c] = words[0][w];
        }
      });
}

// ---- widening a GGUF tensor's blocks to f32 ----------------------------------------------------

/// Calls `widen(codes, header, out)` for each of the n * k / 32 blocks of `blocks`, with the
/// block's `halves` fp16 header values (a scale, and a min where it has one) as floats, the codes
/// after them and its 32 outputs.
template <typename Widen>
void dequantizeRows(const char *what, const uint8_t *blocks, int64_t k, int64_t n, int64_t blockBytes, int64_t halves,
                    float *out, Widen widen) {
  if (k <= 0 || k % kQuantBlock != 0 || n < 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) +
                                " is not a positive multiple of the quantization block (32)");
  const int64_t count = n * (k / kQuantBlock);
  for (int64_t b = 0; b < count; ++b) {
    const uint8_t *block = blocks + b * blockBytes;
    float header[2] = {0.0f, 0.0f};
    for (int64_t h = 0; h < halves; ++h) {
      uint16_t bits;
      std::memcpy(&bits, block + 2 * h, sizeof bits);
      header[h] = fromFp16(bits);
    }
    widen(block + 2 * halves, header, out + b * kQuantBlock);
  }
}

/// Calls `widen(block, out)` for each of the n * k / `values` blocks of `blockBytes` bytes, `out`
/// being the block's `values` outputs; rows are split over `threads`.
template <typename Widen>
void dequantizeBlocks(const char *what, const uint8_t *blocks, int64_t k, int64_t n, int64_t values, int64_t blockBytes,
                      float *out, int64_t threads, Widen widen) {
  if (k <= 0 || k % values != 0 || n < 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) +
                                " is not a positive multiple of the block (" + std::to_string(values) + ")");
  const int64_t perRow = k / values;
  parallelFor(n, threads, [&](int64_t firstRow, int64_t endRow) {
    for (int64_t b = firstRow * perRow; b < endRow * perRow; ++b) widen(blocks + b * blockBytes, out + b * values);
  });
}

#ifdef __SSE2__
/// Four floats of `codes` (16 unsigned bytes, each below 256) from byte 4 `quarter` on.
inline __m128 quarterAsFloats(__m128i codes, int quarter) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i words = quarter < 2 ? _mm_unpacklo_epi8(codes, zero) : _mm_unpackhi_epi8(codes, zero);
  return _mm_cvtepi32_ps(quarter % 2 == 0 ? _mm_unpacklo_epi16(words, zero) : _mm_unpackhi_epi16(words, zero));
}
#endif

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_FORMATKERNELUTILS_H
