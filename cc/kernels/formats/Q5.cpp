// The kernels of q5_0 and q5_1 (FormatKernels.h's section of the two): their quantizers, as
// llama.cpp's references, the repacking of a GGUF file's blocks into q5_K's lane words (q4_0's
// nibble words and a word of fifth bits, which is a q5_0/q5_1 block's own qh), the conversion of
// q5_0 blocks into q5_1, the reading of those lanes, and the widening of a file's blocks to f32,
// bit for bit as gguf's and llama.cpp's dequantizers compute it.
#include "cc/kernels/FormatKernelUtils.h"
#include "cc/kernels/KQuantScales.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace gpt::kernels {
namespace {

/// Weight i of a q5_0/q5_1 block: low nibble of byte i (i < 16) or high nibble of byte i - 16,
/// with bit i of qh as its fifth bit.
uint32_t fiveBitCode(const uint8_t *nibbles, uint32_t highBits, int64_t i) {
  const uint32_t low = i < 16 ? nibbles[i] & 0x0Fu : nibbles[i - 16] >> 4;
  return low | ((highBits >> i) & 1u) << 4;
}

/// A q5_0/q5_1 block's qh and nibbles (its bytes after the fp16 header) as q5_K's 5 lane words:
/// the nibbles are q4_0's bytes, and bit j of qh is code j's fifth bit, as the last word holds it.
void fiveBitBlockWords(const uint8_t *bytes, uint32_t *words) {
  q4_0BlockWords(bytes + 4, words);
  std::memcpy(&words[kQ4_0WordsPerBlock], bytes, sizeof(uint32_t));
}

/// The 32 codes (K order) of one column's block of q5_K lane words at `words` (`width` apart): byte
/// i of word o holds codes o + 8 i (low nibble) and o + 4 + 8 i (high), word 4 the fifth bits.
void fiveBitLaneCodes(const uint32_t *words, int64_t width, uint32_t *codes) {
  const uint32_t fifths = words[kQ4_0WordsPerBlock * width];
  for (int64_t o = 0; o < kQ4_0WordsPerBlock; ++o)
    for (int64_t i = 0; i < 4; ++i) {
      const uint32_t byte = (words[o * width] >> (8 * i)) & 0xFFu;
      const int64_t low = o + 8 * i, high = low + 4;
      codes[low] = (byte & 0x0Fu) | ((fifths >> low) & 1u) << 4;
      codes[high] = (byte >> 4) | ((fifths >> high) & 1u) << 4;
    }
}

/// The [rows, cols] f32 matrix of q5_0 or q5_1 lanes and their `halves` fp16 values per block and
/// column (a scale, and a min): each weight `weight(code, scale, min)`.
template <typename Weight>
void readFiveBitLanes(const char *what, const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols,
                      int64_t width, int64_t halves, float *matrix, Weight weight) {
  checkLaneShape(what, rows, cols, width, kQuantBlock, "the quantization block");
  const int64_t blocks = rows / kQuantBlock, panelRows = blocks * kQ5_KWordsPerBlock;
  uint32_t codes[kQuantBlock];
  for (int64_t panel = 0; panel < cols / width; ++panel)
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t c = 0; c < width; ++c) {
        const uint16_t *header = scales + (panel * blocks + b) * halves * width + c;
        const float scale = fromFp16(header[0]), min = halves > 1 ? fromFp16(header[width]) : 0.0f;
        fiveBitLaneCodes(lanes + (panel * panelRows + b * kQ5_KWordsPerBlock) * width + c, width, codes);
        for (int64_t r = 0; r < kQuantBlock; ++r)
          matrix[(b * kQuantBlock + r) * cols + panel * width + c] = weight(codes[r], scale, min);
      }
}

// q5_0's and q5_1's lanes are q5_K's words of their own codes; zero scales (and mins) make padding 0.
constexpr LaneFormat kQ5_0Lanes{"repackQ5_0Rows",   "q5_0", kQ5_0BlockBytes,  1,
                                kQ5_KWordsPerBlock, 0u,     fiveBitBlockWords};
constexpr LaneFormat kQ5_1Lanes{"repackQ5_1Rows",   "q5_1", kQ5_1BlockBytes,  2,
                                kQ5_KWordsPerBlock, 0u,     fiveBitBlockWords};

} // namespace

