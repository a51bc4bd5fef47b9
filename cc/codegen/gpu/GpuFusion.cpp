// The walk before dispatch formation (see GpuFusion.h).
#include "cc/codegen/gpu/GpuFusion.h"

#include "cc/dialect/TransformerDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"

namespace gpt::gpu {
namespace transformer = mlir::transformer;
namespace {

mlir::Operation *soleUser(mlir::Value value) { return value.hasOneUse() ? *value.getUsers().begin() : nullptr; }

mlir::Value otherOperand(mlir::Operation *binary, mlir::Value value) {
  return binary->getOperand(0) == value ? binary->getOperand(1) : binary->getOperand(0);
}

/// The epilogue of `matmul`: + bias, GELU, + residual, each taken when it is the sole user of
/// what came before; the ops taken are marked fused.
MatmulEpilogueOps planEpilogue(transformer::MatmulOp matmul, const WeightValues &weights, FusionPlan &plan) {
  MatmulEpilogueOps epilogue;
  mlir::Value result = matmul.getResult();
  std::optional<std::vector<int64_t>> shape = staticShape(result);
  if (auto add = mlir::dyn_cast_or_null<transformer::AddOp>(soleUser(result))) {
    mlir::Value other = otherOperand(add, result);
    if (weights.lookup(other) && shape && staticShape(other) == std::vector<int64_t>{shape->back()}) {
      epilogue.bias = other;
      plan.fused.insert(add);
      result = add.getResult();
    }
  }
  if (auto gelu = mlir::dyn_cast_or_null<transformer::GeluOp>(soleUser(result))) {
    epilogue.gelu = true;
    plan.fused.insert(gelu);
    result = gelu.getResult();
  }
  if (auto add = mlir::dyn_cast_or_null<transformer::AddOp>(soleUser(result))) {
    mlir::Value other = otherOperand(add, result);
    mlir::Operation *definer = other.getDefiningOp();
    bool earlier = !definer || definer->isBeforeInBlock(matmul);
    if (earlier && !weights.lookup(other) && shape && staticShape(other) == shape) {
      epilogue.residual = other;
      plan.fused.insert(add);
      result = add.getResult();
    }
  }
  epilogue.result = result;
  return epilogue;
}

/// GPT-2's token + position embeddings: an add of two embeddings, each used by it alone, becomes
/// one gather of both rows.
void planEmbeddingPair(transformer::AddOp add, FusionPlan &plan) {
  auto lhs = add.getLhs().getDefiningOp<transformer::EmbeddingOp>();
  auto rhs = add.getRhs().getDefiningOp<transformer::EmbeddingOp>();
  if (!lhs || !rhs || lhs == rhs || !lhs->hasOneUse() || !rhs->hasOneUse()) return;
  plan.embeddingPairs.insert(add);
  plan.fused.insert(lhs);
  plan.fused.insert(rhs);
}

} // namespace

std::optional<std::vector<int64_t>> staticShape(mlir::Value value) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(value.getType());
  if (!type || !type.hasStaticShape()) return std::nullopt;
  return std::vector<int64_t>(type.getShape().begin(), type.getShape().end());
}

mlir::func::FuncOp calleeOf(mlir::func::CallOp call) {
  return mlir::SymbolTable::lookupNearestSymbolFrom<mlir::func::FuncOp>(call, call.getCalleeAttr());
}

void planFusion(mlir::Block &block, const WeightValues &weights, FusionPlan &plan, std::set<std::string> &matrixNames) {
  for (mlir::Operation &op : block) {
    if (auto matmul = mlir::dyn_cast<transformer::MatmulOp>(op)) {
      if (const ParameterSpec *spec = weights.lookup(matmul.getRhs()))
        matrixNames.insert(spec->derived() ? spec->source : spec->name);
      // A layer's block called once per layer is planned at its first call.
      if (!plan.epilogues.count(&op)) plan.epilogues[&op] = planEpilogue(matmul, weights, plan);
    } else if (auto add = mlir::dyn_cast<transformer::AddOp>(op)) {
      planEmbeddingPair(add, plan);
    } else if (auto call = mlir::dyn_cast<mlir::func::CallOp>(op)) {
      mlir::func::FuncOp callee = calleeOf(call);
      if (!callee || callee.getBody().empty()) continue;
      WeightValues inner;
      for (auto [arg, operand] : llvm::zip(callee.getArguments(), call.getOperands()))
        if (const ParameterSpec *spec = weights.lookup(operand)) inner[arg] = spec;
      planFusion(callee.getBody().front(), inner, plan, matrixNames);
    }
  }
}

} // namespace gpt::gpu
