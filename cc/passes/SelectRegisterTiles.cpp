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

class SelectRegisterTilesPass : public impl::SelectRegisterTilesBase<SelectRegisterTilesPass> {
public:
  void runOnOperation() override {
    OpBuilder b(&getContext());
    getOperation().walk([&](linalg::LinalgOp op) {
      for (const TileChoice &choice : kTileTable) {
        if (op->getName().getStringRef() == choice.opName && tilesEvenly(op, choice.tile)) {
          op->setAttr("gpt.register_tile", b.getI64ArrayAttr(choice.tile));
          break;
        }
      }
    });
  }
};

} // namespace
} // namespace mlir::transformer