void quantizeQ5_0(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales, int64_t threads) {
  forEachBlockColumn(rows, cols, kQuantBlock, "the quantization block", threads, [&](int64_t block, int64_t n) {
    const int64_t first = block * kQuantBlock;
    float amax = 0.0f, extreme = 0.0f;
    for (int64_t k = first; k < first + kQuantBlock; ++k) {
      const float w = matrix[k * cols + n];
      if (amax < std::fabs(w)) { // strictly: the first of equal magnitudes wins
        amax = std::fabs(w);
        extreme = w;
      }
    }
    const float d = extreme / -16.0f, inverse = d == 0.0f ? 0.0f : 1.0f / d;
    scales[block * cols + n] = toFp16(d);
    for (int64_t k = first; k < first + kQuantBlock; ++k) {
      const float shifted = matrix[k * cols + n] * inverse + 16.5f;
      codes[k * cols + n] = static_cast<uint8_t>(std::min(31.0f, std::trunc(shifted)));
    }
  });
}

void quantizeQ5_1(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales, int64_t threads) {
  quantizeWithMins(matrix, rows, cols, 31, codes, scales, threads);
}

void packQ5_0Lanes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *packed, int64_t threads) {
  packFiveBitLanes("packQ5_0Lanes", kQuantBlock, "the quantization block", codes, rows, cols, width, packed, threads);
}

void dequantizeQ5_0Lanes(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                         float *matrix) {
  readFiveBitLanes(
      "dequantizeQ5_0Lanes", lanes, scales, rows, cols, width, 1, matrix,
      [](uint32_t code, float scale, float) { return static_cast<float>(static_cast<int>(code) - 16) * scale; });
}

void dequantizeQ5_1Lanes(const uint32_t *lanes, const uint16_t *scalesAndMins, int64_t rows, int64_t cols,
                         int64_t width, float *matrix) {
  readFiveBitLanes("dequantizeQ5_1Lanes", lanes, scalesAndMins, rows, cols, width, 2, matrix,
                   [](uint32_t code, float scale, float min) {
                     // Product and sum rounded apart, as gguf's and llama.cpp's dequantizers compute them.
                     const float product = static_cast<float>(code) * scale;
                     return product + min;
                   });
}

void repackQ5_0Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  repackLanes<kQ5_0Lanes>(parts, true, k, paddedN, width, codes, scales, threads);
}

void repackQ5_1Rows(const std::vector<BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width, uint32_t *codes,
                    uint16_t *scales, int64_t threads) {
  repackLanes<kQ5_1Lanes>(parts, true, k, paddedN, width, codes, scales, threads);
}

void q5_0AsQ5_1(const uint8_t *block, uint8_t *out) {
  uint16_t scale;
  std::memcpy(&scale, block, sizeof scale);
  // -16 d is exact in fp16 (a power of two times d) unless it overflows.
  const uint16_t header[2] = {scale, toFp16(fromFp16(scale) * -16.0f)};
  if ((header[1] & 0x7C00u) == 0x7C00u)
    throw std::invalid_argument("a q5_0 block's scale times -16 (its min in q5_1) is beyond fp16's range");
  std::memcpy(out, header, sizeof header);
  std::memcpy(out + 4, block + 2, kQ5_0BlockBytes - 2);
}

void widenQ5_0Block(const uint8_t *block, float *values) {
  const float d = halfAt(block);
  uint32_t highBits;
  std::memcpy(&highBits, block + 2, sizeof highBits);
  for (int64_t i = 0; i < kQuantBlock; ++i)
    values[i] = d * static_cast<float>(static_cast<int>(fiveBitCode(block + 6, highBits, i)) - 16);
}

void widenQ5_1Block(const uint8_t *block, float *values) {
  const float d = halfAt(block), m = halfAt(block + 2);
  uint32_t highBits;
  std::memcpy(&highBits, block + 4, sizeof highBits);
  for (int64_t i = 0; i < kQuantBlock; ++i) {
    // Product and sum rounded apart, as gguf's numpy computes them.
    const float product = d * static_cast<float>(fiveBitCode(block + 8, highBits, i));
    values[i] = product + m;
  }
}

void dequantizeQ5_0Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads) {
  dequantizeBlocks("dequantizeQ5_0Rows", blocks, k, n, kQuantBlock, kQ5_0BlockBytes, out, threads, widenQ5_0Block);
}

void dequantizeQ5_1Rows(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t threads) {
  dequantizeBlocks("dequantizeQ5_1Rows", blocks, k, n, kQuantBlock, kQ5_1BlockBytes, out, threads, widenQ5_1Block);
}

} // namespace gpt::kernels
