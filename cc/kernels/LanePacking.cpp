// Matmul weights packed into, and read back from, lane layouts (WeightFormats.h): each format's lane
// kernels (FormatKernels.h).
#include "cc/kernels/FormatKernels.h"
#include "cc/kernels/ParallelFor.h"
#include "cc/kernels/Quantization.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace gpt::kernels {
namespace {

/// Throws unless a [rows, cols] matrix divides into whole panels of `width` columns and whole
/// groups of `rowMultiple` rows along K (the words' rows, or the quantization block).
void checkLaneShape(const char *what, int64_t rows, int64_t cols, int64_t width, int64_t rowMultiple, const char *why) {
  if (rows < 0 || rows % rowMultiple != 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(rows) + " is not a multiple of " +
                                std::to_string(rowMultiple) + " (" + why + ")");
  if (width <= 0 || cols < 0 || cols % width != 0)
    throw std::invalid_argument(std::string(what) + ": the column count " + std::to_string(cols) +
                                " is not a multiple of the panel width " + std::to_string(width));
}

/// Throws unless each of the rows * cols `codes` fits in `Bits` bits. With the throw out of line the
/// loop is small enough to inline into each caller, where it compares against a constant, as the
/// loops written out per format did (same instructions, same speed).
[[noreturn]] void throwWideCode(const char *what, int bits, int code, int64_t row, int64_t column) {
  throw std::invalid_argument(std::string(what) + ": code " + std::to_string(code) + " at row " + std::to_string(row) +
                              ", column " + std::to_string(column) + " is not a " + std::to_string(bits) + "-bit code");
}
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

float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

/// The row of K that byte `i` of q8_0 word row `r` holds: lane q = r % 8 of block r / 8 takes the
/// block's rows q, q + 8, q + 16, q + 24.
int64_t q8_0Row(int64_t r, int64_t i) {
  const int64_t lanes = kQuantBlock / kQ8_0RowsPerWord;
  return r / lanes * kQuantBlock + r % lanes + lanes * i;
}

/// The row of K that the low nibble of byte `i` of q4_0 word row `r` holds (its high nibble holds
/// the row 4 further): word o = r % 4 of block r / 4 pairs q8_0's lanes o and o + 4.
int64_t q4_0LowRow(int64_t r, int64_t i) {
  const int64_t words = kQuantBlock / kQ4_0RowsPerWord, q8Lanes = kQuantBlock / kQ8_0RowsPerWord;
  return r / words * kQuantBlock + r % words + q8Lanes * i;
}

/// Calls `store(wordRow, column, word, scale, min)` for every word of a q8_0/q4_0/q4_1 lane
/// layout, with the f32 scale of its block and (with `halves` = 2, q4_1's [.., 2, width] scales)
/// its min, else 0.
template <typename Store>
void readQuantizedLanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                        int64_t rowsPerWord, int64_t halves, Store store) {
  const int64_t blocks = rows / kQuantBlock, panelRows = rows / rowsPerWord, wordsPerBlock = kQuantBlock / rowsPerWord;
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t r = 0; r < panelRows; ++r)
      for (int64_t c = 0; c < width; ++c) {
        const uint16_t *header = scales + (panel * blocks + r / wordsPerBlock) * halves * width + c;
        const float scale = fromFp16(header[0]), min = halves == 2 ? fromFp16(header[width]) : 0.0f;
        store(r, panel * width + c, lanes[(panel * panelRows + r) * width + c], scale, min);
      }
}

} // namespace

void packBf16Lanes(const float *matrix, int64_t rows, int64_t cols, int64_t width, uint32_t *packed, int64_t threads) {
  checkLaneShape("packBf16Lanes", rows, cols, width, kBf16RowsPerWord, "bf16 lanes pair the two halves of K");
  const int64_t half = rows / 2;
  writeLanes(rows, cols, width, kBf16RowsPerWord, packed, threads, [&](int64_t r, int64_t j) {
    return static_cast<uint32_t>(toBf16(matrix[r * cols + j])) |
           static_cast<uint32_t>(toBf16(matrix[(r + half) * cols + j])) << 16;
  });
}

void packQ8_0Lanes(const int8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed, int64_t threads) {
  checkLaneShape("packQ8_0Lanes", rows, cols, width, kQuantBlock, "the quantization block");
  writeLanes(rows, cols, width, kQ8_0RowsPerWord, packed, threads, [&](int64_t r, int64_t j) {
    uint32_t word = 0;
    for (int64_t i = 0; i < kQ8_0RowsPerWord; ++i)
      word |= static_cast<uint32_t>(static_cast<uint8_t>(codes[q8_0Row(r, i) * cols + j])) << (8 * i);
    return word;
  });
}

