// The online softmax step both attention lowerings share: one block of keys folded into the
// running (max, sum, output) of a block of queries, so no score row longer than a block exists.
#ifndef GPT_CC_CONVERSION_ONLINESOFTMAX_H
#define GPT_CC_CONVERSION_ONLINESOFTMAX_H

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace gpt::conversion {

/// Whether key j of a partial tile is visible from query i, built in the body of a generic over
/// the [bq, bk] tile; gets that body's arguments (the masked score, the row's new max, the
/// output). Its linalg.index ops are the query (0) and key (1) within the tile.
using KeyVisibility = llvm::function_ref<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::ValueRange)>;

/// The running state of `rows` queries: the row max m [rows], the row sum l [rows] and the
/// unnormalized output acc [rows, valueSize]; before the first key block (-inf, 0, 0).
llvm::SmallVector<mlir::Value> initialSoftmaxState(mlir::OpBuilder &b, mlir::Location loc, int64_t rows,
                                                   int64_t valueSize);

/// One key block's step over `state` (m, l, acc): `masked` [bq, bk] holds the scaled scores, -inf
/// where a key is hidden, and `values` [bk, dv] the block's values. With m' = max(m, rowmax(s)),
/// p = exp(s - m') and c = exp(m - m') (0 while m is -inf): l' = c l + rowsum(p) and
/// acc' = c acc + p . v. Values of a half-width KV cache (f16, bf16) are widened to f32 first.
/// `visibleKey` (partial tiles only; null for full ones) forces p to exactly 0 for hidden keys,
/// never exp of -inf - -inf. Updates the state in place (each result's destination is its
/// loop-carried tensor), so its buffers carry over from block to block.
llvm::SmallVector<mlir::Value> onlineSoftmaxUpdate(mlir::OpBuilder &b, mlir::Location loc, mlir::Value masked,
                                                   mlir::Value values, mlir::ValueRange state,
                                                   KeyVisibility visibleKey);

/// The attention output of a final state: acc / l, [rows, valueSize].
mlir::Value normalizedSoftmaxOutput(mlir::OpBuilder &b, mlir::Location loc, mlir::ValueRange state);

} // namespace gpt::conversion

#endif // GPT_CC_CONVERSION_ONLINESOFTMAX_H
