// Builds transformer-dialect modules for the entry points of a GPT, given its configuration.
#ifndef GPT_CC_BUILDER_GPTBUILDER_H
#define GPT_CC_BUILDER_GPTBUILDER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace gpt {

struct GPTConfig {
  int64_t nLayer = 0;
  int64_t nHead = 0;
  int64_t nEmbd = 0;
  int64_t vocabSize = 0;
  int64_t blockSize = 0;
  bool rope = false;  ///< rotary embedding (GPT-NeoX rotate-half) instead of a learned `wpe` table
  float layerNormEps = 1e-5f;

  /// An empty string when the configuration is usable, else what is wrong with it.
  std::string validate() const;

  /// The vocabulary rounded up to a multiple of 256 (8 threads x the matmul register tile's
  /// width, 32), so the LM head tiles and splits across threads evenly; logits past vocabSize are
  /// padding.
  int64_t paddedVocabSize() const { return (vocabSize + 255) / 256 * 256; }
};

/// The width of the column panels weights are packed into: the matmul register tile's width.
constexpr int64_t kPanelWidth = 32;

/// One weight argument of a compiled entry point.
struct ParameterSpec {
  std::string name;            ///< HF GPT-2 name, e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;  ///< as the user supplies it
  /// 0: passed as it is. Else a [K, N] matrix that the runtime repacks once, at load, into N / P
  /// column panels of width P = panelWidth (`transformer.packed_matmul`'s [N/P, K, P] layout).
  int64_t panelWidth = 0;

  /// The shape the compiled program takes: `shape`, or [N/P, K, P] for a packed weight.
  std::vector<int64_t> argumentShape() const {
    if (panelWidth == 0) return shape;
    return {shape[1] / panelWidth, shape[0], panelWidth};
  }
};

/// The weights every entry point takes, in argument order after the per-call arguments. All use
/// HF GPT-2 names and shapes except "lm_head.weight_t": the tied embedding transposed to
/// [D, paddedVocabSize()] with zero columns past the vocabulary, laid out once at load time so
/// that the LM head is a plain, evenly tiled matmul. With `packWeights`, every matmul weight
/// whose column count divides by kPanelWidth is packed into panels (see ParameterSpec).
std::vector<ParameterSpec> parameterSpecs(const GPTConfig &config, bool packWeights);

/// `@forward(ids: tensor<Txi64>, positions: tensor<Txi64>, weights...) -> tensor<TxV'xf32>`
/// (V' = paddedVocabSize()), with weights as parameterSpecs(config, packWeights) describes them:
/// logits for every position, calling a private `@gpt_block` once per layer. Function boundaries
/// are typed; results inside are left unranked for shape inference.
mlir::OwningOpRef<mlir::ModuleOp> buildForward(mlir::MLIRContext &ctx, const GPTConfig &config, int64_t seqLen,
                                               bool packWeights);

/// The cached entry point behind prefill and decode:
/// `@step(ids: [T], positions: [T], last: [1] i64, offset: index, k_0, v_0, ..., k_{L-1}, v_{L-1}:
///        [H, cacheLen, d], weights...) -> (logits [1, V'], the updated caches)`.
/// The T tokens sit at positions offset .. offset + T - 1; their keys and values are written into
/// the caches (in place after bufferization), attention runs over the cache, and only row `last`
/// goes through the LM head. Decode is T = 1; prefill is T = the (bucketed) prompt length.
mlir::OwningOpRef<mlir::ModuleOp> buildStep(mlir::MLIRContext &ctx, const GPTConfig &config, int64_t seqLen,
                                            int64_t cacheLen, bool packWeights);

} // namespace gpt

#endif // GPT_CC_BUILDER_GPTBUILDER_H
