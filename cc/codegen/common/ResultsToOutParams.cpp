// --gpt-results-to-out-params: functions write their memref results into buffers that their
// callers pass, with no copy where the function allocated the result itself.
#include "cc/codegen/common/Passes.h"

#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/PatternMatch.h"

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_RESULTSTOOUTPARAMS
#include "cc/codegen/common/Passes.h.inc"

namespace {

/// The reshapes (collapse_shape, expand_shape) that lead from an allocation to `returned`, first
/// one first, and that allocation; or no allocation where `returned` is not a reshaped view of
/// a static, contiguous buffer allocated here.
std::pair<memref::AllocOp, SmallVector<Operation *>> reshapedAllocation(Value returned) {
  SmallVector<Operation *> reshapes;
  Value value = returned;
  while (Operation *def = value.getDefiningOp()) {
    if (auto alloc = dyn_cast<memref::AllocOp>(def)) {
      if (!alloc.getType().hasStaticShape() || !alloc.getType().getLayout().isIdentity()) break;
      std::reverse(reshapes.begin(), reshapes.end());
      return {alloc, reshapes};
    }
    if (!isa<memref::CollapseShapeOp, memref::ExpandShapeOp>(def)) break;
    reshapes.push_back(def);
    value = def->getOperand(0);
  }
  return {nullptr, {}};
}

/// Allocates `returned` (a reshaped view of an allocation) in its own shape, and rebuilds the
/// allocation's shape as a view of it by undoing the reshapes in reverse order: on a contiguous
/// buffer every collapse_shape is undone by the expand_shape with the same reassociation, and
/// the other way round. Upstream's hoisting then sees a returned allocation and drops it.
/// Returns the new allocation, or null where nothing changed.
memref::AllocOp allocateInReturnedShape(RewriterBase &rewriter, OpOperand &returned) {
  auto [alloc, reshapes] = reshapedAllocation(returned.get());
  if (!alloc || reshapes.empty()) return nullptr;
  auto returnedType = cast<MemRefType>(returned.get().getType());
  if (!returnedType.hasStaticShape() || !returnedType.getLayout().isIdentity()) return nullptr;

  rewriter.setInsertionPoint(alloc);
  auto whole = rewriter.create<memref::AllocOp>(alloc.getLoc(), returnedType, alloc.getAlignmentAttr());
  Value view = whole;
  for (Operation *reshape : llvm::reverse(reshapes)) {
    auto sourceType = cast<MemRefType>(reshape->getOperand(0).getType());
    if (auto collapse = dyn_cast<memref::CollapseShapeOp>(reshape))
      view = rewriter.create<memref::ExpandShapeOp>(reshape->getLoc(), sourceType, view,
                                                    collapse.getReassociationIndices());
    else
      view = rewriter.create<memref::CollapseShapeOp>(reshape->getLoc(), sourceType, view,
                                                      cast<memref::ExpandShapeOp>(reshape).getReassociationIndices());
  }
  rewriter.replaceOp(alloc, view);
  returned.set(whole);
  return whole;
}

/// Upstream copies into an out-parameter what it could not hoist. One such buffer is allocated
/// only after its hoisting ran: the buffer a call site gets for the result of a callee that the
/// function returns. That buffer can be the out-parameter itself when the copy is the
/// out-parameter's only use.
void elideCopiesOfAllocations(func::FuncOp function) {
  SmallVector<memref::CopyOp> copies;
  function.walk([&](memref::CopyOp copy) { copies.push_back(copy); });
  for (memref::CopyOp copy : copies) {
    auto outParam = dyn_cast<BlockArgument>(copy.getTarget());
    auto alloc = copy.getSource().getDefiningOp<memref::AllocOp>();
    if (!outParam || outParam.getOwner() != &function.front() || !outParam.hasOneUse() || !alloc ||
        alloc.getType() != outParam.getType())
      continue;
    copy.erase();
    alloc.getResult().replaceAllUsesWith(outParam);
    alloc.erase();
  }
}

/// A buffer returned twice would be hoisted into both out-parameters, and upstream then uses the
/// allocation it erased for the first one (a crash). Every repeat of a static buffer returns a
/// copy instead: the caller gets two buffers with the same contents, as with tensors.
void copyRepeatedResults(RewriterBase &rewriter, func::ReturnOp op) {
  DenseSet<Value> returned;
  for (OpOperand &operand : op->getOpOperands()) {
    auto type = dyn_cast<MemRefType>(operand.get().getType());
    if (!type || returned.insert(operand.get()).second) continue;
    if (!type.hasStaticShape() || !type.getLayout().isIdentity()) continue;
    rewriter.setInsertionPoint(op);
    Value copy = rewriter.create<memref::AllocOp>(op.getLoc(), type);
    rewriter.create<memref::CopyOp>(op.getLoc(), operand.get(), copy);
    operand.set(copy);
  }
}

class ResultsToOutParamsPass : public impl::ResultsToOutParamsBase<ResultsToOutParamsPass> {
public:
  using ResultsToOutParamsBase::ResultsToOutParamsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    IRRewriter rewriter(&getContext());
    module.walk([&](func::ReturnOp op) { copyRepeatedResults(rewriter, op); });
    // A buffer returned twice under different shapes keeps the shape it was given first.
    DenseSet<Operation *> reshaped;
    module.walk([&](func::ReturnOp op) {
      for (OpOperand &operand : op->getOpOperands()) {
        if (!isa<MemRefType>(operand.get().getType())) continue;
        if (memref::AllocOp alloc = reshapedAllocation(operand.get()).first; !alloc || reshaped.contains(alloc))
          continue;
        if (memref::AllocOp whole = allocateInReturnedShape(rewriter, operand)) reshaped.insert(whole);
      }
    });
    bufferization::BufferResultsToOutParamsOpts options;
    options.hoistStaticAllocs = true;
    if (failed(bufferization::promoteBufferResultsToOutParams(module, options))) return signalPassFailure();
    for (auto function : module.getOps<func::FuncOp>())
      if (!function.isExternal()) elideCopiesOfAllocations(function);
  }
};

} // namespace
} // namespace gpt::codegen
