// The parameter table of a GPT (see Parameters.h).
#include "cc/builder/Parameters.h"

#include "cc/TargetParameters.h"
#include "cc/builder/GPTConfig.h"
#include "cc/kernels/Quantization.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace gpt {

std::vector<LayerParameter> layerParameters(const GPTConfig &c) {
  using W = LayerWeight;
  const ParameterNames &n = c.names;
  const bool vApart = !n.vProj.empty();
  const int64_t d = c.nEmbd, q = c.qSize(), ff = c.ffSize(), kv = c.kvSize(), qkv = q + (vApart ? 1 : 2) * kv;
  const int64_t up = c.mlp == MlpKind::Gelu ? ff : 2 * ff, head = c.headSize();
  std::vector<LayerParameter> table = {
      {W::AttnNormWeight, n.attnNorm + ".weight", {d}, false},
      {W::AttnNormBias, n.attnNorm + ".bias", {d}, false},
      {W::QkvWeight, n.qkv + ".weight", {d, qkv}, true},
      {W::QkvBias, n.qkv + ".bias", {qkv}, false},
      {W::VProjWeight, n.vProj + ".weight", {d, kv}, true},
      {W::VProjBias, n.vProj + ".bias", {kv}, false},
      {W::AttnOutWeight, n.attnOut + ".weight", {q, d}, true},
      {W::AttnOutBias, n.attnOut + ".bias", {d}, false},
      {W::MlpNormWeight, n.mlpNorm + ".weight", {d}, false},
      {W::MlpNormBias, n.mlpNorm + ".bias", {d}, false},
      {W::MlpUpWeight, n.mlpUp + ".weight", {d, up}, true},
      {W::MlpUpBias, n.mlpUp + ".bias", {up}, false},
      {W::MlpDownWeight, n.mlpDown + ".weight", {ff, d}, true},
      {W::MlpDownBias, n.mlpDown + ".bias", {d}, false},
      {W::QNormWeight, n.qNorm + ".weight", {head}, false},
      {W::KNormWeight, n.kNorm + ".weight", {head}, false},
      {W::PostAttnNormWeight, n.postAttnNorm + ".weight", {d}, false},
      {W::PostMlpNormWeight, n.postMlpNorm + ".weight", {d}, false},
  };
  // RMSNorm has no bias; the biases of linears follow the architecture.
  auto present = [&](W weight) {
    switch (weight) {
    case W::AttnNormBias:
    case W::MlpNormBias:
      return c.bias && c.norm == NormKind::Layer;
    case W::QkvBias:
      return c.qkvBias;
    case W::VProjWeight:
      return vApart;
    case W::VProjBias:
      return vApart && c.qkvBias;
    case W::AttnOutBias:
    case W::MlpUpBias:
    case W::MlpDownBias:
      return c.bias;
    case W::QNormWeight:
      return !n.qNorm.empty();
    case W::KNormWeight:
      return !n.kNorm.empty();
    case W::PostAttnNormWeight:
      return !n.postAttnNorm.empty();
    case W::PostMlpNormWeight:
      return !n.postMlpNorm.empty();
    default:
      return true;
    }
  };
  std::vector<LayerParameter> result;
  for (LayerParameter &p : table)
    if (present(p.weight)) result.push_back(std::move(p));
  return result;
}

std::string layerPrefix(const GPTConfig &config, int64_t layer) {
  std::string prefix = config.names.layerPrefix;
  return prefix.replace(prefix.find("{i}"), 3, std::to_string(layer));
}

ModelParameterNames modelParameterNames(const GPTConfig &config) {
  const ParameterNames &n = config.names;
  return {n.tokenEmbedding + ".weight", n.positionEmbedding + ".weight", n.finalNorm + ".weight", n.finalNorm + ".bias",
          n.head + ".weight"};
}

const char *kvCacheFormatName(KvCacheFormat format) {
  switch (format) {
  case KvCacheFormat::F32:
    return "f32";
  case KvCacheFormat::BF16:
    return "bf16";
  case KvCacheFormat::F16:
    return "f16";
  case KvCacheFormat::Q8_0:
    return "q8_0";
  }
  return "?";
}

