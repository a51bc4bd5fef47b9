// --gpt-prefetch-decode-lanes: a decode step's two-panel reads of quantized weight lanes, and a
// few-token step's one-panel reads, prefetch the same lanes some bytes ahead (Passes.td).
#include "cc/TargetParameters.h"
#include "cc/codegen/common/CodegenAttributes.h"
#include "cc/codegen/common/TargetDescription.h"
#include "cc/codegen/cpu/Passes.h"
#include "cc/codegen/cpu/RowTiles.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_PREFETCHDECODELANES
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

using target::kCacheLineBytes;

/// A two-panel lane read and where its loop steps: `dim` is the index the loop's induction
/// variable gives, `stepBytes` the bytes between two of its values.
struct LaneRead {
  vector::TransferReadOp read;
  scf::ForOp loop;
  int64_t dim, stepBytes;
  int64_t panels; ///< 2: a decode step's two-panel read; 1: a tile of a few rows' one-panel read
};

/// A one-panel read is prefetched only where at most this many row tiles read its panel: each
/// after the first finds the panel in the cache, and its prefetches only take issue slots. With
/// them, steps of 2-8 tokens (one tile) of SmolLM2-1.7B ran 12-16% faster on an AMX Xeon and of 16
/// tokens (4 tiles) 3-9%; in every tile, a 256-token prefill (64) ran 11% slower (docs/JOURNAL.md).
constexpr int64_t kMostRowTilesPrefetched = 4;

/// The read when it is a lane read (Passes.td): of a static, identity-layout integer memref, a
/// decode step's two panels (vector<2xW> over the memref's first and last dimensions) or one panel
/// of i32 lane words (vector<W> over its last) that at most kMostRowTilesPrefetched row tiles read,
/// in an scf.for from 0 by 1 whose induction variable is exactly one middle index.
std::optional<LaneRead> matchLaneRead(vector::TransferReadOp read) {
  auto weight = dyn_cast<MemRefType>(read.getSource().getType());
  VectorType lanes = read.getVectorType();
  if (!weight || weight.getRank() < 3 || !weight.hasStaticShape() || !weight.getLayout().isIdentity() ||
      !weight.getElementType().isSignlessInteger() || weight.getElementTypeBitWidth() % 8 != 0)
    return std::nullopt;
  const int64_t rank = weight.getRank();
  AffineMap map = read.getPermutationMap();
  MLIRContext *context = read.getContext();
  const bool twoPanels =
      lanes.getRank() == 2 && lanes.getDimSize(0) == 2 && weight.getDimSize(0) >= 2 &&
      map == AffineMap::get(rank, 0, {getAffineDimExpr(0, context), getAffineDimExpr(rank - 1, context)}, context);
  // One panel: a weight's lane words (i32, WeightFormats.h), not a q8_0 KV cache's bytes, whose
  // rows attention reads in the same form.
  const bool onePanel = lanes.getRank() == 1 && weight.getElementTypeBitWidth() == 32 &&
                        map == AffineMap::get(rank, 0, {getAffineDimExpr(rank - 1, context)}, context);
  if (!twoPanels && !onePanel) return std::nullopt;
  auto loop = dyn_cast<scf::ForOp>(read->getParentOp());
  if (!loop || getConstantIntValue(loop.getLowerBound()) != 0 || getConstantIntValue(loop.getStep()) != 1)
    return std::nullopt;
  std::optional<int64_t> dim;
  for (auto [i, index] : llvm::enumerate(read.getIndices())) {
    if (index != loop.getInductionVar()) continue;
    if (dim || i == 0 || static_cast<int64_t>(i) == rank - 1) return std::nullopt; // once, a middle index
    dim = i;
  }
  if (!dim) return std::nullopt;
  int64_t stepBytes = weight.getElementTypeBitWidth() / 8;
  for (int64_t i = *dim + 1; i < rank; ++i) stepBytes *= weight.getDimSize(i);
  if (onePanel && rowTilesAround(loop, read.getIndices()[0]).tiles > kMostRowTilesPrefetched) return std::nullopt;
  return LaneRead{read, loop, *dim, stepBytes, twoPanels ? 2 : 1};
}

/// Before the read: one prefetch per cache line of its lanes, in its two panels, `bytesAhead`
/// bytes (rounded up to whole steps) on.
void insertPrefetches(const LaneRead &lane, int64_t bytesAhead) {
  vector::TransferReadOp read = lane.read;
  auto weight = cast<MemRefType>(read.getSource().getType());
  const int64_t lanesPerLine = kCacheLineBytes * 8 / weight.getElementTypeBitWidth();
  const int64_t width = read.getVectorType().getShape().back(), last = weight.getRank() - 1;
  const int64_t steps = (bytesAhead + lane.stepBytes - 1) / lane.stepBytes;
  Location loc = read.getLoc();
  OpBuilder b(read);
  auto index = [&](int64_t v) { return b.create<arith::ConstantIndexOp>(loc, v).getResult(); };
  SmallVector<Value> at(read.getIndices().begin(), read.getIndices().end());
  at[lane.dim] = b.create<arith::AddIOp>(loc, at[lane.dim], index(steps));
  Value firstColumn = at[last];
  for (int64_t panel = 0; panel < lane.panels; ++panel) {
    SmallVector<Value> where = at;
    if (panel) where[0] = b.create<arith::AddIOp>(loc, at[0], index(1));
    for (int64_t column = 0; column < width; column += lanesPerLine) {
      where[last] = column ? b.create<arith::AddIOp>(loc, firstColumn, index(column)).getResult() : firstColumn;
      b.create<memref::PrefetchOp>(loc, read.getSource(), where, /*isWrite=*/false, /*localityHint=*/3,
                                   /*isDataCache=*/true);
    }
  }
}

class PrefetchDecodeLanesPass : public impl::PrefetchDecodeLanesBase<PrefetchDecodeLanesPass> {
public:
  using PrefetchDecodeLanesBase::PrefetchDecodeLanesBase;

  void runOnOperation() override {
    int64_t ahead = bytesAhead;
    if (ahead < 0) {
      std::optional<TargetDescription> target = getTarget(getOperation());
      ahead = target ? decodeLanePrefetchBytes(*target) : 0;
    }
    if (ahead == 0) return;
    SmallVector<LaneRead> reads;
    getOperation()->walk([&](vector::TransferReadOp read) {
      if (std::optional<LaneRead> lane = matchLaneRead(read)) reads.push_back(*lane);
    });
    for (const LaneRead &lane : reads) insertPrefetches(lane, ahead);
  }
};

} // namespace
} // namespace gpt::codegen
