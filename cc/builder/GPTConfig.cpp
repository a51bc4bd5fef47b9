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

} // namespace

std::string GPTConfig::validate() const {
  auto positive = [](int64_t v) { return v > 0; };
  if (!positive(nLayer) || !positive(nHead) || !positive(nEmbd) || !positive(vocabSize) || !positive(blockSize))
    return "n_layer, n_head, n_embd, vocab_size and block_size must all be positive";
  if (headDim < 0) return "head_dim must be positive (or 0 for n_embd / n_head), got " + std::to_string(headDim);
  if (headDim == 0 && nEmbd % nHead != 0)
    return "n_embd (" + std::to_string(nEmbd) + ") must be divisible by n_head (" + std::to_string(nHead) +
           "), or head_dim given";
  if (nKvHead < 0 || nHead % kvHeads() != 0)
    return "n_kv_head (" + std::to_string(nKvHead) + ") must divide n_head (" + std::to_string(nHead) + ")";
  if (nFf < 0) return "n_ff must be positive (or 0 for 4 n_embd), got " + std::to_string(nFf);
  if (rope && headSize() % 2 != 0) return "rope needs an even head size, got " + std::to_string(headSize());
  if (!(layerNormEps > 0.0f) || !std::isfinite(layerNormEps)) return "layer_norm_eps must be a positive finite number";
  if (!(ropeBase > 1.0f) || !std::isfinite(ropeBase)) return "rope_base must be a finite number > 1";
  if (ropeScaling.factor != 0.0f &&
      (!(ropeScaling.factor > 0.0f) || !std::isfinite(ropeScaling.factor) || !(ropeScaling.lowFreqFactor > 0.0f) ||
       !(ropeScaling.highFreqFactor > ropeScaling.lowFreqFactor) || !std::isfinite(ropeScaling.highFreqFactor) ||
       ropeScaling.originalMaxPositions <= 0))
    return "rope_scaling needs factor, low_freq_factor > 0, high_freq_factor > low_freq_factor and "
           "original_max_position_embeddings > 0";
  if (std::string problem = checkNames(names); !problem.empty()) return problem;
  if (std::string problem = checkLayerAttention(*this); !problem.empty()) return problem;
  if ((!names.qNorm.empty() || !names.postAttnNorm.empty() || !names.postMlpNorm.empty()) && norm != NormKind::Rms)
    return "q/k norms and post-branch norms are RMSNorms: the architecture's norm must be rms";
  if (norm == NormKind::Rms && bias) return "RMSNorm has no bias: a model with biases on every layer uses LayerNorm";
  if (attentionWindow < 0)
    return "attention_window must be >= 1 (or 0 for none), got " + std::to_string(attentionWindow);
  if (!attentionMask.empty()) {
    if (attentionWindow > 0) return "attention_mask and attention_window exclude each other";
    if (int64_t(attentionMask.size()) != blockSize * blockSize)
      return "attention_mask must be [block_size, block_size] = [" + std::to_string(blockSize) + ", " +
             std::to_string(blockSize) + "], got " + std::to_string(attentionMask.size()) + " elements";
    for (int64_t i = 0; i < blockSize; ++i)
      if (!attentionMask[i * blockSize + i])
        return "attention_mask must let every query see its own key; query " + std::to_string(i) + " does not";
  }
  if (!attentionMaskExpression.empty()) {
    if (attentionWindow > 0 || !attentionMask.empty())
      return "attention_mask_expression excludes attention_window and attention_mask: give one";
    if (std::string problem = checkMaskExpression(attentionMaskExpression); !problem.empty()) return problem;
  }
  return "";
}

} // namespace gpt