void packQ4_0Lanes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed, int64_t threads) {
  checkLaneShape("packQ4_0Lanes", rows, cols, width, kQuantBlock, "the quantization block");
  checkCodeBits<4>("packQ4_0Lanes", codes, rows, cols);
  writeLanes(rows, cols, width, kQ4_0RowsPerWord, packed, threads, [&](int64_t r, int64_t j) {
    uint32_t word = 0;
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t low = q4_0LowRow(r, i);
      word |= static_cast<uint32_t>(codes[low * cols + j] | codes[(low + 4) * cols + j] << 4) << (8 * i);
    }
    return word;
  });
}

void q6_KRunWords(const uint8_t *codes, uint32_t *words) {
  words[0] = words[1] = words[2] = 0;
  for (int64_t i = 0; i < 4; ++i) {
    const uint8_t *q = codes + 4 * i;
    const uint32_t shift = static_cast<uint32_t>(8 * i);
    words[0] |= static_cast<uint32_t>((q[0] & 0x0F) | (q[2] & 0x0F) << 4) << shift;
    words[1] |= static_cast<uint32_t>((q[1] & 0x0F) | (q[3] & 0x0F) << 4) << shift;
    words[2] |= static_cast<uint32_t>(q[0] >> 4 | (q[1] >> 4) << 2 | (q[2] >> 4) << 4 | (q[3] >> 4) << 6) << shift;
  }
}

void packQ6_KLanes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed, int64_t threads) {
  checkLaneShape("packQ6_KLanes", rows, cols, width, kSuperBlock, "q6_K's super-block");
  checkCodeBits<6>("packQ6_KLanes", codes, rows, cols);
  const int64_t runs = rows / kQ6_KRunValues, panelRows = runs * kQ6_KWordsPerRun;
  parallelFor(cols / width, threads, [&](int64_t firstPanel, int64_t endPanel) {
    uint8_t run[kQ6_KRunValues];
    uint32_t words[kQ6_KWordsPerRun];
    for (int64_t panel = firstPanel; panel < endPanel; ++panel)
      for (int64_t h = 0; h < runs; ++h)
        for (int64_t c = 0; c < width; ++c) {
          const int64_t j = panel * width + c;
          for (int64_t r = 0; r < kQ6_KRunValues; ++r) run[r] = codes[(h * kQ6_KRunValues + r) * cols + j];
          q6_KRunWords(run, words);
          for (int64_t w = 0; w < kQ6_KWordsPerRun; ++w)
            packed[(panel * panelRows + h * kQ6_KWordsPerRun + w) * width + c] = words[w];
        }
  });
}

void dequantizeBf16Lanes(const uint32_t *lanes, int64_t rows, int64_t cols, int64_t width, float *matrix) {
  checkLaneShape("dequantizeBf16Lanes", rows, cols, width, kBf16RowsPerWord, "bf16 lanes pair the two halves of K");
  const int64_t panelRows = rows / kBf16RowsPerWord;
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t r = 0; r < panelRows; ++r)
      for (int64_t c = 0; c < width; ++c) {
        const uint32_t word = lanes[(panel * panelRows + r) * width + c];
        float *out = matrix + r * cols + panel * width + c;
        out[0] = floatOf(word << 16);                        // the low half is row r
        out[panelRows * cols] = floatOf(word & 0xffff0000u); // the high half row r + K/2
      }
}

void dequantizeQ8_0Lanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix) {
  checkLaneShape("dequantizeQ8_0Lanes", rows, cols, width, kQuantBlock, "the quantization block");
  readQuantizedLanes(lanes, scales, rows, cols, width, kQ8_0RowsPerWord, 1,
                     [&](int64_t r, int64_t j, uint32_t word, float scale, float) {
                       for (int64_t i = 0; i < kQ8_0RowsPerWord; ++i)
                         matrix[q8_0Row(r, i) * cols + j] = static_cast<int8_t>(word >> (8 * i)) * scale;
                     });
}

void dequantizeQ4_0Lanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix) {
  checkLaneShape("dequantizeQ4_0Lanes", rows, cols, width, kQuantBlock, "the quantization block");
  readQuantizedLanes(lanes, scales, rows, cols, width, kQ4_0RowsPerWord, 1,
                     [&](int64_t r, int64_t j, uint32_t word, float scale, float) {
                       for (int64_t i = 0; i < 4; ++i) {
                         const int low = static_cast<int>((word >> (8 * i)) & 0xFu);
                         const int high = static_cast<int>((word >> (8 * i + 4)) & 0xFu);
                         const int64_t row = q4_0LowRow(r, i);
                         matrix[row * cols + j] = static_cast<float>(low - 8) * scale;
                         matrix[(row + 4) * cols + j] = static_cast<float>(high - 8) * scale;
                       }
                     });
}