std::vector<int64_t> ParameterSpec::argumentShape() const {
  if (panelWidth == 0) return shape;
  const WeightFormatTraits &traits = weightFormatTraits(format);
  const int64_t k = shape[0], panels = shape[1] / panelWidth;
  // Lanes: K * codeBits / 32 words per column (f32 one per row, bf16 2 rows a word, q8_0 4, the
  // 4-bit formats 8, q6_k 16 rows in 3 words, q5_k 32 in 5; kernels/WeightFormats.h).
  if (!isScales()) return {panels, traits.laneWords(k), panelWidth};
  // Scales: the format's 16-bit scale rows per block (with mins: each block's scale then its min; q4_k
  // and q5_k: its sub-blocks' then its super-blocks'; q6_k: the run scales' pairs then d; each format's
  // section of kernels/FormatKernels.h).
  return {panels, k / traits.blockValues * traits.scaleRowsPerBlock(), panelWidth};
}

namespace {

/// The format the LM head's copy is stored in: its format's head format (a 4-bit model's tables in
/// q8_0: kernels/WeightFormats.h), or for an untied head the format given for it (a GGUF file's
/// Q6_K output kept as q6_k; checkFormatOverrides).
WeightFormat headFormat(const WeightStorage &storage) {
  auto given = storage.formatOverrides.find(kHeadTable);
  return given != storage.formatOverrides.end() ? given->second : weightFormatTraits(storage.format).head;
}

/// Throws std::invalid_argument unless each matmul weight's K (n_embd, n_ff, or the output
/// projection's n_head * head_dim) tiles the block of the format it is stored in: checked per
/// weight, since a file's mix gives each its own (a Q4_K_M file of a 576-wide model keeps its
/// n_ff-deep down projections in q4_k and the rest in 32-value blocks), and for the LM head's copy
/// in the head format. In order, layers first: an error names a weight's own format before the
/// head's.
void checkFormatDepths(const GPTConfig &c, const WeightStorage &storage, const std::vector<LayerParameter> &layer) {
  if (!storage.packed) return;
  const int64_t d = c.nEmbd, ff = c.ffSize();
  std::vector<std::pair<WeightFormat, int64_t>> formatDepths;
  auto use = [&](WeightFormat format, int64_t k) {
    if (std::find(formatDepths.begin(), formatDepths.end(), std::pair{format, k}) == formatDepths.end())
      formatDepths.push_back({format, k});
  };
  for (int64_t i = 0; i < c.nLayer; ++i)
    for (const LayerParameter &p : layer)
      if (p.isMatmulWeight) use(storage.formatOf(layerPrefix(c, i) + p.name), p.shape[0]);
  if (isBlockQuantized(storage.format)) use(headFormat(storage), d);
  for (auto [format, k] : formatDepths) {
    const char *what = k == d ? "n_embd" : k == ff ? "n_ff" : "n_head * head_dim";
    const int64_t block = weightFormatTraits(format).blockValues; // 32, or a K-quant's super-block of 256
    if (isBlockQuantized(format) && k % block != 0)
      throw std::invalid_argument(
          std::string(weightFormatName(format)) + " weights need " + what + " (" + std::to_string(k) +
          ") to be a multiple of " + std::to_string(block) +
          (block == kernels::kQuantBlock ? ", the quantization block" : ", the format's super-block"));
    // bf16 lanes pair row r of K with row r + K/2.
    if (format == WeightFormat::BF16 && k % weightFormatTraits(format).rowsPerWord != 0)
      throw std::invalid_argument(std::string("bf16 weights need an even ") + what + " (" + std::to_string(k) +
                                  "): their lanes pair the two halves of K");
  }
}

/// Throws std::invalid_argument when a format override names no layer's matmul weight and no LM
/// head of a block-quantized model, or gives the head a format it cannot take (not block-quantized;
/// for a tied head, which is also the token table, one the lookup does not read:
/// transformer.packed_embedding reads q8_0 and q6_k): a typo would otherwise be a format silently
/// ignored.
void checkFormatOverrides(const GPTConfig &c, const WeightStorage &storage, const std::vector<LayerParameter> &layer) {
  std::set<std::string> matmulWeights;
  for (int64_t i = 0; i < c.nLayer; ++i)
    for (const LayerParameter &p : layer)
      if (p.isMatmulWeight) matmulWeights.insert(layerPrefix(c, i) + p.name);
  for (const auto &[name, format] : storage.formatOverrides) {
    const bool lookupReads = format == WeightFormat::Q8_0 || format == WeightFormat::Q6_K;
    if (name == kHeadTable && isBlockQuantized(format) && isBlockQuantized(storage.format) &&
        (!c.tiedHead || lookupReads))
      continue;
    if (!matmulWeights.count(name))
      throw std::invalid_argument("a weight format is given for '" + name +
                                  "', which is no layer's matmul weight nor a block-quantized model's LM head in a "
                                  "format it takes (a tied head, also the token table: q8_0 or q6_k)");
  }
}

} // namespace

