// --gpt-stack-allocate-temporaries: small temporaries of a function become stack buffers in its
// frame, including those allocated on every iteration of a sequential loop.
#include "cc/passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

namespace mlir::transformer {
#define GEN_PASS_DEF_STACKALLOCATETEMPORARIES
#include "cc/passes/Passes.h.inc"

namespace {

/// Stack buffers are aligned to a cache line, which is also one AVX-512 vector.
constexpr int64_t kStackAlignment = 64;

/// True when `alloc`'s buffer, or a view of it, may outlive the region that allocates it: it is
/// returned, yielded out of a loop iteration or branch, or handed to an op that produces buffers
/// of its own (a loop's iter_args, a call returning memrefs) and may hand it back under another
/// name. Ops that only read or write it (linalg on buffers, copies, loads, stores, calls that
/// write an out-parameter) are fine.
bool escapes(memref::AllocOp alloc) {
  SmallVector<Value> worklist = {alloc.getResult()};
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      if (user->hasTrait<OpTrait::ReturnLike>() || isa<RegionBranchTerminatorOpInterface>(user)) return true;
      if (auto view = dyn_cast<ViewLikeOpInterface>(user); view && view.getViewSource() == value) {
        worklist.append(user->result_begin(), user->result_end());
        continue;
      }
      if (llvm::any_of(user->getResultTypes(), llvm::IsaPred<BaseMemRefType>)) return true;
    }
  }
  return false;
}

/// True when every op between `alloc` and `function`'s body runs its regions one at a time (a
/// sequential loop, a branch). One buffer can then serve every iteration, since no iteration's
/// buffer outlives it (escapes() is false). Inside an scf.forall the iterations run at once and
/// each needs its own buffer: those stay on the heap.
bool onlySequentialAncestors(memref::AllocOp alloc, func::FuncOp function) {
  for (Operation *parent = alloc->getParentOp(); parent != function; parent = parent->getParentOp())
    if (!isa<scf::ForOp, scf::IfOp>(parent)) return false;
  return true;
}

class StackAllocateTemporariesPass : public impl::StackAllocateTemporariesBase<StackAllocateTemporariesPass> {
public:
  using StackAllocateTemporariesBase::StackAllocateTemporariesBase;

  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isExternal()) return;
    SmallVector<memref::AllocOp> candidates;
    function.walk([&](memref::AllocOp alloc) { candidates.push_back(alloc); });

    IRRewriter rewriter(&getContext());
    Block &entry = function.front();
    int64_t total = 0;
    for (memref::AllocOp alloc : candidates) {
      MemRefType type = alloc.getType();
      if (!type.hasStaticShape() || !type.getLayout().isIdentity() || !type.getElementType().isIntOrFloat())
        continue;
      int64_t bytes = type.getNumElements() * type.getElementTypeBitWidth() / 8;
      if (bytes > maxBufferBytes || total + bytes > maxFrameBytes) continue;
      if (!onlySequentialAncestors(alloc, function) || escapes(alloc)) continue;
      total += bytes;
      // An alloca is part of the frame only in the entry block: one inside a loop would grow the
      // stack on every iteration. Allocations in the entry block stay where they are.
      if (alloc->getBlock() == &entry)
        rewriter.setInsertionPoint(alloc);
      else
        rewriter.setInsertionPointToStart(&entry);
      int64_t alignment = std::max<int64_t>(alloc.getAlignment().value_or(0), kStackAlignment);
      auto alloca = rewriter.create<memref::AllocaOp>(alloc.getLoc(), type, rewriter.getI64IntegerAttr(alignment));
      rewriter.replaceOp(alloc, alloca.getResult());
    }
  }
};

} // namespace
} // namespace mlir::transformer
