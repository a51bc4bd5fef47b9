// The weight-format table's rows (WeightFormats.h): each format's block and kernels.
#include "cc/kernels/WeightFormats.h"

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
  // q6_k ranks between q4_1 and q8_0: a Q6_K tensor is kept as itself, in its 6.5625 bits, not
  // widened to q8_0's 8.5.
  static const std::vector<WeightFormatTraits> table = {
      {WeightFormat::F32, "f32", 1, 4, 1, false, 0, WeightFormat::F32, 6, nullptr, nullptr, nullptr, nullptr, nullptr},
      {WeightFormat::BF16, "bf16", 1, 2, kBf16RowsPerWord, false, 0, WeightFormat::BF16, 5, nullptr, nullptr,
       packBf16Lanes, nullptr, dequantizeBf16},
      {WeightFormat::Q8_0, "q8_0", kQuantBlock, kQ8_0BlockBytes, kQ8_0RowsPerWord, false, 1, WeightFormat::Q8_0, 4,
       quantizeQ8_0Codes, packQ8_0Codes, nullptr, repackQ8_0Rows, dequantizeQ8_0Lanes},
      {WeightFormat::Q4_0, "q4_0", kQuantBlock, kQ4_0BlockBytes, kQ4_0RowsPerWord, false, 1, WeightFormat::Q8_0, 0,
       quantizeQ4_0, packQ4_0Lanes, nullptr, repackQ4_0Rows, dequantizeQ4_0Lanes},
      {WeightFormat::Q4_1, "q4_1", kQuantBlock, kQ4_1BlockBytes, kQ4_0RowsPerWord, true, 2, WeightFormat::Q8_0, 2,
       quantizeQ4_1, packQ4_0Lanes, nullptr, repackQ4_1Rows, dequantizeQ4_1Lanes},
      {WeightFormat::Q4_K, "q4_k", kSuperBlock, kQ4_KBlockBytes, kQ4_0RowsPerWord, true, kQ4_KScaleRows,
       WeightFormat::Q8_0, 1, quantizeQ4_K, packQ4_0Lanes, nullptr, repackQ4_KRows, dequantizeQ4_KLanes},
      {WeightFormat::Q6_K, "q6_k", kSuperBlock, kQ6_KBlockBytes, 0, false, kQ6_KScaleRows, WeightFormat::Q8_0, 3,
       quantizeQ6_K, packQ6_KLanes, nullptr, repackQ6_KRows, dequantizeQ6_KLanes},
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

} // namespace gpt
