// The one table of a GPT's parameters: names, shape rules and layouts. The builder declares the
// entry points' weight arguments from it, the runtime lays the user's arrays out by it, and the
// Python package validates and orders weights by it (through the bindings).
#ifndef GPT_CC_BUILDER_PARAMETERS_H
#define GPT_CC_BUILDER_PARAMETERS_H

#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

struct GPTConfig;

/// The weights of one transformer layer, in the order the layer takes them. HF GPT-2 names (with
/// the "transformer.h.<i>." prefix) and Conv1D layout: a matmul weight is [in, out].
enum class LayerWeight {
  Ln1Weight,
  Ln1Bias,
  QkvWeight,
  QkvBias,
  AttnProjWeight,
  AttnProjBias,
  Ln2Weight,
  Ln2Bias,
  FcWeight,
  FcBias,
  MlpProjWeight,
  MlpProjBias,
};

/// A shape as multiples of n_embd: {3} is [3 d], {1, 4} is [d, 4 d].
struct LayerParameter {
  LayerWeight weight;
  const char *name; ///< after "transformer.h.<i>."
  std::vector<int64_t> embdMultiples;
  bool isMatmulWeight;
};

/// Every layer weight, in LayerWeight order.
const std::vector<LayerParameter> &layerParameters();

/// How the runtime lays a parameter out for compiled code, once, when the weights are bound.
enum class WeightLayout {
  AsGiven,                ///< the user's array, read in place
  Panels,                 ///< a [K, N] matrix repacked into N / P column panels (argumentShape)
  TransposedPadded,       ///< the [V, D] table `source` transposed to [D, V'] with zero columns past V
  TransposedPaddedPanels, ///< TransposedPadded, then packed into panels
};

/// The format matmul weights are stored in (llama.cpp's names), made once, at load. The
/// low-precision ones are packed in lane layouts (kernels/LanePacking.h): 32-bit words holding
/// weights of one column along K, one word per lane of a dot-product instruction.
enum class WeightFormat {
  F32,
  BF16, ///< rounded to nearest even, 2 rows of K per word
  Q8_0, ///< int8 codes, 4 rows per word, one f16 scale per block of 32 along K (kernels/Quantization.h)
  Q4_0, ///< 4-bit codes, 8 rows per word, one f16 scale per block of 32 weights along K
};

/// True for the formats that store codes and per-block scales (two arguments per weight).
inline bool isBlockQuantized(WeightFormat format) {
  return format == WeightFormat::Q8_0 || format == WeightFormat::Q4_0;
}

/// "f32", "bf16", "q8_0" or "q4_0".
const char *weightFormatName(WeightFormat format);

/// How a compiled program takes its matmul weights: packed in column panels (the vectorized
/// levels' register tiles read panels) and in which format (packed weights only).
struct WeightStorage {
  bool packed = false;
  WeightFormat format = WeightFormat::F32;
};

/// One weight argument of a compiled entry point.
struct ParameterSpec {
  std::string name;           ///< HF GPT-2 name, e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape; ///< the logical shape the program computes with ([K, N] for a matmul)
  WeightLayout layout = WeightLayout::AsGiven;
  /// The user-supplied parameter this one is made from (only for TransposedPadded*): the
  /// parameter itself is then derived at load time and never supplied.
  std::string source;
  int64_t panelWidth = 0;                  ///< P, for the *Panels layouts
  WeightFormat format = WeightFormat::F32; ///< the format the program takes it in
  /// For the scales of a block-quantized weight: that weight's name. Such a spec follows its
  /// weight's in the list, with the same shape, layout and source, and is made with it.
  std::string scalesOf;

  bool derived() const { return !source.empty(); }
  bool isScales() const { return !scalesOf.empty(); }
  /// The shape the compiled program takes: `shape`, or for a packed weight [N/P, K, P] (f32),
  /// its i32 lane words [N/P, K/2, P] (bf16), [N/P, K/4, P] (q8_0) or [N/P, K/8, P] (q4_0), and
  /// for scales [N/P, K/32, P].
  std::vector<int64_t> argumentShape() const;
};

/// The weights every entry point takes, in argument order after the per-call arguments: the
/// user-supplied HF GPT-2 parameters, and "lm_head.weight_t", the tied embedding laid out as the
/// LM head's [D, paddedVocabSize()] matmul weight. With `storage.packed`, every matmul weight
/// whose column count divides by target::kPanelWidth is packed into panels, in
/// `storage.format`, followed by its scales when the format is block-quantized; every other
/// weight is f32. Block-quantized formats need n_embd to be a multiple of the block size, and
/// bf16 an even n_embd (std::invalid_argument otherwise). Block-quantized formats take no
/// "transformer.wte.weight": their token lookup
/// reads the LM head's copy (the embedding is stored once, in the format; q8_0 for q4_0).
std::vector<ParameterSpec> parameterSpecs(const GPTConfig &config, const WeightStorage &storage);

/// The parameters a user supplies (the non-derived ones), in parameterSpecs() order.
std::vector<ParameterSpec> suppliedParameters(const GPTConfig &config);

} // namespace gpt

#endif // GPT_CC_BUILDER_PARAMETERS_H
