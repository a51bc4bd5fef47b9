// The one table of the formats matmul weights are stored in: each format's block, lane layout, head
// format and the kernels that make and read it, one row per format (as ggml's per-type traits).
// The runtime binds weights by it, the builder declares arguments by it, Python reads it
// (_gpt.weight_formats()).
//
// The lane layouts the low-precision formats are stored in: made once when a model's weights are
// bound, read by compiled code (transformer.packed_matmul), and read back to f32 for
// CompiledModel::storedWeight; each format's own rows of a word are its section of FormatKernels.h.
//
// The packed matmul multiplies with the CPU's dot-product instructions, which see a 32-bit lane
// as several narrow values along K: vdpbf16ps multiplies 2 bf16 pairs per lane, vpdpbusd 4 byte
// pairs. So each 32-bit word of a lane layout holds weights of ONE column, and a panel row of P
// words is one zmm-sized load that feeds P columns at once. With P the panel width, panel p holds
// columns j = p P + c (c < P) of a row-major [K, N] weight w, as
//
//   lanes [N/P, K * codeBits / 32, P]     (codeBits: the table row's, 32 / rowsPerWord, q6_k's 6 or q5_k's 5)
//
// Which rows share a word is chosen for the activations, which compiled code converts at run time
// into the same lanes: a word's rows are those one activation lane holds, taken from contiguous
// runs of the activation row (whole vectors, no gather). Byte i of a word is bits 8 i .. 8 i + 7
// (little-endian). A block format's fp16 scales (and mins, and sub-block scales) keep their column
// panels, [N/P, K / blockValues * scaleRows, P] (PanelPacking.h's packPanels of the table row's
// scale rows).
#ifndef GPT_CC_KERNELS_WEIGHTFORMATS_H
#define GPT_CC_KERNELS_WEIGHTFORMATS_H

#include "cc/kernels/GgufRepacking.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpt {

/// The format matmul weights are stored in (llama.cpp's names), made once, at load. The
/// low-precision ones are packed in lane layouts (the header comment above): 32-bit words holding
/// weights of one column along K, one word per lane of a dot-product instruction. Each format's
/// kernels are its section of kernels/FormatKernels.h, which its row below points at.
enum class WeightFormat {
  F32,
  BF16, ///< rounded to nearest even, 2 rows of K per word
  Q8_0, ///< int8 codes, 4 rows per word, one f16 scale per block of 32 along K
  Q4_0, ///< 4-bit codes, 8 rows per word, one f16 scale per block of 32 weights along K
  Q4_1, ///< q4_0's codes, unsigned, with an f16 scale and an f16 min per block (w = code * scale + min)
  Q4_K, ///< q4_0's lanes, llama.cpp's q4_K numbers: per 256 weights an f16 d and dmin, per 32 a 6-bit scale and min
  Q6_K, ///< 6-bit codes, 16 in 3 words, llama.cpp's q6_K numbers: per 256 weights an f16 d, per 16 an int8 scale
  Q5_K, ///< q4_K's lanes and numbers with a fifth bit per code: 32 codes in 5 words
  Q5_0, ///< q5_K's lanes, one f16 scale per block of 32 (w = (code - 16) * scale)
  Q5_1, ///< q5_K's lanes, q4_1's f16 scale and min per block of 32 (w = code * scale + min)
};

/// One format's facts and kernels. The block formats (codes and per-block fp16 scales, two
/// arguments per weight) have quantize, pack and repack; bf16 has packFloats; f32 none of them.
struct WeightFormatTraits {
  WeightFormat format;
  const char *name;    ///< llama.cpp's, lower case ("f32", "q8_0", "q4_k")
  int64_t blockValues; ///< weights per block (1 for the float formats)
  int64_t blockBytes;  ///< bytes of one block as llama.cpp lays it out (a GGUF file's)
  int64_t rowsPerWord; ///< rows of K one 32-bit argument word holds (f32: 1, a float; 0 where a code spans words)
  bool hasMins;        ///< a min beside each scale (q4_1, q4_k, q5_k, q5_1)
  int64_t
      scaleRows; ///< 16-bit scale values per block and column: 0 (floats), 1, 2 (q4_1, q5_1), 10 (q4_k, q5_k), 9 (q6_k)
  WeightFormat head; ///< the format a model in this one stores its [V, D] tables and LM head in
  int precision;     ///< higher is more precise: the order "auto" picks the nearest kept format by
  /// Quantizes a row-major [K, N] matrix along K into a code per weight (q8_0's are int8) and fp16
  /// scales [K / blockValues * scaleRowsPerBlock(), N].
  void (*quantize)(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales, int64_t threads);
  /// Packs those codes into lanes [N/width, K/rowsPerWord, width] (the lane layouts above).
  void (*pack)(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *lanes, int64_t threads);
  /// Rounds and packs f32 values straight into lanes (bf16).
  void (*packFloats)(const float *matrix, int64_t rows, int64_t cols, int64_t width, uint32_t *lanes, int64_t threads);
  /// Repacks a GGUF tensor's rows of blocks, of this format or any type kernels::convertedTypes
  /// names for it, into lanes and scale panels (kernels/GgufRepacking.h).
  void (*repack)(const std::vector<kernels::BlockRows> &parts, int64_t k, int64_t paddedN, int64_t width,
                 uint32_t *codes, uint16_t *scales, int64_t threads);
  /// Widens lanes (and the block formats' scale panels) back to the [K, N] f32 matrix.
  void (*dequantize)(const uint32_t *lanes, const uint16_t *scales, int64_t rows, int64_t cols, int64_t width,
                     float *matrix);

  bool blockQuantized() const { return quantize != nullptr; }
  /// Bits of a weight's code where its bits are spread over several words (rowsPerWord 0): q6_k's 6
  /// (16 codes in 3 words), q5_k's, q5_0's and q5_1's 5 (32 in 5).
  int64_t spreadCodeBits = 0;

  /// Bits of one weight's code in the lanes: 32 / rowsPerWord, or spreadCodeBits.
  int64_t codeBits() const { return rowsPerWord > 0 ? 32 / rowsPerWord : spreadCodeBits; }
  /// 32-bit lane words of `values` weights (K * N of a whole matrix; K a multiple of the block).
  int64_t laneWords(int64_t values) const { return values * codeBits() / 32; }
  /// 16-bit rows per block in the scales: a scale, a min when the format has them (q4_k: d, dmin
  /// and the eight sub-blocks' scale and min bytes, kernels::kQ4_KScaleRows).
  int64_t scaleRowsPerBlock() const { return scaleRows; }
};

/// Every format, in WeightFormat order.
const std::vector<WeightFormatTraits> &weightFormats();
/// The row of `format`.
const WeightFormatTraits &weightFormatTraits(WeightFormat format);
/// The row named `name`, or null.
const WeightFormatTraits *findWeightFormat(std::string_view name);
/// The row named `name`; std::invalid_argument naming the known formats otherwise.
const WeightFormatTraits &parseWeightFormat(const std::string &name);
/// The name of `format`'s row.
inline const char *weightFormatName(WeightFormat format) { return weightFormatTraits(format).name; }
/// True for the formats that store codes and per-block scales (two arguments per weight).
inline bool isBlockQuantized(WeightFormat format) { return weightFormatTraits(format).blockQuantized(); }
/// `names` as a message lists alternatives: "a, b or c".
std::string alternatives(const std::vector<std::string> &names);
/// The block-quantized formats' names, in the table's order, as alternatives ("q8_0, ... or q6_k").
std::string blockFormatNames();

} // namespace gpt

#endif // GPT_CC_KERNELS_WEIGHTFORMATS_H
