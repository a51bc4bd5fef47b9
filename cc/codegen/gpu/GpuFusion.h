// The walk before dispatch formation (GpuPrograms.cpp): which ops own a kernel and which are
// computed inside another op's kernel, decided for a whole program before any op is formed, as
// IREE picks a root op (here a matmul, or GPT-2's add of two embeddings) and fuses around it.
#ifndef GPT_CC_CODEGEN_GPU_GPUFUSION_H
#define GPT_CC_CODEGEN_GPU_GPUFUSION_H

#include "cc/builder/Parameters.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gpt::gpu {

/// What a matmul's kernel computes after it (its epilogue), each op the sole user of what came
/// before.
struct MatmulEpilogueOps {
  mlir::Value bias;     ///< + this [columns] weight
  bool gelu = false;    ///< then GELU (tanh)
  mlir::Value residual; ///< then + this activation of the result's shape, formed before the matmul
  mlir::Value result;   ///< what the kernel writes: the last fused op's result
};

/// What the walk decided: the roots that take other ops into their kernel, and the ops so taken
/// (formed by no launch of their own).
struct FusionPlan {
  llvm::DenseMap<mlir::Operation *, MatmulEpilogueOps> epilogues; ///< of every matmul
  llvm::DenseSet<mlir::Operation *> embeddingPairs;               ///< adds of two embeddings: one gather of both rows
  llvm::DenseSet<mlir::Operation *> fused;
};

/// The values of a block that are weights: the entry point's weight arguments, and the callee
/// arguments they are passed to.
using WeightValues = llvm::DenseMap<mlir::Value, const ParameterSpec *>;

/// Plans the fusions of `block` and of every callee it calls (a callee's arguments are weights
/// where the call passes one), and adds to `matrixNames` the parameters some matmul reads (the
/// artifact stores them in its low-precision type).
void planFusion(mlir::Block &block, const WeightValues &weights, FusionPlan &plan, std::set<std::string> &matrixNames);

/// The shape of a ranked tensor with a static shape, else none.
std::optional<std::vector<int64_t>> staticShape(mlir::Value value);

/// The function `call` calls, null when it is not in the module.
mlir::func::FuncOp calleeOf(mlir::func::CallOp call);

} // namespace gpt::gpu

#endif // GPT_CC_CODEGEN_GPU_GPUFUSION_H
