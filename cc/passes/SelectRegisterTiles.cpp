// --gpt-select-register-tiles: records the register tile of every matmul it can tile evenly.
#include "cc/passes/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Builders.h"

namespace mlir::transformer {
#define GEN_PASS_DEF_SELECTREGISTERTILES
#include "cc/passes/Passes.h.inc"

namespace {

/// One row of the tile table: ops of this kind whose result dims are multiples of `tile` get it.
/// The first matching row wins, so each op kind lists its tiles from the largest down.
struct TileChoice {
  llvm::StringLiteral opName;
  SmallVector<int64_t> tile;  // loop order of the op: ([batch,] M, N, K)
};

const TileChoice kTileTable[] = {
    // Prefill and forward: 8 rows x 32 columns of accumulators.
    {linalg::MatmulOp::getOperationName(), {8, 32, 1}},
    // Decode (one row): a 32-wide row of accumulators, streaming the weight once.
    {linalg::MatmulOp::getOperationName(), {1, 32, 1}},
    {linalg::BatchMatmulOp::getOperationName(), {1, 8, 8, 1}},
    {linalg::BatchMatmulOp::getOperationName(), {1, 1, 8, 1}},
};

/// True when every parallel dim of the static result divides by its tile size.
bool tilesEvenly(linalg::LinalgOp op, ArrayRef<int64_t> tile) {
  auto result = dyn_cast<RankedTensorType>(op.getDpsInits()[0].getType());
  if (!result || !result.hasStaticShape()) return false;
  for (auto [dim, size] : llvm::zip(result.getShape(), tile.drop_back()))
    if (dim % size != 0) return false;
  return true;
}

/// The number of contiguous pieces to split `op` into for `threads` threads: the largest of 8, 4,
/// 2 (the counts the schedule handles) not above `threads` that leaves every piece a whole number
/// of tiles, or 1. Matmuls split along N, batch matmuls along the batch (attention heads).
int64_t parallelChunks(linalg::LinalgOp op, ArrayRef<int64_t> tile, int64_t threads) {
  auto shape = cast<RankedTensorType>(op.getDpsInits()[0].getType()).getShape();
  bool batched = isa<linalg::BatchMatmulOp>(op);
  int64_t extent = batched ? shape[0] : shape[1];
  int64_t unit = batched ? tile[0] : tile[1];
  for (int64_t chunks : {8, 4, 2})
    if (chunks <= threads && extent % (chunks * unit) == 0) return chunks;
  return 1;
}

class SelectRegisterTilesPass : public impl::SelectRegisterTilesBase<SelectRegisterTilesPass> {
public:
  using SelectRegisterTilesBase::SelectRegisterTilesBase;

  void runOnOperation() override {
    OpBuilder b(&getContext());
    getOperation().walk([&](linalg::LinalgOp op) {
      for (const TileChoice &choice : kTileTable) {
        if (op->getName().getStringRef() != choice.opName || !tilesEvenly(op, choice.tile)) continue;
        op->setAttr("gpt.register_tile", b.getI64ArrayAttr(choice.tile));
        if (int64_t chunks = parallelChunks(op, choice.tile, threads); chunks > 1)
          op->setAttr("gpt.parallel_chunks", b.getI64IntegerAttr(chunks));
        break;
      }
    });
  }
};

} // namespace
} // namespace mlir::transformer
