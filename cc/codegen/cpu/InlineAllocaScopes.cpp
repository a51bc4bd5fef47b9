// --gpt-inline-alloca-scopes: removes memref.alloca_scope regions that hold no stack allocation.
#include "cc/codegen/cpu/Passes.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/PatternMatch.h"

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_INLINEALLOCASCOPES
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

class InlineAllocaScopesPass : public impl::InlineAllocaScopesBase<InlineAllocaScopesPass> {
public:
  void runOnOperation() override {
    SmallVector<memref::AllocaScopeOp> scopes;
    getOperation()->walk([&](memref::AllocaScopeOp scope) {
      bool allocates = scope->walk([](memref::AllocaOp) { return WalkResult::interrupt(); }).wasInterrupted();
      if (!allocates && scope.getNumResults() == 0) scopes.push_back(scope);
    });
    IRRewriter rewriter(&getContext());
    for (memref::AllocaScopeOp scope : scopes) {
      Block *body = &scope.getBodyRegion().front();
      rewriter.eraseOp(body->getTerminator());
      rewriter.inlineBlockBefore(body, scope);
      rewriter.eraseOp(scope);
    }
  }
};

} // namespace
} // namespace gpt::codegen
