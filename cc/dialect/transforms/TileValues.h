// Tile values (all 0, all -inf, finite, anything) carried from constant masks through the ops after them.
#ifndef GPT_CC_DIALECT_TRANSFORMS_TILEVALUES_H
#define GPT_CC_DIALECT_TRANSFORMS_TILEVALUES_H

#include "mlir/IR/Operation.h"

namespace mlir::transformer {

/// The attributes propagateTileValues writes on an op with a static [M, N] result: one string per
/// block of rows, one letter per block of columns (Z: all 0, N: all -inf, D: all finite, A:
/// anything, infinities included), and the
/// blocks, attentionBlockSize(M) x attentionBlockSize(N).
inline constexpr llvm::StringLiteral kTileValuesAttr = "transformer.tile_values";
inline constexpr llvm::StringLiteral kTileValueSizesAttr = "transformer.tile_value_sizes";

/// Writes the tile values of every op in `root`, in program order, whose result follows from a
/// constant with a known tile (a mask of 0s or -infs) by the rules in TileValues.cpp.
void propagateTileValues(Operation *root);

} // namespace mlir::transformer

#endif // GPT_CC_DIALECT_TRANSFORMS_TILEVALUES_H
