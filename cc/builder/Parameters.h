// The one table of a GPT's parameters: names, shape rules and layouts. The builder declares the
// entry points' weight arguments from it, the runtime lays the user's arrays out by it, and the
// Python package validates and orders weights by it (through the bindings).
#ifndef GPT_CC_BUILDER_PARAMETERS_H
#define GPT_CC_BUILDER_PARAMETERS_H

#include "cc/TargetParameters.h"
#include "cc/kernels/WeightFormats.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gpt {

struct GPTConfig;

/// The weights of one transformer layer by what they are, in the order the layer takes them. A
/// matmul weight is [in, out]; which of them a configuration has, and their names, depend on its
/// architecture (layerParameters()).
enum class LayerWeight {
  AttnNormWeight, ///< GPT-2 ln_1, Llama input_layernorm
  AttnNormBias,
  QkvWeight, ///< [d, q + 2 kv]: q, k and v fused (q = n_head heads, kv = n_kv_head heads); q and k beside VProj
  QkvBias,
  VProjWeight, ///< [d, kv]: v alone, where ParameterNames::vProj names it
  VProjBias,
  AttnOutWeight, ///< [q, d]
  AttnOutBias,
  MlpNormWeight, ///< GPT-2 ln_2, Llama post_attention_layernorm
  MlpNormBias,
  MlpUpWeight, ///< GPT-2 c_fc [d, ff]; SwiGLU's gate and up fused, [d, 2 ff]
  MlpUpBias,
  MlpDownWeight, ///< [ff, d]
  MlpDownBias,
  QNormWeight,        ///< [head size]: RMSNorm of each q head (ParameterNames::qNorm)
  KNormWeight,        ///< [head size]: of each k head
  PostAttnNormWeight, ///< [d]: RMSNorm of the attention branch's output (Gemma)
  PostMlpNormWeight,  ///< [d]: of the MLP branch's output
};

struct LayerParameter {
  LayerWeight weight;
  std::string name; ///< after layerPrefix(config, i)
  std::vector<int64_t> shape;
  bool isMatmulWeight;
};

/// The weights of one layer of `config`, in LayerWeight order, only those it has (biases depend on
/// the architecture; the extra norms on whether its ParameterNames name them).
std::vector<LayerParameter> layerParameters(const GPTConfig &config);

/// The prefix of layer `layer`'s parameter names: the architecture's, e.g. "transformer.h.<i>." or
/// "model.layers.<i>." (GPTConfig::names).
std::string layerPrefix(const GPTConfig &config, int64_t layer);

/// The model-level parameters' names in `config`'s naming.
struct ModelParameterNames {
  std::string tokenEmbedding, positionEmbedding, finalNormWeight, finalNormBias, head;
};
ModelParameterNames modelParameterNames(const GPTConfig &config);

/// How the runtime lays a parameter out for compiled code, once, when the weights are bound.
enum class WeightLayout {
  AsGiven,                ///< the user's array, read in place
  Panels,                 ///< a [K, N] matrix repacked into N / P column panels (argumentShape)
  TransposedPadded,       ///< the [V, D] table `source` transposed to [D, V'] with zero columns past V
  TransposedPaddedPanels, ///< TransposedPadded, then packed into panels
};

// WeightFormat, its names and its facts: kernels/WeightFormats.h, one row per format.

/// The format a KV cache stores keys and values in (llama.cpp's -ctk/-ctv names). Compiled code
/// rounds each new key and value to it once, when it is written, and widens what it reads back to
/// f32: scores, softmax and the weighted sum of values are computed in f32 whatever the format.
enum class KvCacheFormat {
  F32,
  BF16, ///< rounded to nearest even (kernels::toBf16), stored as the upper 16 bits of the f32
  F16,  ///< IEEE half, rounded to nearest even (LLVM's fptrunc)
  /// llama.cpp's block_q8_0 per 32 values of a row (int8 codes, one fp16 scale d = max|x| / 127),
  /// held in an i8 tensor: see kvCacheRowWidth.
  Q8_0,
};

/// "f32", "bf16", "f16" or "q8_0".
const char *kvCacheFormatName(KvCacheFormat format);

