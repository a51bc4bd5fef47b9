// The shape of a GPT: the configuration every part of the compiler is built from.
#ifndef GPT_CC_BUILDER_GPTCONFIG_H
#define GPT_CC_BUILDER_GPTCONFIG_H

#include "cc/TargetParameters.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

/// The compiler's parameter names, as the architecture names them (python/gpt/architectures.py's
/// CompilerNames, the one table of them, passed through the binding): a layer's weights are
/// `layerPrefix` (with "{i}" for the layer) + a part + ".weight" or ".bias", the model's a part +
/// ".weight" (".bias"). E.g. GPT-2's "transformer.h.{i}." + "attn.c_attn", Llama's
/// "model.layers.{i}." + "self_attn.qkv_proj" (vLLM's fused q/k/v, and gate_up_proj).
struct ParameterNames {
  std::string layerPrefix;
  std::string attnNorm, qkv, attnOut, mlpNorm, mlpUp, mlpDown;
  std::string tokenEmbedding, positionEmbedding, finalNorm, head;
  /// The norms some architectures add, empty where it has none: an RMSNorm over each head of q
  /// and of k before rope (Gemma 3, Qwen3), and each branch's output normed before the residual
  /// add (Gemma's "sandwich" post_attention_layernorm and post_feedforward_layernorm).
  std::string qNorm, kNorm, postAttnNorm, postMlpNorm;
  /// v's projection as a matmul of its own, empty where q, k and v are one fused matmul (qkv):
  /// a GGUF file whose v is in another block type than q and k (llama.cpp's Q4_K_M gives half the
  /// layers a Q6_K v) keeps each in its own format instead of one format for all three.
  std::string vProj;
};
/// LayerNorm (weight and bias) or RMSNorm (weight only).
enum class NormKind { Layer, Rms };
/// GPT-2's up, tanh GELU, down; SwiGLU's down(silu(gate) * up); or GeGLU's down(gelu(gate) * up)
/// (Gemma, tanh GELU), gate and up one fused matmul.
enum class MlpKind { Gelu, SwiGlu, GeGlu };
/// Which dimensions rope rotates together: j and j + d/2 (GPT-NeoX, HF), or 2i and 2i + 1 (GPT-J,
/// llama.cpp's `llama` GGUF files, whose q/k rows its converter permuted into pairs).
enum class RopeLayout { Half, Interleaved };

/// Llama 3's frequency scaling (transformers' _compute_llama3_parameters); factor 0: none.
struct RopeScaling {
  float factor = 0.0f;
  float lowFreqFactor = 1.0f;
  float highFreqFactor = 4.0f;
  int64_t originalMaxPositions = 8192;
};

struct GPTConfig {
  int64_t nLayer = 0;
  int64_t nHead = 0;
  int64_t nEmbd = 0;
  int64_t vocabSize = 0;
  int64_t blockSize = 0;
  bool rope = false; ///< rotary embedding (GPT-NeoX rotate-half) instead of a learned `wpe` table
  float layerNormEps = 1e-5f;
  /// Sliding-window attention: key j is visible from query i iff i - W < j <= i. 0: full causal.
  /// With a window the KV cache may be rolling: position p lives at slot p % (cache length).
  int64_t attentionWindow = 0;
  /// Any other mask (python/gpt/masks.py): [blockSize, blockSize] row-major bytes, nonzero where
  /// key j is visible from query i; empty: the causal rule (and window). The forward program of
  /// T tokens embeds its top-left [T, T] corner as a constant mask operand of attention; the
  /// cached step has no mask operand, so a model with one compiles forward only.
  std::vector<uint8_t> attentionMask;
  /// A mask as an expression of the query and key positions (cc/builder/MaskExpression.h), e.g.
  /// "(or (lt j 4) (le j i))"; empty: none. Attention then carries it as its `visible` region,
  /// in the forward program and in the cached step alike (no [T, T] data anywhere).
  std::string attentionMaskExpression;
  /// Whether the mask lets some query see a later key (prefix-LM, some block patterns): programs
  /// are then compiled for the exact number of tokens, since padding rows would be seen.
  bool attentionLooksAhead = false;

  // The architecture's pieces (python/gpt/architectures.py); the defaults are GPT-2's.
  ParameterNames names; ///< no default: every architecture's come from its spec
  NormKind norm = NormKind::Layer;
  MlpKind mlp = MlpKind::Gelu;
  int64_t nKvHead = 0;  ///< key/value heads, dividing nHead (grouped-query attention); 0: nHead
  int64_t nFf = 0;      ///< the MLP's width; 0: 4 nEmbd
  bool bias = true;     ///< every linear and norm has a bias (GPT-2)
  bool qkvBias = true;  ///< the q/k/v projection has a bias (GPT-2, Qwen2)
  bool tiedHead = true; ///< the LM head is the token embedding; else a [vocab, nEmbd] weight of its own
  float ropeBase = 10000.0f;
  RopeLayout ropeLayout = RopeLayout::Half;
  RopeScaling ropeScaling;
  /// The width of an attention head; 0: nEmbd / nHead. Any other width (Gemma's 256, Qwen3's)
  /// sizes q and the output projection by qSize() and the caches by headSize().
  int64_t headDim = 0;
  /// The token embeddings times sqrt(nEmbd), rounded to f32 as HF's Gemma does (the tied LM head
  /// reads the table unscaled).
  bool embeddingScale = false;
  /// The scale of q.k in attention; 0: 1 / sqrt(headSize()) (Gemma: query_pre_attn_scalar^-1/2).
  float attentionScale = 0.0f;
  /// Each layer's sliding window (0: full causal attention); empty: every layer attentionWindow's.
  /// Layers with a window are local: their rope base is localRopeBase, unscaled; the others' is
  /// ropeBase with ropeScaling (Gemma 3: five local layers to one global). Every layer's KV cache
  /// holds every position (attentionWindow is 0 then: no rolling cache).
  std::vector<int64_t> layerWindows;
  float localRopeBase = 0.0f; ///< 0: ropeBase

  /// Layer `layer`'s sliding window (0: none).
  int64_t windowOf(int64_t layer) const { return layerWindows.empty() ? attentionWindow : layerWindows[layer]; }

  /// An empty string when the configuration is usable, else what is wrong with it.
  std::string validate() const;

  int64_t headSize() const { return headDim ? headDim : nEmbd / nHead; }
  /// The width of the queries: nHead heads of headSize().
  int64_t qSize() const { return nHead * headSize(); }
  int64_t kvHeads() const { return nKvHead ? nKvHead : nHead; }
  /// The width of keys and values: kvHeads() heads of headSize().
  int64_t kvSize() const { return kvHeads() * headSize(); }
  int64_t ffSize() const { return nFf ? nFf : 4 * nEmbd; }

  /// The vocabulary rounded up to a multiple of the target's `tiles.vocabMultiple`, so the LM
  /// head tiles and splits across threads evenly; logits past vocabSize are padding.
  int64_t paddedVocabSize(const target::TileParameters &tiles) const {
    return (vocabSize + tiles.vocabMultiple - 1) / tiles.vocabMultiple * tiles.vocabMultiple;
  }
};

} // namespace gpt

#endif // GPT_CC_BUILDER_GPTCONFIG_H
