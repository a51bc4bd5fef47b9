// The format tables' rows, each format's block and kernels (FormatKernels.h), side by side as
// ggml's type traits: the weight formats (WeightFormats.h), then the GGUF block types and the
// conversions between them (BlockTranscoding.h). The only place, with FormatKernels.h and each
// format's own file, that names every format: the code that reads the tables is format-generic.
#include "cc/kernels/WeightFormats.h"

#include "cc/kernels/BlockTranscoding.h"
#include "cc/kernels/FormatKernels.h"
#include "cc/kernels/Quantization.h"

#include <stdexcept>

namespace gpt {

namespace {
using namespace kernels;

// q8_0's codes are int8: the row's entry points take them as the bytes they are.
void quantizeQ8_0Codes(const float *matrix, int64_t rows, int64_t cols, uint8_t *codes, uint16_t *scales,
                       int64_t threads) {
  quantizeQ8_0(matrix, rows, cols, reinterpret_cast<int8_t *>(codes), scales, threads);
}
void packQ8_0Codes(const uint8_t *codes, int64_t rows, int64_t cols, int64_t width, uint32_t *lanes, int64_t threads) {
  packQ8_0Lanes(reinterpret_cast<const int8_t *>(codes), rows, cols, width, lanes, threads);
}
// bf16 lanes have no scales.
void dequantizeBf16(const uint32_t *lanes, const uint16_t *, int64_t rows, int64_t cols, int64_t width, float *matrix) {
  dequantizeBf16Lanes(lanes, rows, cols, width, matrix);
}
} // namespace

const std::vector<WeightFormatTraits> &weightFormats() {
  // A 4-bit model keeps its [V, D] tables in q8_0, as llama.cpp keeps its output table at higher
  // precision: 4-bit embeddings cost far more accuracy than 4-bit layers (docs/PERFORMANCE.md).
  // q4_k ranks between q4_0 and q4_1: its sub-block scales are 6-bit multiples of one d, where
  // q4_1's are any fp16, so "auto" keeps a Q4_K tensor as itself (the least precise kept format
  // its blocks convert to).
  // The 5- and 6-bit formats rank between q4_1 and q8_0, q5_0 below q5_k below q5_1 (as q4_0, q4_k,
  // q4_1): a Q5_0, Q5_K, Q5_1 or Q6_K tensor is kept as itself, in its 5.5 to 6.5625 bits, not
  // widened to q8_0's 8.5.
  static const std::vector<WeightFormatTraits> table = {
      {WeightFormat::F32, "f32", 1, 4, 1, false, 0, WeightFormat::F32, 9, nullptr, nullptr, nullptr, nullptr, nullptr},
      {WeightFormat::BF16, "bf16", 1, 2, kBf16RowsPerWord, false, 0, WeightFormat::BF16, 8, nullptr, nullptr,
       packBf16Lanes, nullptr, dequantizeBf16},
      {WeightFormat::Q8_0, "q8_0", kQuantBlock, kQ8_0BlockBytes, kQ8_0RowsPerWord, false, 1, WeightFormat::Q8_0, 7,
       quantizeQ8_0Codes, packQ8_0Codes, nullptr, repackQ8_0Rows, dequantizeQ8_0Lanes},
      {WeightFormat::Q4_0, "q4_0", kQuantBlock, kQ4_0BlockBytes, kQ4_0RowsPerWord, false, 1, WeightFormat::Q8_0, 0,
       quantizeQ4_0, packQ4_0Lanes, nullptr, repackQ4_0Rows, dequantizeQ4_0Lanes},
      {WeightFormat::Q4_1, "q4_1", kQuantBlock, kQ4_1BlockBytes, kQ4_0RowsPerWord, true, 2, WeightFormat::Q8_0, 2,
       quantizeQ4_1, packQ4_0Lanes, nullptr, repackQ4_1Rows, dequantizeQ4_1Lanes},
      {WeightFormat::Q4_K, "q4_k", kSuperBlock, kQ4_KBlockBytes, kQ4_0RowsPerWord, true, kQ4_KScaleRows,
       WeightFormat::Q8_0, 1, quantizeQ4_K, packQ4_0Lanes, nullptr, repackQ4_KRows, dequantizeQ4_KLanes},
      {WeightFormat::Q6_K, "q6_k", kSuperBlock, kQ6_KBlockBytes, 0, false, kQ6_KScaleRows, WeightFormat::Q8_0, 6,
       quantizeQ6_K, packQ6_KLanes, nullptr, repackQ6_KRows, dequantizeQ6_KLanes, 6},
      {WeightFormat::Q5_K, "q5_k", kSuperBlock, kQ5_KBlockBytes, 0, true, kQ4_KScaleRows, WeightFormat::Q8_0, 4,
       quantizeQ5_K, packQ5_KLanes, nullptr, repackQ5_KRows, dequantizeQ5_KLanes, 5},
      {WeightFormat::Q5_0, "q5_0", kQuantBlock, kQ5_0BlockBytes, 0, false, 1, WeightFormat::Q8_0, 3, quantizeQ5_0,
       packQ5_0Lanes, nullptr, repackQ5_0Rows, dequantizeQ5_0Lanes, 5},
      {WeightFormat::Q5_1, "q5_1", kQuantBlock, kQ5_1BlockBytes, 0, true, 2, WeightFormat::Q8_0, 5, quantizeQ5_1,
       packQ5_0Lanes, nullptr, repackQ5_1Rows, dequantizeQ5_1Lanes, 5},
  };
  return table;
}

const WeightFormatTraits &weightFormatTraits(WeightFormat format) {
  return weightFormats().at(static_cast<size_t>(format));
}

const WeightFormatTraits *findWeightFormat(std::string_view name) {
  for (const WeightFormatTraits &row : weightFormats())
    if (name == row.name) return &row;
  return nullptr;
}

std::string alternatives(const std::vector<std::string> &names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return text;
}

std::string blockFormatNames() {
  std::vector<std::string> names;
  for (const WeightFormatTraits &row : weightFormats())
    if (row.blockQuantized()) names.push_back(row.name);
  return alternatives(names);
}

const WeightFormatTraits &parseWeightFormat(const std::string &name) {
  if (const WeightFormatTraits *row = findWeightFormat(name)) return *row;
  std::string known;
  for (const WeightFormatTraits &row : weightFormats()) known += std::string(known.empty() ? "" : ", ") + row.name;
  throw std::invalid_argument("unknown weight format '" + name + "' (known: " + known + ")");
}

namespace kernels {
namespace {

// A block type's row dequantizer takes `threads`; the 32-weight types' kernels run on the calling
// thread alone.
void dequantizeQ4_0(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t) {
  dequantizeQ4_0Rows(blocks, k, n, out);
}
void dequantizeQ4_1(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t) {
  dequantizeQ4_1Rows(blocks, k, n, out);
}
void dequantizeQ8_0(const uint8_t *blocks, int64_t k, int64_t n, float *out, int64_t) {
  dequantizeQ8_0Rows(blocks, k, n, out);
}

// The rows of ggufBlockTypes(), named for the conversion table below. The K-quants' fp16 fields are
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

} // namespace

const std::vector<GgufBlockType> &ggufBlockTypes() {
  static const std::vector<GgufBlockType> types = {kQ8_0Type, kQ4_0Type, kQ4_1Type, kQ4_KType,
                                                   kQ6_KType, kQ5_0Type, kQ5_1Type, kQ5_KType};
  return types;
}

const std::vector<ConversionsInto> &conversionsIntoFormats() {
  // q8_0 takes every type: codes it can hold as they are, the others widened and requantized. q4_1
  // takes the types whose blocks are q4_1 blocks already (q4_0's with a min of -8 d, each of q4_K's
  // sub-blocks), q5_1 q5_0's (a min of -16 d). q4_0, q4_K, q5_0, q5_K and q6_K are kept as
  // themselves only (their repackings).
  static const std::vector<ConversionsInto> table = {
      {"q8_0",
       {{kQ8_0Type, nullptr},
        {kQ4_0Type, q4_0AsQ8_0},
        {kQ5_0Type, q5_0AsQ8_0},
        {kQ4_1Type, widenAsQ8_0<kQuantBlock, widenQ4_1Block>},
        {kQ5_1Type, widenAsQ8_0<kQuantBlock, widenQ5_1Block>},
        {kQ4_KType, widenAsQ8_0<kSuperBlock, widenQ4_KBlock>},
        {kQ5_KType, widenAsQ8_0<kSuperBlock, widenQ5_KBlock>},
        {kQ6_KType, widenAsQ8_0<kSuperBlock, widenQ6_KBlock>}}},
      {"q4_0", {{kQ4_0Type, nullptr}}},
      {"q4_1", {{kQ4_1Type, nullptr}, {kQ4_0Type, q4_0AsQ4_1}, {kQ4_KType, q4_KAsQ4_1}}},
      {"q4_k", {{kQ4_KType, nullptr}}},
      {"q6_k", {{kQ6_KType, nullptr}}},
      {"q5_k", {{kQ5_KType, nullptr}}},
      {"q5_0", {{kQ5_0Type, nullptr}}},
      {"q5_1", {{kQ5_1Type, nullptr}, {kQ5_0Type, q5_0AsQ5_1}}},
  };
  return table;
}

const char *conversionsTaken() {
  // Written out, not made from the table: the error's words are what users and tests read. Kept
  // beside the table so that the two change together.
  return "q8_0 takes q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k and q6_k; q4_1 takes q4_0, q4_1 and q4_k; q5_1 "
         "takes q5_0 and q5_1; q4_0, q4_k, q5_0, q5_k and q6_k only themselves";
}

} // namespace kernels

} // namespace gpt
