// --gpt-stack-allocate-temporaries: small temporaries of a function become stack buffers in its
// frame, including those allocated on every iteration of a sequential loop.
#include "cc/codegen/cpu/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/LoopLikeInterface.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <optional>

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_STACKALLOCATETEMPORARIES
#include "cc/codegen/cpu/Passes.h.inc"

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

/// Where `alloc` sits relative to the parallel loops around it.
struct Placement {
  bool allowed = false;   // only sequential loops and branches, and at most one scf.forall
  scf::ForallOp forall;   // that scf.forall, if any: one slot per iteration
  int64_t iterations = 1; // its static trip count
};

/// Every op between `alloc` and `function`'s body must run its regions one at a time (a
/// sequential loop, a branch), except at most one scf.forall with a static trip count. One
/// buffer can then serve every sequential iteration, since no iteration's buffer outlives it
/// (escapes() is false); the iterations of an scf.forall run at once, so each gets a slot of its
/// own.
Placement placementOf(memref::AllocOp alloc, func::FuncOp function) {
  Placement placement;
  for (Operation *parent = alloc->getParentOp(); parent != function; parent = parent->getParentOp()) {
    if (isa<scf::ForOp, scf::IfOp>(parent)) continue;
    auto forall = dyn_cast<scf::ForallOp>(parent);
    if (!forall || placement.forall || forall.getRank() != 1 || !forall.isNormalized()) return {};
    std::optional<int64_t> upper = getConstantIntValue(forall.getMixedUpperBound()[0]);
    if (!upper || *upper < 0) return {};
    placement.forall = forall;
    placement.iterations = *upper;
  }
  placement.allowed = true;
  return placement;
}

/// The bytes of a static identity-layout buffer, if they fit in int64 (a legal type such as
/// memref<9223372036854775807x32xf32> has more).
std::optional<int64_t> bufferBytes(MemRefType type) {
  int64_t bits = type.getElementTypeBitWidth();
  for (int64_t d : type.getShape())
    if (llvm::MulOverflow(bits, d, bits)) return std::nullopt;
  return bits / 8;
}

class StackAllocateTemporariesPass : public impl::StackAllocateTemporariesBase<StackAllocateTemporariesPass> {
public:
  using StackAllocateTemporariesBase::StackAllocateTemporariesBase;

  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isExternal()) return;
    SmallVector<Candidate> candidates;
    function.walk([&](memref::AllocOp alloc) {
      if (std::optional<Candidate> candidate = candidateFor(alloc, function)) candidates.push_back(*candidate);
    });
    // The frame holds the buffers that save the most heap calls first: one allocated in a loop is
    // allocated on every iteration, one in the entry block once a call. Among those in loops the
    // smallest go first, since a call to malloc and free costs the same at any size and a small
    // buffer has the least work to amortize it over (a q4_K register tile of 512 bytes in the
    // matmul's super-block loop, beside an attention tile of 16 KiB a head). In program order,
    // a long KV cache's attention buffers took the frame and left the matmuls' tiles on the heap:
    // 8B prefill at two threads lost a fifth of its time to malloc and free.
    llvm::stable_sort(candidates, [](const Candidate &a, const Candidate &b) {
      if (a.inLoop != b.inLoop) return a.inLoop;
      return a.inLoop && a.frameBytes < b.frameBytes; // the entry block's keep program order
    });

    IRRewriter rewriter(&getContext());
    Block &entry = function.front();
    int64_t total = 0;
    for (const Candidate &candidate : candidates) {
      memref::AllocOp alloc = candidate.alloc;
      MemRefType type = alloc.getType();
      if (candidate.frameBytes > maxFrameBytes - total) continue;
      total += candidate.frameBytes;
      int64_t alignment = std::max<int64_t>(alloc.getAlignment().value_or(0), kStackAlignment);
      // An alloca is part of the frame only in the entry block: one inside a loop would grow the
      // stack on every iteration. Allocations in the entry block stay where they are.
      if (alloc->getBlock() == &entry)
        rewriter.setInsertionPoint(alloc);
      else
        rewriter.setInsertionPointToStart(&entry);
      Placement placement = candidate.placement;
      if (!placement.forall) {
        auto alloca = rewriter.create<memref::AllocaOp>(alloc.getLoc(), type, rewriter.getI64IntegerAttr(alignment));
        rewriter.replaceOp(alloc, alloca.getResult());
        continue;
      }
      // One byte buffer with a slot per forall iteration; the iteration views its own slot with
      // the allocation's type (memref.view keeps the identity layout, so no user changes).
      auto bytesType = MemRefType::get({placement.iterations * candidate.slotBytes}, rewriter.getI8Type());
      auto slots = rewriter.create<memref::AllocaOp>(alloc.getLoc(), bytesType, rewriter.getI64IntegerAttr(alignment));
      rewriter.setInsertionPoint(alloc);
      Value iteration = placement.forall.getInductionVar(0);
      Value offset = rewriter.create<arith::MulIOp>(
          alloc.getLoc(), iteration, rewriter.create<arith::ConstantIndexOp>(alloc.getLoc(), candidate.slotBytes));
      rewriter.replaceOpWithNewOp<memref::ViewOp>(alloc, type, slots, offset, ValueRange{});
    }
  }

private:
  /// An allocation that may move to the frame, and what it would take there.
  struct Candidate {
    memref::AllocOp alloc;
    Placement placement;
    int64_t slotBytes;  // one iteration's buffer, rounded up to a cache line
    int64_t frameBytes; // the buffer, or a slot for each iteration of its scf.forall
    bool inLoop;        // allocated on every iteration of some loop
  };

  std::optional<Candidate> candidateFor(memref::AllocOp alloc, func::FuncOp function) const {
    MemRefType type = alloc.getType();
    if (!type.hasStaticShape() || !type.getLayout().isIdentity() || !type.getElementType().isIntOrFloat())
      return std::nullopt;
    std::optional<int64_t> bytes = bufferBytes(type);
    if (!bytes || *bytes > maxBufferBytes) return std::nullopt;
    Placement placement = placementOf(alloc, function);
    if (!placement.allowed || escapes(alloc)) return std::nullopt;
    // Slots of a forall's iterations start on cache lines.
    Candidate candidate{alloc, placement, static_cast<int64_t>(llvm::alignTo(*bytes, kStackAlignment)), *bytes, false};
    if (placement.forall && llvm::MulOverflow(placement.iterations, candidate.slotBytes, candidate.frameBytes))
      return std::nullopt;
    candidate.inLoop = alloc->getParentOfType<LoopLikeOpInterface>() != nullptr;
    return candidate;
  }
};

} // namespace
} // namespace gpt::codegen
