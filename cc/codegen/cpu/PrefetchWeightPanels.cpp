// --gpt-prefetch-weight-panels: a few-row packed matmul prefetches its next weight panel, one cache
// line per K step, spread over its row tiles.
#include "cc/TargetParameters.h"
#include "cc/codegen/cpu/Passes.h"
#include "cc/codegen/cpu/RowTiles.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"

#include <algorithm>

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_PREFETCHWEIGHTPANELS
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

using target::kCacheLineBytes;

/// A K loop of a packed matmul's register tile, and what the prefetch needs to know of it.
struct PanelLoop {
  scf::ForOp kLoop;
  scf::ForOp tileLoop;               // null: a single row tile (its loop folded away)
  vector::TransferReadOp weightRead; // %w[panel, k, 0]
  int64_t panels, rows, linesPerRow, tiles, tileStep;
};

/// The weight read of `kLoop` when the loop nest is the one described in Passes.td.
std::optional<PanelLoop> matchPanelLoop(scf::ForOp kLoop, int64_t minTiles, int64_t maxTiles) {
  if (getConstantIntValue(kLoop.getLowerBound()) != 0 || getConstantIntValue(kLoop.getStep()) != 1) return std::nullopt;
  std::optional<int64_t> k = getConstantIntValue(kLoop.getUpperBound());
  if (!k) return std::nullopt;
  for (auto read : kLoop.getBody()->getOps<vector::TransferReadOp>()) {
    auto weight = dyn_cast<MemRefType>(read.getSource().getType());
    if (!weight || weight.getRank() != 3 || !weight.hasStaticShape() || !weight.getLayout().isIdentity() ||
        weight.getDimSize(1) != *k || !weight.getElementType().isIntOrFloat())
      continue;
    ValueRange indices = read.getIndices();
    Value panel = indices[0];
    if (indices[1] != kLoop.getInductionVar() || getConstantIntValue(indices[2]) != 0 ||
        !kLoop.isDefinedOutsideOfLoop(panel))
      continue;
    auto [tileLoop, tiles, tileStep] = rowTilesAround(kLoop, panel);
    if (tiles < minTiles || tiles > maxTiles) continue;
    const int64_t rowBytes = weight.getDimSize(2) * weight.getElementTypeBitWidth() / 8;
    if (rowBytes % kCacheLineBytes != 0) continue;
    const int64_t linesPerRow = rowBytes / kCacheLineBytes;
    // Fewer tiles than lines per row: each step fetches linesPerRow / tiles lines.
    if (tiles < linesPerRow && linesPerRow % tiles != 0) continue;
    return PanelLoop{kLoop, tileLoop, read, weight.getDimSize(0), *k, linesPerRow, tiles, tileStep};
  }
  return std::nullopt;
}

/// At the top of the K loop of tile t (t < linesPerRow): prefetch lines (t * K + k) * n + i,
/// i < n = max(1, linesPerRow / tiles), of panel min(panel + 1, P - 1); the address arithmetic
/// that does not depend on k goes before the loop.
void insertPrefetch(PanelLoop loop) {
  Location loc = loop.weightRead.getLoc();
  auto weight = cast<MemRefType>(loop.weightRead.getSource().getType());
  const int64_t lanesPerLine = kCacheLineBytes * 8 / weight.getElementTypeBitWidth();
  const int64_t linesPerStep = std::max<int64_t>(1, loop.linesPerRow / loop.tiles);
  OpBuilder b(loop.kLoop);
  auto index = [&](int64_t v) { return b.create<arith::ConstantIndexOp>(loc, v).getResult(); };
  // Before the K loop: the tile's first step's line and the next panel (clamped to the last).
  Value tile = loop.tileLoop
                   ? b.create<arith::DivUIOp>(loc, loop.tileLoop.getInductionVar(), index(loop.tileStep)).getResult()
                   : index(0);
  Value firstStep = b.create<arith::MulIOp>(loc, tile, index(loop.rows));
  Value panel = loop.weightRead.getIndices()[0];
  Value next = b.create<arith::MinUIOp>(loc, b.create<arith::AddIOp>(loc, panel, index(1)), index(loop.panels - 1));
  // Later tiles fetch nothing: the first linesPerRow have fetched the whole next panel.
  Value fetches;
  if (loop.tiles > loop.linesPerRow)
    fetches = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, tile, index(loop.linesPerRow));
  Value linesPerRow = index(loop.linesPerRow), lanes = index(lanesPerLine), perStep = index(linesPerStep);
  b.setInsertionPointToStart(loop.kLoop.getBody());
  Value step = b.create<arith::AddIOp>(loc, firstStep, loop.kLoop.getInductionVar());
  if (fetches) {
    auto ifOp = b.create<scf::IfOp>(loc, fetches, /*withElseRegion=*/false);
    b = ifOp.getThenBodyBuilder();
  }
  for (int64_t i = 0; i < linesPerStep; ++i) {
    // Line step * n + i: row line / linesPerRow, lanes from (line % linesPerRow) * lanesPerLine.
    Value line = linesPerStep == 1
                     ? step
                     : b.create<arith::AddIOp>(loc, b.create<arith::MulIOp>(loc, step, perStep), index(i)).getResult();
    Value row = b.create<arith::DivUIOp>(loc, line, linesPerRow);
    Value column = b.create<arith::MulIOp>(loc, b.create<arith::RemUIOp>(loc, line, linesPerRow), lanes);
    b.create<memref::PrefetchOp>(loc, loop.weightRead.getSource(), ValueRange{next, row, column},
                                 /*isWrite=*/false, /*localityHint=*/2, /*isDataCache=*/true);
  }
}

class PrefetchWeightPanelsPass : public impl::PrefetchWeightPanelsBase<PrefetchWeightPanelsPass> {
public:
  using PrefetchWeightPanelsBase::PrefetchWeightPanelsBase;

  void runOnOperation() override {
    SmallVector<PanelLoop> loops;
    getOperation()->walk([&](scf::ForOp kLoop) {
      if (std::optional<PanelLoop> loop = matchPanelLoop(kLoop, minTiles, maxTiles)) loops.push_back(*loop);
    });
    for (PanelLoop &loop : loops) insertPrefetch(loop);
  }
};

} // namespace
} // namespace gpt::codegen
