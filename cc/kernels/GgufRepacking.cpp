// llama.cpp's q8_0 / q4_0 / q4_1 blocks repacked into lane layouts (see GgufRepacking.h).
#include "cc/kernels/GgufRepacking.h"

#include "cc/kernels/LanePacking.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gpt::kernels {
namespace {

/// Words of codes one block of 32 weights fills in each lane layout.
constexpr int64_t kQ8_0WordsPerBlock = kQuantBlock / kQ8_0RowsPerWord;
constexpr int64_t kQ4_0WordsPerBlock = kQuantBlock / kQ4_0RowsPerWord;

/// One q8_0 block's 32 codes as its 8 lane words: byte i of word q is code q + 8 i.
void q8_0BlockWords(const uint8_t *codes, uint32_t *words) {
  for (int64_t q = 0; q < kQ8_0WordsPerBlock; ++q) {
    uint32_t word = 0;
    for (int64_t i = 0; i < kQ8_0RowsPerWord; ++i)
      word |= static_cast<uint32_t>(codes[q + kQ8_0WordsPerBlock * i]) << (8 * i);
    words[q] = word;
  }
}

/// One q4_0 block's 16 bytes as its 4 lane words. llama.cpp's byte m holds code m (low nibble)
/// and code m + 16 (high); byte i of word o must hold codes o + 8 i (low) and o + 4 + 8 i (high).
void q4_0BlockWords(const uint8_t *bytes, uint32_t *words) {
  auto code = [&](int64_t m) -> uint32_t { return m < 16 ? bytes[m] & 0xFu : bytes[m - 16] >> 4; };
  for (int64_t o = 0; o < kQ4_0WordsPerBlock; ++o) {
    uint32_t word = 0;
    for (int64_t i = 0; i < 4; ++i) word |= (code(o + 8 * i) | code(o + 4 + 8 * i) << 4) << (8 * i);
    words[o] = word;
  }
}

/// Repacks `n` rows of `k` weights in llama.cpp blocks of `blockBytes` bytes (`halves` fp16
/// header values: the scale, and for q4_1 the min; then codes) into lane words [paddedN / w,
/// K / 32 * wordsPerBlock, w] made by `blockWords`, and the header values [paddedN / w, K / 32,
/// halves, w]. Columns n .. paddedN - 1 get zero scales and mins and `padWord` words.
template <typename BlockWords>
void repackRows(const char *what, const uint8_t *blocks, int64_t k, int64_t n, int64_t paddedN, int64_t width,
                int64_t blockBytes, int64_t halves, int64_t wordsPerBlock, uint32_t padWord, BlockWords blockWords,
                uint32_t *codes, uint16_t *scales) {
  if (k <= 0 || k % kQuantBlock != 0)
    throw std::invalid_argument(std::string(what) + ": K = " + std::to_string(k) +
                                " is not a positive multiple of the quantization block (32)");
  if (n < 0 || paddedN < n || width <= 0 || paddedN % width != 0)
    throw std::invalid_argument(std::string(what) + ": the padded column count " + std::to_string(paddedN) +
                                " must be at least " + std::to_string(n) + " and a multiple of the panel width " +
                                std::to_string(width));
  const int64_t perRow = k / kQuantBlock, panelRows = perRow * wordsPerBlock;
  uint32_t words[kQ8_0WordsPerBlock];
  static_assert(kQ8_0WordsPerBlock >= kQ4_0WordsPerBlock);
  for (int64_t j = 0; j < paddedN; ++j) {
    const int64_t panel = j / width, c = j % width;
    for (int64_t b = 0; b < perRow; ++b) {
      const uint8_t *block = j < n ? blocks + (j * perRow + b) * blockBytes : nullptr;
      for (int64_t h = 0; h < halves; ++h) {
        uint16_t value = 0;
        if (block) std::memcpy(&value, block + 2 * h, sizeof value);
        scales[((panel * perRow + b) * halves + h) * width + c] = value;
      }
      if (block)
        blockWords(block + 2 * halves, words);
      else
        std::fill(words, words + wordsPerBlock, padWord);
      for (int64_t w = 0; w < wordsPerBlock; ++w)
        codes[(panel * panelRows + b * wordsPerBlock + w) * width + c] = words[w];
    }
  }
}

} // namespace

void repackQ8_0Rows(const uint8_t *blocks, int64_t k, int64_t n, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales) {
  repackRows("repackQ8_0Rows", blocks, k, n, paddedN, width, kQ8_0BlockBytes, 1, kQ8_0WordsPerBlock, 0u, q8_0BlockWords,
             codes, scales);
}

void repackQ4_0Rows(const uint8_t *blocks, int64_t k, int64_t n, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales) {
  repackRows("repackQ4_0Rows", blocks, k, n, paddedN, width, kQ4_0BlockBytes, 1, kQ4_0WordsPerBlock, kQ4_0ZeroWord,
             q4_0BlockWords, codes, scales);
}

void repackQ4_1Rows(const uint8_t *blocks, int64_t k, int64_t n, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales) {
  // The codes are q4_0's nibbles, paired the same way; a zero scale and min make padding 0.
  repackRows("repackQ4_1Rows", blocks, k, n, paddedN, width, kQ4_1BlockBytes, 2, kQ4_0WordsPerBlock, 0u, q4_0BlockWords,
             codes, scales);
}

namespace {

/// Calls `widen(block, header, out)` for each of the n * k / 32 blocks of `blocks`, with the
/// block's fp16 header values (scale, and q4_1's min) as floats and its 32 outputs.
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

} // namespace

void dequantizeQ8_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out) {
  dequantizeRows("dequantizeQ8_0Rows", blocks, k, n, kQ8_0BlockBytes, 1, out,
                 [](const uint8_t *codes, const float *header, float *values) {
                   for (int64_t i = 0; i < kQuantBlock; ++i)
                     values[i] = static_cast<float>(static_cast<int8_t>(codes[i])) * header[0];
                 });
}

void dequantizeQ4_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out) {
  // Byte m holds code m in its low nibble and code m + 16 in its high one.
  dequantizeRows("dequantizeQ4_0Rows", blocks, k, n, kQ4_0BlockBytes, 1, out,
                 [](const uint8_t *bytes, const float *header, float *values) {
                   for (int64_t m = 0; m < kQuantBlock / 2; ++m) {
                     values[m] = static_cast<float>(static_cast<int>(bytes[m] & 0xFu) - 8) * header[0];
                     values[m + 16] = static_cast<float>(static_cast<int>(bytes[m] >> 4) - 8) * header[0];
                   }
                 });
}

void dequantizeQ4_1Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out) {
  dequantizeRows("dequantizeQ4_1Rows", blocks, k, n, kQ4_1BlockBytes, 2, out,
                 [](const uint8_t *bytes, const float *header, float *values) {
                   for (int64_t m = 0; m < kQuantBlock / 2; ++m) {
                     // Product and sum rounded apart (no contracted multiply-add), as llama.cpp's
                     // and gguf's dequantizers compute them.
                     const float low = static_cast<float>(bytes[m] & 0xFu) * header[0];
                     const float high = static_cast<float>(bytes[m] >> 4) * header[0];
                     values[m] = low + header[1];
                     values[m + 16] = high + header[1];
                   }
                 });
}

} // namespace gpt::kernels
