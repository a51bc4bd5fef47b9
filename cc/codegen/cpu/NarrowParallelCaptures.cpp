// --gpt-narrow-parallel-captures: an OpenMP parallel region captures the scalars it reads from a
// memref descriptor, not the descriptor (see Passes.td).
#include "cc/codegen/cpu/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_NARROWPARALLELCAPTURES
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

/// Whether `value` is defined outside `region` (captured when the region is outlined).
bool definedOutside(Value value, Region &region) { return !region.isAncestor(value.getParentRegion()); }

/// Ops whose result is the same wherever they are: cloning one into a region costs nothing at run
/// time and saves capturing its value.
bool isConstantLike(Operation *op) {
  return isa<LLVM::ConstantOp, LLVM::ZeroOp, LLVM::UndefOp, LLVM::PoisonOp, LLVM::AddressOfOp>(op);
}

/// Erases the ops of `worklist` that nothing uses and that have no effect, then so on up through
/// their operands: the aggregates' `llvm.insertvalue` chains once their fields are read where they
/// were put. An op is erased only when popped, and only once nothing uses it, so none is met again.
void eraseDead(llvm::SetVector<Operation *> worklist) {
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    if (!isOpTriviallyDead(op)) continue;
    for (Value operand : op->getOperands())
      if (Operation *definition = operand.getDefiningOp()) worklist.insert(definition);
    op->erase();
  }
}

/// Hoists the region's reads of outside aggregates' fields before `parallel`, one per aggregate and
/// position, folded through the `llvm.insertvalue`s that built the aggregate.
void hoistFieldReads(omp::ParallelOp parallel) {
  Region &region = parallel.getRegion();
  SmallVector<LLVM::ExtractValueOp> reads;
  region.walk([&](LLVM::ExtractValueOp read) {
    if (definedOutside(read.getContainer(), region)) reads.push_back(read);
  });
  OpBuilder builder(parallel);
  llvm::DenseMap<std::pair<Value, Attribute>, Value> hoisted;
  for (LLVM::ExtractValueOp read : reads) {
    Value &field = hoisted[{read.getContainer(), read.getPositionAttr()}];
    if (!field)
      field = builder.createOrFold<LLVM::ExtractValueOp>(read.getLoc(), read.getContainer(), read.getPosition());
    read.getResult().replaceAllUsesWith(field);
    read.erase();
  }
  llvm::SetVector<Operation *> containers;
  for (auto &entry : hoisted)
    if (Operation *definition = entry.first.first.getDefiningOp()) containers.insert(definition);
  eraseDead(std::move(containers));
}

/// Clones into the region's entry block each constant-like op (isConstantLike) whose value the
/// region uses from outside; the original goes where nothing else uses it.
void sinkConstants(omp::ParallelOp parallel) {
  Region &region = parallel.getRegion();
  llvm::DenseMap<Value, Value> clones;
  OpBuilder builder = OpBuilder::atBlockBegin(&region.front());
  region.walk([&](Operation *op) {
    for (OpOperand &operand : op->getOpOperands()) {
      Value value = operand.get();
      Operation *definition = value.getDefiningOp();
      if (!definition || !isConstantLike(definition) || !definedOutside(value, region)) continue;
      Value &clone = clones[value];
      if (!clone) clone = builder.clone(*definition)->getResult(0);
      operand.set(clone);
    }
  });
  llvm::SetVector<Operation *> originals;
  for (auto &entry : clones) originals.insert(entry.first.getDefiningOp());
  eraseDead(std::move(originals));
}

class NarrowParallelCapturesPass : public impl::NarrowParallelCapturesBase<NarrowParallelCapturesPass> {
public:
  void runOnOperation() override {
    getOperation()->walk([](omp::ParallelOp parallel) {
      hoistFieldReads(parallel);
      sinkConstants(parallel);
    });
  }
};

} // namespace
} // namespace gpt::codegen
