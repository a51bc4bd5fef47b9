// --gpt-free-buffers-after-last-use: a heap buffer is freed right after the last op that uses it,
// not at the end of the block that allocates it.
#include "cc/codegen/cpu/Passes.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_FREEBUFFERSAFTERLASTUSE
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

/// The last op of `alloc`'s block that uses its buffer or anything made from it (an op with a
/// memref result made from the buffer, such as a view, is taken to alias it: its users count
/// too), other than `dealloc`; null where the buffer's address leaves as an integer or a use
/// lies outside the block.
Operation *lastUseInBlock(memref::AllocOp alloc, memref::DeallocOp dealloc) {
  Block *block = alloc->getBlock();
  Operation *last = alloc;
  SmallVector<Value> worklist = {alloc.getResult()};
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      if (user == dealloc.getOperation()) continue;
      if (isa<memref::ExtractAlignedPointerAsIndexOp>(user)) return nullptr;
      Operation *inBlock = block->findAncestorOpInBlock(*user);
      if (!inBlock) return nullptr;
      if (last->isBeforeInBlock(inBlock)) last = inBlock;
      for (Value result : user->getResults())
        if (isa<BaseMemRefType>(result.getType())) worklist.push_back(result);
    }
  }
  return last;
}

class FreeBuffersAfterLastUsePass : public impl::FreeBuffersAfterLastUseBase<FreeBuffersAfterLastUsePass> {
public:
  void runOnOperation() override {
    SmallVector<memref::DeallocOp> deallocs;
    getOperation().walk([&](memref::DeallocOp dealloc) { deallocs.push_back(dealloc); });
    for (memref::DeallocOp dealloc : deallocs) {
      auto alloc = dealloc.getMemref().getDefiningOp<memref::AllocOp>();
      if (!alloc || alloc->getBlock() != dealloc->getBlock()) continue;
      Operation *last = lastUseInBlock(alloc, dealloc);
      // Only ever earlier: a dealloc already before some use is the deallocation pipeline's
      // choice (a conditional path), left as it is.
      if (last && last->isBeforeInBlock(dealloc) && last->getNextNode() != dealloc.getOperation())
        dealloc->moveAfter(last);
    }
  }
};

} // namespace
} // namespace gpt::codegen
