// The row tiles of a packed matmul's loop nest after bufferization: read by
// --gpt-prefetch-weight-panels (which matmuls prefetch their next panel) and by
// --gpt-prefetch-decode-lanes (which few-row tiles prefetch their lanes).
#ifndef GPT_CC_CODEGEN_CPU_ROWTILES_H
#define GPT_CC_CODEGEN_CPU_ROWTILES_H

#include "mlir/Dialect/SCF/IR/SCF.h"

#include <cstdint>

namespace gpt::codegen {

/// The loop over row tiles around a matmul's K loop, and how many tiles of how many rows it runs.
struct RowTiles {
  mlir::scf::ForOp loop; ///< null: a single row tile (its loop folded away)
  int64_t tiles = 1, step = 0;
};

/// The row tiles around `kLoop`, whose weight reads index the panel with `panel`: its parent when
/// that loop runs from 0 by a constant step dividing its constant end and `panel` does not change
/// in it (each tile reads the same panel again); else a single tile, the parent being the loop
/// over panels.
RowTiles rowTilesAround(mlir::scf::ForOp kLoop, mlir::Value panel);

} // namespace gpt::codegen

#endif // GPT_CC_CODEGEN_CPU_ROWTILES_H
