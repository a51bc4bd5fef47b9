// The parameter table of a GPT (see Parameters.h).
#include "cc/builder/Parameters.h"

#include "cc/TargetParameters.h"
#include "cc/builder/GPTConfig.h"

namespace gpt {

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

std::vector<int64_t> ParameterSpec::argumentShape() const {
  if (panelWidth == 0) return shape;
  return {shape[1] / panelWidth, shape[0], panelWidth};
}

std::vector<ParameterSpec> parameterSpecs(const GPTConfig &c, const WeightStorage &storage) {
  const int64_t d = c.nEmbd;
  // A matmul's [K, N] weight is packed into panels when asked and N divides into them; packed
  // weights take the storage's format.
  auto pack = [&](ParameterSpec &spec, WeightLayout packedLayout) {
    int64_t n = spec.shape[1];
    if (!storage.packed || n % target::kPanelWidth != 0) return;
    spec.layout = packedLayout;
    spec.panelWidth = target::kPanelWidth;
    spec.format = storage.format;
  };
  std::vector<ParameterSpec> specs = {{"transformer.wte.weight", {c.vocabSize, d}}};
  if (!c.rope) specs.push_back({"transformer.wpe.weight", {c.blockSize, d}});
  for (int64_t i = 0; i < c.nLayer; ++i) {
    for (const LayerParameter &p : layerParameters()) {
      ParameterSpec spec{"transformer.h." + std::to_string(i) + "." + p.name, {}};
      for (int64_t multiple : p.embdMultiples) spec.shape.push_back(multiple * d);
      if (p.isMatmulWeight) pack(spec, WeightLayout::Panels);
      specs.push_back(std::move(spec));
    }
  }
  specs.push_back({"transformer.ln_f.weight", {d}});
  specs.push_back({"transformer.ln_f.bias", {d}});
  ParameterSpec head{
      "lm_head.weight_t", {d, c.paddedVocabSize()}, WeightLayout::TransposedPadded, "transformer.wte.weight"};
  pack(head, WeightLayout::TransposedPaddedPanels);
  specs.push_back(std::move(head));
  return specs;
}

std::vector<ParameterSpec> suppliedParameters(const GPTConfig &config) {
  std::vector<ParameterSpec> supplied;
  for (ParameterSpec &spec : parameterSpecs(config, WeightStorage{}))
    if (!spec.derived()) supplied.push_back(std::move(spec));
  return supplied;
}

} // namespace gpt