/// Bytes one stored key or value element takes in a cache of `format` (q8_0: its i8 codes and
/// scale bytes are the elements, kvCacheRowWidth of them per row).
inline int64_t kvCacheElementBytes(KvCacheFormat format) {
  return format == KvCacheFormat::F32 ? 4 : format == KvCacheFormat::Q8_0 ? 1 : 2;
}

/// The elements of one cached key or value row of `headSize` values: headSize, or for q8_0 the
/// headSize int8 codes followed by the headSize / 32 fp16 scales as 2 bytes each (headSize * 17/16
/// bytes, 34 per 32 values as llama.cpp's blocks). Codes and scales share the cache's one buffer,
/// so a q8_0 cache is still one argument per layer and per keys or values, as every other format's
/// (ShapeFunctions.h's kvCacheHeadDim reads the row back).
inline int64_t kvCacheRowWidth(KvCacheFormat format, int64_t headSize) {
  return format == KvCacheFormat::Q8_0 ? headSize + headSize / 16 : headSize;
}

/// How a compiled program takes its matmul weights: packed in column panels (the vectorized
/// levels' register tiles read panels) and in which format (packed weights only), and the tile
/// parameters of the target it is compiled for (target::tileParameters of its register file): the
/// panels' width and the vocabulary's padding. The caller says which target; the builder knows
/// none. `kvCache` is the format of the KV caches the cached entry points take (their argument
/// types): with the weights' storage it is what the builder reads besides the configuration and
/// shapes.
struct WeightStorage {
  bool packed = false;
  WeightFormat format = WeightFormat::F32;
  target::TileParameters tiles;
  KvCacheFormat kvCache = KvCacheFormat::F32;
  /// Packed matmul weights stored in another format than `format`, by parameter name: llama.cpp's
  /// quantization mixes give some tensors more bits (a Q4_K_M file's attn_v and ffn_down of some
  /// layers, kept in q6_k beside the others' q4_k). Layers whose weights differ in format get a
  /// block function each (GPTBuilder).
  std::map<std::string, WeightFormat> formatOverrides;

  /// The format the packed matmul weight `name` is stored in.
  WeightFormat formatOf(const std::string &name) const {
    auto found = formatOverrides.find(name);
    return found == formatOverrides.end() ? format : found->second;
  }
};

/// One weight argument of a compiled entry point.
/// The LM head's copy (ParameterSpec below): the weight the head's matmul reads.
inline constexpr const char *kHeadTable = "lm_head.weight_t";

struct ParameterSpec {
  std::string name;           ///< e.g. "transformer.h.0.attn.c_attn.weight" (GPTConfig::names)
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
  /// The shape the compiled program takes: `shape`, or for a packed weight its lane words
  /// [N/P, K * codeBits / 32, P] (f32: [N/P, K, P]), and for scales [N/P, K / blockValues *
  /// scaleRows, P]: its format's row of the weight-format table (WeightFormats.h), as
  /// transformer.packed_matmul takes them.
  std::vector<int64_t> argumentShape() const;
};

/// The weights every entry point takes, in argument order after the per-call arguments: the
/// user-supplied parameters (named as the architecture's GPTConfig::names say), and
/// "lm_head.weight_t", the tied embedding (or with an untied head "lm_head.weight") laid out as the
/// LM head's [D, paddedVocabSize(storage.tiles)] matmul weight. With `storage.packed`, every matmul weight
/// whose column count divides by `storage.tiles.panelWidth` is packed into panels, in
/// `storage.format`, followed by its scales when the format is block-quantized; every other
/// weight is f32. Block-quantized formats need n_embd to be a multiple of the block size, and
/// bf16 an even n_embd (std::invalid_argument otherwise); the same of n_ff. Block-quantized
/// formats take no [V, D] table as given: with a tied head the token lookup reads the LM head's
/// copy (the embedding is stored once, in the format's head format); with an untied
/// one the embedding has a copy of its own laid out as the head's ("<token embedding>_t", first
/// among the weights), and the head is read only to make "lm_head.weight_t".
std::vector<ParameterSpec> parameterSpecs(const GPTConfig &config, const WeightStorage &storage);

/// The parameters a user supplies (the non-derived ones), in parameterSpecs() order.
std::vector<ParameterSpec> suppliedParameters(const GPTConfig &config);

} // namespace gpt

#endif // GPT_CC_BUILDER_PARAMETERS_H