std::vector<ParameterSpec> parameterSpecs(const GPTConfig &c, const WeightStorage &storage) {
  if (storage.tiles.panelWidth <= 0 || storage.tiles.vocabMultiple <= 0)
    throw std::invalid_argument("the weight storage has no tile parameters: target::tileParameters of the target");
  const int64_t d = c.nEmbd;
  const std::vector<LayerParameter> layer = layerParameters(c);
  checkFormatDepths(c, storage, layer);
  // A matmul's [K, N] weight is packed into panels when asked and N divides into them; packed
  // weights take the storage's format, or their own (formatOverrides).
  auto pack = [&](ParameterSpec &spec, WeightLayout packedLayout) {
    int64_t n = spec.shape[1];
    if (!storage.packed || n % storage.tiles.panelWidth != 0) return;
    spec.layout = packedLayout;
    spec.panelWidth = storage.tiles.panelWidth;
    spec.format = storage.formatOf(spec.name);
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
  const ModelParameterNames names = modelParameterNames(c);
  // A block-quantized model keeps its [V, D] tables (the token embedding, and an untied head) only
  // as q8_0 copies laid out like the LM head's [D, V'] weight: a tied embedding once, as the head,
  // whose copy the token lookup reads (transformer.packed_embedding); an untied model's embedding
  // as a copy of its own for the lookup. No f32 table is an argument (an untied Llama 3.1 8B's two
  // would hold 4.2 GB).
  const bool quantizedTables = storage.packed && isBlockQuantized(storage.format);
  // The [D, V'] copy of the [V, D] table `source`, packed and in q8_0 for a block-quantized model.
  auto transposedTable = [&](const std::string &name, const std::string &source) {
    ParameterSpec table{name, {d, c.paddedVocabSize(storage.tiles)}, WeightLayout::TransposedPadded, source};
    pack(table, WeightLayout::TransposedPaddedPanels);
    // In its format's head format (a 4-bit model's tables in q8_0: kernels/WeightFormats.h); the
    // head in the format given for it (headFormat).
    table.format = name == kHeadTable && table.panelWidth ? headFormat(storage) : weightFormatTraits(table.format).head;
    return table;
  };
  std::vector<ParameterSpec> specs;
  if (!quantizedTables) {
    specs.push_back({names.tokenEmbedding, {c.vocabSize, d}});
  } else if (!c.tiedHead) {
    specs.push_back(transposedTable(names.tokenEmbedding + "_t", names.tokenEmbedding));
    addScales(specs);
  }
  if (!c.rope) specs.push_back({names.positionEmbedding, {c.blockSize, d}});
  for (int64_t i = 0; i < c.nLayer; ++i) {
    for (const LayerParameter &p : layer) {
      ParameterSpec spec{layerPrefix(c, i) + p.name, p.shape};
      if (p.isMatmulWeight) pack(spec, WeightLayout::Panels);
      specs.push_back(std::move(spec));
      addScales(specs);
    }
  }
  specs.push_back({names.finalNormWeight, {d}});
  if (c.norm == NormKind::Layer && c.bias) specs.push_back({names.finalNormBias, {d}});
  // An untied head is a [V, D] weight the user supplies, laid out as the tied embedding would be
  // (kept as given, too, unless the model is block-quantized).
  if (!c.tiedHead && !quantizedTables) specs.push_back({names.head, {c.vocabSize, d}});
  specs.push_back(transposedTable(kHeadTable, c.tiedHead ? names.tokenEmbedding : names.head));
  addScales(specs);
  checkFormatOverrides(c, storage, layer);
  return specs;
}

std::vector<ParameterSpec> suppliedParameters(const GPTConfig &config) {
  std::vector<ParameterSpec> supplied;
  // Any target's tiles: they shape only the LM head's padded copy, which is derived, not supplied.
  WeightStorage unpacked;
  unpacked.tiles = target::kDefaultTileParameters;
  for (ParameterSpec &spec : parameterSpecs(config, unpacked))
    if (!spec.derived()) supplied.push_back(std::move(spec));
  return supplied;
}

} // namespace gpt
