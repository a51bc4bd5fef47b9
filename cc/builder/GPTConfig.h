// The shape of a GPT: the configuration every part of the compiler is built from.
#ifndef GPT_CC_BUILDER_GPTCONFIG_H
#define GPT_CC_BUILDER_GPTCONFIG_H

#include "cc/TargetParameters.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

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

  /// An empty string when the configuration is usable, else what is wrong with it.
  std::string validate() const;

  int64_t headSize() const { return nEmbd / nHead; }

  /// The vocabulary rounded up to a multiple of target::kVocabMultiple, so the LM head tiles and
  /// splits across threads evenly; logits past vocabSize are padding.
  int64_t paddedVocabSize() const {
    return (vocabSize + target::kVocabMultiple - 1) / target::kVocabMultiple * target::kVocabMultiple;
  }
};

} // namespace gpt

#endif // GPT_CC_BUILDER_GPTCONFIG_H