void dequantizeQ4_1Lanes(const uint32_t *lanes, const uint16_t *scalesAndMins, int64_t rows, int64_t cols,
                         int64_t width, float *matrix) {
  checkLaneShape("dequantizeQ4_1Lanes", rows, cols, width, kQuantBlock, "the quantization block");
  readQuantizedLanes(lanes, scalesAndMins, rows, cols, width, kQ4_0RowsPerWord, 2,
                     [&](int64_t r, int64_t j, uint32_t word, float scale, float min) {
                       for (int64_t i = 0; i < 4; ++i) {
                         const int low = static_cast<int>((word >> (8 * i)) & 0xFu);
                         const int high = static_cast<int>((word >> (8 * i + 4)) & 0xFu);
                         const int64_t row = q4_0LowRow(r, i);
                         // Product and sum rounded apart (no contracted multiply-add), as
                         // llama.cpp's and gguf's dequantizers compute them.
                         const float lowProduct = static_cast<float>(low) * scale;
                         const float highProduct = static_cast<float>(high) * scale;
                         matrix[row * cols + j] = lowProduct + min;
                         matrix[(row + 4) * cols + j] = highProduct + min;
                       }
                     });
}

void dequantizeQ4_KLanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix) {
  checkLaneShape("dequantizeQ4_KLanes", rows, cols, width, kSuperBlock, "q4_K's super-block");
  constexpr int64_t wordsPerBlock = kQuantBlock / kQ4_0RowsPerWord, subBlocks = kSuperBlock / kQuantBlock;
  const int64_t superBlocks = rows / kSuperBlock, panelRows = rows / kQ4_0RowsPerWord;
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t r = 0; r < panelRows; ++r)
      for (int64_t c = 0; c < width; ++c) {
        const int64_t block = r / wordsPerBlock, j = panel * width + c;
        const uint16_t *panelScales = scales + panel * superBlocks * kQ4_KScaleRows * width + c;
        const uint16_t *header = panelScales + (superBlocks * subBlocks + 2 * (block / subBlocks)) * width;
        const uint16_t scaleAndMin = panelScales[block * width];
        // The f32 products, as gguf's and llama.cpp's dequantizers compute them.
        const float scale = fromFp16(header[0]) * static_cast<float>(scaleAndMin & 0xFFu);
        const float min = fromFp16(header[width]) * static_cast<float>(scaleAndMin >> 8);
        const uint32_t word = lanes[(panel * panelRows + r) * width + c];
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t row = q4_0LowRow(r, i);
          const float lowProduct = scale * static_cast<float>((word >> (8 * i)) & 0xFu);
          const float highProduct = scale * static_cast<float>((word >> (8 * i + 4)) & 0xFu);
          matrix[row * cols + j] = lowProduct - min;
          matrix[(row + 4) * cols + j] = highProduct - min;
        }
      }
}

void dequantizeQ6_KLanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix) {
  checkLaneShape("dequantizeQ6_KLanes", rows, cols, width, kSuperBlock, "q6_K's super-block");
  const int64_t runs = rows / kQ6_KRunValues, panelRows = runs * kQ6_KWordsPerRun;
  const int64_t pairs = rows / kQuantBlock, scaleRows = pairs + rows / kSuperBlock;
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t h = 0; h < runs; ++h)
      for (int64_t c = 0; c < width; ++c) {
        const int64_t j = panel * width + c;
        const uint16_t *panelScales = scales + panel * scaleRows * width + c;
        const uint16_t pair = panelScales[h / 2 * width];
        const auto runScale = static_cast<int8_t>(h % 2 ? pair >> 8 : pair & 0xFF);
        // The f32 product of d and the run's scale, as gguf's and llama.cpp's dequantizers compute it.
        const float scale =
            fromFp16(panelScales[(pairs + h * kQ6_KRunValues / kSuperBlock) * width]) * static_cast<float>(runScale);
        const uint32_t *words = lanes + (panel * panelRows + h * kQ6_KWordsPerRun) * width + c;
        const uint32_t low0 = words[0], low1 = words[width], high = words[2 * width];
        for (int64_t i = 0; i < 4; ++i) {
          const uint32_t lowBytes[2] = {low0 >> (8 * i), low1 >> (8 * i)}, highBits = high >> (8 * i);
          for (int64_t l = 0; l < 4; ++l) {
            const uint32_t q = ((lowBytes[l % 2] >> (4 * (l / 2))) & 0x0Fu) | ((highBits >> (2 * l)) & 0x03u) << 4;
            matrix[(h * kQ6_KRunValues + l + 4 * i) * cols + j] = scale * static_cast<float>(static_cast<int>(q) - 32);
          }
        }
      }
}

} // namespace gpt::kernels
