// The tiles of causal_attention: the block sizes its lowering uses and their classification under its mask.
#ifndef GPT_CC_DIALECT_ATTENTIONTILES_H
#define GPT_CC_DIALECT_ATTENTIONTILES_H

#include "cc/dialect/TransformerDialect.h"

#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <string>

namespace mlir::transformer {

/// The largest of 32, 16, 8, 4, 2, 1 that divides `n`: the block size of an attention loop over n
/// queries or n keys. Written once: the tile classification and the lowering both read it.
int64_t attentionBlockSize(int64_t n);

/// What the mask leaves of one (query block, key block) tile.
enum class TileClass : char {
  Empty = 'E',   ///< no query of the block sees any key of the block: never visited
  Full = 'F',    ///< every query sees every key: visited, the mask not evaluated
  Partial = 'P', ///< some of both: visited, the mask evaluated key by key
};

/// A classification: blocks of `queryBlock` x `keyBlock` (attentionBlockSize of Tq and Tk), and
/// one string per query block with one TileClass letter per key block.
struct TileClasses {
  int64_t queryBlock, keyBlock;
  llvm::SmallVector<std::string> rows;
};

/// The classification of `op`'s tiles, decided at compile time: for the causal rule or a sliding
/// window without a runtime offset (closed form), for a constant `mask` operand (every
/// element read) and for a mask expression without a runtime offset (evaluated for every pair;
/// unclassified past 2^28 pairs or where the evaluator does not know an op). std::nullopt where the shapes are not
/// static or the mask depends on a value known only at run time (the `offset` of prefill and decode; the lowering then
/// bounds its key loop by the band around the diagonal instead, and masks every tile it visits). A mask operand that is
/// not a constant, or a constant one with a query row that sees no key, is an error, emitted on `op`.
FailureOr<std::optional<TileClasses>> classifyAttentionTiles(CausalAttentionOp op);

/// Whether `classes` has the shape of a classification of `queries` x `keys` with blocks of
/// `sizes` (and only the letters E, F, P); emits what is wrong through `op` when not.
LogicalResult verifyTileClasses(Operation *op, ArrayRef<int64_t> sizes, ArrayAttr classes, int64_t queries,
                                int64_t keys);

} // namespace mlir::transformer

#endif // GPT_CC_DIALECT_ATTENTIONTILES_H
