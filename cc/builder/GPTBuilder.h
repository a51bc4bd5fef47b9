// Builds transformer-dialect modules for the entry points of a GPT, given its configuration.
#ifndef GPT_CC_BUILDER_GPTBUILDER_H
#define GPT_CC_BUILDER_GPTBUILDER_H

#include "cc/builder/EntryPoints.h"
#include "cc/builder/GPTConfig.h"
#include "cc/builder/Parameters.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace gpt {

/// `@forward(ids: tensor<Txi64>, positions: tensor<Txi64>, weights...) -> tensor<TxV'xf32>`: the
/// arguments of entryArguments(EntryPoint::Forward, ...) with the logits as the result
/// (V' = paddedVocabSize(storage.tiles)), with weights as parameterSpecs(config, storage)
/// describes them: logits for every position, calling a private `@gpt_block` once per layer.
/// Function boundaries are typed; results inside are left unranked for shape inference.
mlir::OwningOpRef<mlir::ModuleOp> buildForward(mlir::MLIRContext &ctx, const GPTConfig &config, int64_t seqLen,
                                               const WeightStorage &storage);

/// The cached entry point behind prefill and decode, the arguments of
/// entryArguments(EntryPoint::Step, ...) with the logits and the updated caches as results:
/// `@step(ids: [T], positions: [T], last: [R] i64, offset: index, k_0, v_0, ..., k_{L-1}, v_{L-1}:
///        [H, cacheLen, d], weights...) -> (logits [R, V'], the updated caches)`.
/// The T tokens sit at positions offset .. offset + T - 1; their keys and values are written into
/// the caches (in place after bufferization), attention runs over the cache, and only the R =
/// `logitsRows` rows `last` names go through the LM head. Decode is T = 1; prefill is T = the
/// (bucketed) prompt length, R = 1; speculative verification is R = T, the logits of every
/// drafted position from one pass over the weights. Throws std::invalid_argument unless
/// 1 <= R <= T.
mlir::OwningOpRef<mlir::ModuleOp> buildStep(mlir::MLIRContext &ctx, const GPTConfig &config, int64_t seqLen,
                                            int64_t cacheLen, const WeightStorage &storage, int64_t logitsRows = 1);

/// The batched step behind serving, the arguments of entryArguments(EntryPoint::BatchStep, ...)
/// with the logits and the updated pools as results:
/// `@batch_step(ids, positions, sequences, slots: [T], tables: [B, M], last: [B], k_0, v_0, ...:
///              [N, H, S, d], weights...) -> (logits [B, V'], the updated pools)`.
/// Token t of sequence sequences[t] at position positions[t] writes its key and value at
/// `slots[t]` (block * S + row) and attends to its sequence's positions through tables[sequences[t]];
/// the matmuls run over all T tokens at once. Row b of the logits is token last[b]'s.
mlir::OwningOpRef<mlir::ModuleOp> buildBatchStep(mlir::MLIRContext &ctx, const GPTConfig &config,
                                                 const BatchShape &shape, const WeightStorage &storage);

} // namespace gpt

#endif // GPT_CC_BUILDER_GPTBUILDER_H
