// The parameter table of a GPT (see Parameters.h).
#include "cc/builder/Parameters.h"

#include "cc/TargetParameters.h"
#include "cc/builder/GPTConfig.h"
#include "cc/dialect/TransformerDialect.h"
#include "cc/kernels/LanePacking.h"
#include "cc/kernels/Quantization.h"

#include <stdexcept>

namespace gpt {

// The block the runtime quantizes in is the one the IR's formats are defined with.
static_assert(kernels::kQuantBlock == mlir::transformer::PackedMatmulOp::kBlockSize);

const std::vector<LayerParameter> &layerParameters() {
  using W = LayerWeight;
  static const std::vector<LayerParameter> table = {
      {W::Ln1Weight, "ln_1.weight", {1}, false},
      {W::Ln1Bias, "ln_1.bias", {1}, false},
      {W::QkvWeight, "attn.c_attn.weight", {1, 3}, true},
      {W::QkvBias, "attn.c_attn.bias", {3}, false},
      {W::AttnProjWeight, "attn.c_proj.weight", {1, 1}, true},
      {W::AttnProjBias, "attn.c_proj.bias", {1}, false},
      {W::Ln2Weight, "ln_2.weight", {1}, false},
      {W::Ln2Bias, "ln_2.bias", {1}, false},
      {W::FcWeight, "mlp.c_fc.weight", {1, 4}, true},
      {W::FcBias, "mlp.c_fc.bias", {4}, false},
      {W::MlpProjWeight, "mlp.c_proj.weight", {4, 1}, true},
      {W::MlpProjBias, "mlp.c_proj.bias", {1}, false},
  };
  return table;
}

const char *weightFormatName(WeightFormat format) {
  switch (format) {
  case WeightFormat::F32:
    return "f32";
  case WeightFormat::BF16:
    return "bf16";
  case WeightFormat::Q8_0:
    return "q8_0";
  case WeightFormat::Q4_0:
    return "q4_0";
  }
  return "?";
}

std::vector<int64_t> ParameterSpec::argumentShape() const {
  if (panelWidth == 0) return shape;
  // The rows of K one element of the argument holds: a scale per block; a 32-bit lane word of 2
  // bf16, 4 q8_0 or 8 q4_0 weights of one column (kernels/LanePacking.h).
  int64_t rowsPerElement = 1;
  if (isScales())
    rowsPerElement = kernels::kQuantBlock;
  else if (format == WeightFormat::BF16)
    rowsPerElement = kernels::kBf16RowsPerWord;
  else if (format == WeightFormat::Q8_0)
    rowsPerElement = kernels::kQ8_0RowsPerWord;
  else if (format == WeightFormat::Q4_0)
    rowsPerElement = kernels::kQ4_0RowsPerWord;
  return {shape[1] / panelWidth, shape[0] / rowsPerElement, panelWidth};
}

std::vector<ParameterSpec> parameterSpecs(const GPTConfig &c, const WeightStorage &storage) {
  const int64_t d = c.nEmbd;
  // Every matmul's K is n_embd or 4 n_embd.
  if (storage.packed && isBlockQuantized(storage.format) && d % kernels::kQuantBlock != 0)
    throw std::invalid_argument(std::string(weightFormatName(storage.format)) + " weights need n_embd (" +
                                std::to_string(d) + ") to be a multiple of " + std::to_string(kernels::kQuantBlock) +
                                ", the quantization block");
  // bf16 lanes pair row r of K with row r + K/2.
  if (storage.packed && storage.format == WeightFormat::BF16 && d % kernels::kBf16RowsPerWord != 0)
    throw std::invalid_argument("bf16 weights need an even n_embd (" + std::to_string(d) +
                                "): their lanes pair the two halves of K");
  // A matmul's [K, N] weight is packed into panels when asked and N divides into them; packed
  // weights take the storage's format.
  auto pack = [&](ParameterSpec &spec, WeightLayout packedLayout) {
    int64_t n = spec.shape[1];
    if (!storage.packed || n % target::kPanelWidth != 0) return;
    spec.layout = packedLayout;
    spec.panelWidth = target::kPanelWidth;
    spec.format = storage.format;
  };
  // A block-quantized weight's scales follow it, made from the same source.
  auto addScales = [](std::vector<ParameterSpec> &specs) {
    const ParameterSpec &weight = specs.back();
    if (!isBlockQuantized(weight.format)) return;
    ParameterSpec scales = weight;
    scales.name = weight.name + ".scales";
    scales.scalesOf = weight.name;
    if (scales.source.empty()) scales.source = weight.name;
    specs.push_back(std::move(scales));
  };
  // A block-quantized model stores the tied embedding once, as the LM head's weight, and its
  // lookup reads that (transformer.packed_embedding): the f32 table is no argument.
  const bool embeddingInHead = storage.packed && isBlockQuantized(storage.format);
  std::vector<ParameterSpec> specs;
  if (!embeddingInHead) specs.push_back({"transformer.wte.weight", {c.vocabSize, d}});
  if (!c.rope) specs.push_back({"transformer.wpe.weight", {c.blockSize, d}});
  for (int64_t i = 0; i < c.nLayer; ++i) {
    for (const LayerParameter &p : layerParameters()) {
      ParameterSpec spec{"transformer.h." + std::to_string(i) + "." + p.name, {}};
      for (int64_t multiple : p.embdMultiples) spec.shape.push_back(multiple * d);
      if (p.isMatmulWeight) pack(spec, WeightLayout::Panels);
      specs.push_back(std::move(spec));
      addScales(specs);
    }
  }
  specs.push_back({"transformer.ln_f.weight", {d}});
  specs.push_back({"transformer.ln_f.bias", {d}});
  ParameterSpec head{
      "lm_head.weight_t", {d, c.paddedVocabSize()}, WeightLayout::TransposedPadded, "transformer.wte.weight"};
  pack(head, WeightLayout::TransposedPaddedPanels);
  // With q4_0 the tied embedding (which the token lookup also reads) is stored in q8_0, as
  // llama.cpp keeps its output table at higher precision: 4-bit embeddings cost far more
  // accuracy than 4-bit layers (docs/PERFORMANCE.md).
  if (head.format == WeightFormat::Q4_0) head.format = WeightFormat::Q8_0;
  specs.push_back(std::move(head));
  addScales(specs);
  return specs;
}

std::vector<ParameterSpec> suppliedParameters(const GPTConfig &config) {
  std::vector<ParameterSpec> supplied;
  for (ParameterSpec &spec : parameterSpecs(config, WeightStorage{}))
    if (!spec.derived()) supplied.push_back(std::move(spec));
  return supplied;
}

} // namespace gpt
