// Validating a GPT's configuration (see GPTConfig.h).
#include "cc/builder/GPTConfig.h"

#include "cc/builder/MaskSyntax.h"

#include <cmath>

namespace gpt {
namespace {

/// What is wrong with `names`, or an empty string.
std::string checkNames(const ParameterNames &names) {
  const std::string &prefix = names.layerPrefix;
  const size_t layer = prefix.find("{i}");
  if (layer == std::string::npos || prefix.find("{i}", layer + 1) != std::string::npos)
    return "the parameter names' layer prefix must hold \"{i}\" once, got \"" + prefix + "\"";
  for (const std::string *part :
       {&names.attnNorm, &names.qkv, &names.attnOut, &names.mlpNorm, &names.mlpUp, &names.mlpDown,
        &names.tokenEmbedding, &names.positionEmbedding, &names.finalNorm, &names.head})
    if (part->empty()) return "the architecture's parameter names are incomplete: one of them is empty";
  return "";
}

/// What is wrong with the per-layer attention (layerWindows, localRopeBase) and the attention
/// scale, or an empty string.
std::string checkLayerAttention(const GPTConfig &c) {
  if (c.names.qNorm.empty() != c.names.kNorm.empty()) return "q_norm and k_norm come together: name both or neither";
  if (!(c.attentionScale >= 0.0f) || !std::isfinite(c.attentionScale))
    return "attention_scale must be a positive finite number (or 0 for 1 / sqrt(head_dim))";
  if (c.localRopeBase != 0.0f && (!(c.localRopeBase > 1.0f) || !std::isfinite(c.localRopeBase)))
    return "rope_local_base must be a finite number > 1 (or 0 for rope_base)";
  if (c.layerWindows.empty()) return "";
  if (int64_t(c.layerWindows.size()) != c.nLayer)
    return "layer_windows must hold one window per layer (" + std::to_string(c.nLayer) + "), got " +
           std::to_string(c.layerWindows.size());
  for (int64_t window : c.layerWindows)
    if (window < 0) return "layer_windows must be >= 1 (or 0 for full attention), got " + std::to_string(window);
  if (c.attentionWindow != 0 || !c.attentionMask.empty() || !c.attentionMaskExpression.empty())
    return "layer_windows excludes attention_window and attention masks: give one";
  return "";
}

/// What is wrong with the dimensions (layers, heads, widths, the FFN), or an empty string.
std::string checkDimensions(const GPTConfig &c) {
  auto positive = [](int64_t v) { return v > 0; };
  if (!positive(c.nLayer) || !positive(c.nHead) || !positive(c.nEmbd) || !positive(c.vocabSize) ||
      !positive(c.blockSize))
    return "n_layer, n_head, n_embd, vocab_size and block_size must all be positive";
  if (c.headDim < 0) return "head_dim must be positive (or 0 for n_embd / n_head), got " + std::to_string(c.headDim);
  if (c.headDim == 0 && c.nEmbd % c.nHead != 0)
    return "n_embd (" + std::to_string(c.nEmbd) + ") must be divisible by n_head (" + std::to_string(c.nHead) +
           "), or head_dim given";
  if (c.nKvHead < 0 || c.nHead % c.kvHeads() != 0)
    return "n_kv_head (" + std::to_string(c.nKvHead) + ") must divide n_head (" + std::to_string(c.nHead) + ")";
  if (c.nFf < 0) return "n_ff must be positive (or 0 for 4 n_embd), got " + std::to_string(c.nFf);
  if (c.rope && c.headSize() % 2 != 0) return "rope needs an even head size, got " + std::to_string(c.headSize());
  return "";
}

/// What is wrong with the norms' epsilon and the rotary embedding's numbers, or an empty string.
std::string checkNumbers(const GPTConfig &c) {
  if (!(c.layerNormEps > 0.0f) || !std::isfinite(c.layerNormEps))
    return "layer_norm_eps must be a positive finite number";
  if (!(c.ropeBase > 1.0f) || !std::isfinite(c.ropeBase)) return "rope_base must be a finite number > 1";
  const RopeScaling &scaling = c.ropeScaling;
  if (scaling.factor != 0.0f && (!(scaling.factor > 0.0f) || !std::isfinite(scaling.factor) ||
                                 !(scaling.lowFreqFactor > 0.0f) || !(scaling.highFreqFactor > scaling.lowFreqFactor) ||
                                 !std::isfinite(scaling.highFreqFactor) || scaling.originalMaxPositions <= 0))
    return "rope_scaling needs factor, low_freq_factor > 0, high_freq_factor > low_freq_factor and "
           "original_max_position_embeddings > 0";
  return "";
}

/// What is wrong with the norm kind against the parameters it must carry, or an empty string.
std::string checkNorms(const GPTConfig &c) {
  const ParameterNames &names = c.names;
  if ((!names.qNorm.empty() || !names.postAttnNorm.empty() || !names.postMlpNorm.empty()) && c.norm != NormKind::Rms)
    return "q/k norms and post-branch norms are RMSNorms: the architecture's norm must be rms";
  if (c.norm == NormKind::Rms && c.bias)
    return "RMSNorm has no bias: a model with biases on every layer uses LayerNorm";
  return "";
}

/// What is wrong with the attention window, mask and mask expression (which exclude each other),
/// or an empty string.
std::string checkMasks(const GPTConfig &c) {
  if (c.attentionWindow < 0)
    return "attention_window must be >= 1 (or 0 for none), got " + std::to_string(c.attentionWindow);
  if (!c.attentionMask.empty()) {
    if (c.attentionWindow > 0) return "attention_mask and attention_window exclude each other";
    if (int64_t(c.attentionMask.size()) != c.blockSize * c.blockSize)
      return "attention_mask must be [block_size, block_size] = [" + std::to_string(c.blockSize) + ", " +
             std::to_string(c.blockSize) + "], got " + std::to_string(c.attentionMask.size()) + " elements";
    for (int64_t i = 0; i < c.blockSize; ++i)
      if (!c.attentionMask[i * c.blockSize + i])
        return "attention_mask must let every query see its own key; query " + std::to_string(i) + " does not";
  }
  if (!c.attentionMaskExpression.empty()) {
    if (c.attentionWindow > 0 || !c.attentionMask.empty())
      return "attention_mask_expression excludes attention_window and attention_mask: give one";
    if (std::string problem = checkMaskExpression(c.attentionMaskExpression); !problem.empty()) return problem;
  }
  return "";
}

} // namespace

std::string GPTConfig::validate() const {
  // In this order: an error names the first thing wrong, as it always has.
  for (auto check : {checkDimensions, checkNumbers})
    if (std::string problem = check(*this); !problem.empty()) return problem;
  if (std::string problem = checkNames(names); !problem.empty()) return problem;
  for (auto check : {checkLayerAttention, checkNorms, checkMasks})
    if (std::string problem = check(*this); !problem.empty()) return problem;
  return "";
}

} // namespace gpt
