// --transformer-classify-attention-tiles: each attention tile empty, full or partial, as attributes.
#include "cc/dialect/AttentionTiles.h"
#include "cc/dialect/TransformerDialect.h"
#include "cc/dialect/transforms/Passes.h"
#include "cc/dialect/transforms/TileValues.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>
#include <string>

namespace mlir::transformer {
#define GEN_PASS_DEF_TRANSFORMERCLASSIFYATTENTIONTILES
#include "cc/dialect/transforms/Passes.h.inc"

namespace {

/// What decides the classification of an op with a mask expression: its operand types, flags
/// and the expression's text. The layers of a model repeat one expression on one shape, and it is
/// evaluated pair by pair: once per key.
std::string expressionKey(CausalAttentionOp op) {
  std::string key;
  llvm::raw_string_ostream os(key);
  for (Type type : op->getOperandTypes()) os << type << ";";
  os << op.getQueryTokenMajor() << op.getKeyTokenMajor() << ";";
  op.getMaskExpression().front().print(os);
  return key;
}

struct ClassifyAttentionTiles : impl::TransformerClassifyAttentionTilesBase<ClassifyAttentionTiles> {
  void runOnOperation() override {
    std::map<std::string, std::optional<TileClasses>> classifiedExpressions;
    WalkResult result = getOperation().walk([&](CausalAttentionOp op) {
      std::string key = op.getMaskExpression().empty() ? "" : expressionKey(op);
      auto known = key.empty() ? classifiedExpressions.end() : classifiedExpressions.find(key);
      FailureOr<std::optional<TileClasses>> classes =
          known != classifiedExpressions.end() ? known->second : classifyAttentionTiles(op);
      if (failed(classes)) return WalkResult::interrupt();
      if (!key.empty()) classifiedExpressions[key] = *classes;
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
