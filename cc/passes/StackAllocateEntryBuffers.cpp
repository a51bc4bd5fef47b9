// --gpt-stack-allocate-entry-buffers: small temporaries of a function become stack buffers.
#include "cc/passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

namespace mlir::transformer {
#define GEN_PASS_DEF_STACKALLOCATEENTRYBUFFERS
#include "cc/passes/Passes.h.inc"

namespace {

/// True when `alloc`'s buffer, or a view of it, is returned: it must outlive the call.
bool escapes(memref::AllocOp alloc) {
  SmallVector<Value> worklist = {alloc.getResult()};
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      if (isa<func::ReturnOp>(user)) return true;
      if (auto view = dyn_cast<ViewLikeOpInterface>(user); view && view.getViewSource() == value)
        worklist.append(user->result_begin(), user->result_end());
      // A buffer handed to an op that produces values of its own (a loop's iter_args, a call)
      // may come back out under another name: stay on the heap. Ops that only read or write
      // it (linalg on buffers, copies, loads, stores) are fine.
      if (!isa<ViewLikeOpInterface>(user) && llvm::any_of(user->getResultTypes(), llvm::IsaPred<BaseMemRefType>))
        return true;
    }
  }
  return false;
}

class StackAllocateEntryBuffersPass
    : public impl::StackAllocateEntryBuffersBase<StackAllocateEntryBuffersPass> {
public:
  using StackAllocateEntryBuffersBase::StackAllocateEntryBuffersBase;

  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isExternal()) return;
    IRRewriter rewriter(&getContext());
    int64_t total = 0;
    // Only the entry block: an alloca there is part of the function's frame, made once per
    // call; one inside a loop would grow the stack on every iteration.
    for (auto alloc : llvm::make_early_inc_range(function.front().getOps<memref::AllocOp>())) {
      MemRefType type = alloc.getType();
      if (!type.hasStaticShape() || !type.getLayout().isIdentity() || !type.getElementType().isIntOrFloat())
        continue;
      int64_t bytes = type.getNumElements() * type.getElementTypeBitWidth() / 8;
      if (bytes > maxBufferBytes || total + bytes > maxFrameBytes || escapes(alloc)) continue;
      total += bytes;
      rewriter.setInsertionPoint(alloc);
      rewriter.replaceOpWithNewOp<memref::AllocaOp>(alloc, type, alloc.getAlignmentAttr());
    }
  }
};

} // namespace
} // namespace mlir::transformer
