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
  Panels,                 ///< a [K, N] matrix repacked into N / P column panels [N/P, K, P]
  TransposedPadded,       ///< the [V, D] table `source` transposed to [D, V'] with zero columns past V
  TransposedPaddedPanels, ///< TransposedPadded, then packed into panels
};

/// The element type matmul weights are stored in.
enum class WeightFormat {
  F32,
  BF16, ///< rounded to nearest even once at load; widened to f32 as compiled code reads it
};

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
  WeightFormat format = WeightFormat::F32; ///< the element type the program takes it in

  bool derived() const { return !source.empty(); }
  /// The shape the compiled program takes: `shape`, or [N/P, K, P] for a packed weight.
  std::vector<int64_t> argumentShape() const;
};

/// The weights every entry point takes, in argument order after the per-call arguments: the
/// user-supplied HF GPT-2 parameters, and "lm_head.weight_t", the tied embedding laid out as the
/// LM head's [D, paddedVocabSize()] matmul weight. With `storage.packed`, every matmul weight
/// whose column count divides by target::kPanelWidth is packed into panels, in
/// `storage.format`; every other weight is f32.
std::vector<ParameterSpec> parameterSpecs(const GPTConfig &config, const WeightStorage &storage);

/// The parameters a user supplies (the non-derived ones), in parameterSpecs() order.
std::vector<ParameterSpec> suppliedParameters(const GPTConfig &config);

} // namespace gpt

#endif // GPT_CC_BUILDER_PARAMETERS_H
