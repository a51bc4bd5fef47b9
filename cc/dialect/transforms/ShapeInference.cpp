// --transformer-shape-inference: refines unranked results through ShapeInferenceOpInterface.
#include "cc/dialect/TransformerDialect.h"
#include "cc/dialect/transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLExtras.h"

#include <deque>

namespace mlir::transformer {
#define GEN_PASS_DEF_TRANSFORMERSHAPEINFERENCE
#include "cc/dialect/transforms/Passes.h.inc"

namespace {

/// True when no operand is an unranked tensor (scalars such as an index offset do not count).
bool allOperandsRanked(Operation *op) {
  return llvm::none_of(op->getOperandTypes(), [](Type t) { return isa<UnrankedTensorType>(t); });
}

class TransformerShapeInferencePass : public impl::TransformerShapeInferenceBase<TransformerShapeInferencePass> {
public:
  void runOnOperation() override {
    func::FuncOp function = getOperation();

    // Program order is a topological order of the SSA graph, so one sweep of the worklist sees
    // every producer before its users; an op whose operands are still unranked when it is
    // reached depends on an op this pass does not know, and is left alone.
    std::deque<ShapeInference> worklist;
    function.walk([&](ShapeInference op) { worklist.push_back(op); });
    while (!worklist.empty()) {
      ShapeInference op = worklist.front();
      worklist.pop_front();
      if (!allOperandsRanked(op)) continue;
      if (failed(op.inferShapes())) return signalPassFailure();
    }
    refineFunctionResults(function);
  }

private:
  /// Results declared unranked take the type of the value the function returns.
  static void refineFunctionResults(func::FuncOp function) {
    if (function.isExternal()) return;
    auto ret = dyn_cast<func::ReturnOp>(function.getBody().back().getTerminator());
    if (!ret) return;
    SmallVector<Type> results(function.getResultTypes());
    bool changed = false;
    for (auto [declared, value] : llvm::zip(results, ret.getOperands())) {
      if (isa<UnrankedTensorType>(declared) && isa<RankedTensorType>(value.getType())) {
        declared = value.getType();
        changed = true;
      }
    }
    if (changed)
      function.setFunctionType(FunctionType::get(function.getContext(), function.getArgumentTypes(), results));
  }
};

} // namespace
} // namespace mlir::transformer
