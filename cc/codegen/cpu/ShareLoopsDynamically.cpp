// --gpt-share-loops-dynamically: OpenMP worksharing loops hand out their iterations on demand,
// from a counter the threads share.
#include "cc/codegen/cpu/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_SHARELOOPSDYNAMICALLY
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

/// The alignment of a counter's stack slot: a cache line, which the threads' atomic adds take
/// from each other, holding nothing else they write.
constexpr int64_t kCounterAlignment = 64;

/// True when `wsloop` can take its iterations from a counter: no clause that libomp's own
/// dispatch would have to honour (a schedule chosen on purpose, reductions, linear variables,
/// ordered), one loop nest of one block, directly in an omp.parallel that no other encloses (the
/// counter lives in the function's frame, reset before the fork), inside a function.
bool canCount(omp::WsloopOp wsloop) {
  if (wsloop.getScheduleVal() || !wsloop.getReductionVars().empty() || !wsloop.getLinearVars().empty() ||
      wsloop.getOrderedValAttr() || wsloop.getOrderValAttr())
    return false;
  auto nest = dyn_cast<omp::LoopNestOp>(wsloop.getWrappedLoop());
  if (!nest || !nest.getRegion().hasOneBlock()) return false;
  auto parallel = dyn_cast<omp::ParallelOp>(wsloop->getParentOp());
  if (!parallel || parallel->getParentOfType<omp::ParallelOp>()) return false;
  return parallel->getParentOfType<FunctionOpInterface>() != nullptr;
}

/// A zeroed i64 counter for `wsloop`: a stack slot in its function's entry block (once per call,
/// whatever loop the parallel region sits in), set to 0 just before the region forks.
Value zeroedCounter(omp::WsloopOp wsloop, OpBuilder &builder) {
  auto parallel = cast<omp::ParallelOp>(wsloop->getParentOp());
  auto function = parallel->getParentOfType<FunctionOpInterface>();
  Location loc = wsloop.getLoc();
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(&function.getFunctionBody().front());
  auto type = MemRefType::get({}, builder.getI64Type());
  Value counter = builder.create<memref::AllocaOp>(loc, type, builder.getI64IntegerAttr(kCounterAlignment));
  builder.setInsertionPoint(parallel);
  Value zero = builder.create<arith::ConstantIntOp>(loc, 0, 64);
  builder.create<memref::StoreOp>(loc, zero, counter);
  return counter;
}

/// Replaces `wsloop` by a loop in which each thread takes the next iteration number from a shared
/// counter (one atomic add) until the numbers run out, and the iteration's induction variables
/// from that number (the last loop varying fastest, as the collapsed nest would count). libomp's
/// own dynamic dispatch does the same with more steps per iteration, and Debian's libomp, built
/// with KMP_DEBUG, formats a trace message with vsnprintf on every one of them whatever the trace
/// level: about 4% of a 1.7B model's decode step, which hands out about 1,300 pieces.
void countIterations(omp::WsloopOp wsloop, OpBuilder &builder) {
  auto nest = cast<omp::LoopNestOp>(wsloop.getWrappedLoop());
  Location loc = wsloop.getLoc();
  Value counter = zeroedCounter(wsloop, builder);
  builder.setInsertionPoint(wsloop);

  // Each loop's trip count (steps are positive, as scf.parallel's), and their product.
  SmallVector<Value> tripCounts;
  Value total = builder.create<arith::ConstantIndexOp>(loc, 1);
  for (auto [lower, upper, step] : llvm::zip(nest.getLowerBound(), nest.getUpperBound(), nest.getStep())) {
    Value end = upper;
    if (nest.getInclusive())
      end = builder.create<arith::AddIOp>(loc, upper, builder.create<arith::ConstantIndexOp>(loc, 1));
    Value span = builder.create<arith::SubIOp>(loc, end, lower);
    Value trips = builder.create<arith::CeilDivSIOp>(loc, span, step);
    trips = builder.create<arith::MaxSIOp>(loc, trips, builder.create<arith::ConstantIndexOp>(loc, 0));
    tripCounts.push_back(trips);
    total = builder.create<arith::MulIOp>(loc, total, trips);
  }
  Value totalI64 = builder.create<arith::IndexCastOp>(loc, builder.getI64Type(), total);
  Value increment = builder.create<arith::ConstantIntOp>(loc, 1, 64);

  // The loop's result (the first number past the end) is the condition's operand; nothing uses it.
  auto loop = builder.create<scf::WhileOp>(loc, TypeRange{builder.getI64Type()}, ValueRange{});
  builder.createBlock(&loop.getBefore());
  Value taken = builder.create<memref::AtomicRMWOp>(loc, arith::AtomicRMWKind::addi, increment, counter, ValueRange{});
  Value more = builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, taken, totalI64);
  builder.create<scf::ConditionOp>(loc, more, ValueRange{taken});
  Block *after = builder.createBlock(&loop.getAfter(), {}, {builder.getI64Type()}, {loc});
  Value number = builder.create<arith::IndexCastOp>(loc, builder.getIndexType(), after->getArgument(0));
  SmallVector<Value> inductionVariables(tripCounts.size());
  for (int64_t dim = static_cast<int64_t>(tripCounts.size()) - 1; dim >= 0; --dim) {
    Value index = dim == 0 ? number : builder.create<arith::RemUIOp>(loc, number, tripCounts[dim]).getResult();
    if (dim != 0) number = builder.create<arith::DivUIOp>(loc, number, tripCounts[dim]);
    Value offset = builder.create<arith::MulIOp>(loc, index, nest.getStep()[dim]);
    inductionVariables[dim] = builder.create<arith::AddIOp>(loc, nest.getLowerBound()[dim], offset);
  }

  // The iteration's body, moved as it is; its omp.yield becomes the while loop's scf.yield.
  Block &body = nest.getRegion().front();
  for (auto [argument, value] : llvm::zip(body.getArguments(), inductionVariables)) argument.replaceAllUsesWith(value);
  Operation *yield = body.getTerminator();
  after->getOperations().splice(after->end(), body.getOperations(), body.begin(), Block::iterator(yield));
  builder.setInsertionPointToEnd(after);
  builder.create<scf::YieldOp>(loc);

  // A worksharing loop ends in a barrier unless it says nowait; the region's end is one already.
  builder.setInsertionPointAfter(wsloop);
  if (!wsloop.getNowait() && !isa<omp::TerminatorOp>(wsloop->getNextNode())) builder.create<omp::BarrierOp>(loc);
  wsloop.erase();
}

class ShareLoopsDynamicallyPass : public impl::ShareLoopsDynamicallyBase<ShareLoopsDynamicallyPass> {
public:
  void runOnOperation() override {
    SmallVector<omp::WsloopOp> loops;
    getOperation()->walk([&](omp::WsloopOp loop) { loops.push_back(loop); });
    OpBuilder builder(&getContext());
    for (omp::WsloopOp loop : loops) {
      if (canCount(loop))
        countIterations(loop, builder);
      else if (!loop.getScheduleVal()) // libomp's dynamic dispatch; a schedule set on purpose is kept
        loop.setScheduleVal(omp::ClauseScheduleKind::Dynamic);
    }
  }
};

} // namespace
} // namespace gpt::codegen
