// --transformer-classify-attention-tiles: each attention tile empty, full or partial, as attributes.
#include "cc/dialect/AttentionTiles.h"
#include "cc/dialect/TransformerDialect.h"
#include "cc/dialect/transforms/Passes.h"
#include "cc/dialect/transforms/TileValues.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::transformer {
#define GEN_PASS_DEF_TRANSFORMERCLASSIFYATTENTIONTILES
#include "cc/dialect/transforms/Passes.h.inc"

namespace {

struct ClassifyAttentionTiles : impl::TransformerClassifyAttentionTilesBase<ClassifyAttentionTiles> {
  void runOnOperation() override {
    WalkResult result = getOperation().walk([](CausalAttentionOp op) {
      FailureOr<std::optional<TileClasses>> classes = classifyAttentionTiles(op);
      if (failed(classes)) return WalkResult::interrupt();
      if (!*classes) return WalkResult::advance();
      Builder b(op.getContext());
      const TileClasses &tiles = **classes;
      op.setTileSizes(ArrayRef<int64_t>{tiles.queryBlock, tiles.keyBlock});
      op.setTileClassesAttr(b.getStrArrayAttr(SmallVector<StringRef>(tiles.rows.begin(), tiles.rows.end())));
      return WalkResult::advance();
    });
    if (result.wasInterrupted()) return signalPassFailure();
    propagateTileValues(getOperation());
  }
};

} // namespace
} // namespace mlir::transformer
