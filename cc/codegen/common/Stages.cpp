// The target-independent stages (see Stages.h).
#include "cc/codegen/common/Stages.h"

#include "cc/codegen/common/Passes.h"
#include "cc/conversion/Passes.h"
#include "cc/dialect/transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

namespace gpt::codegen {

void addTransformerStage(mlir::OpPassManager &pm) {
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addNestedPass<mlir::func::FuncOp>(mlir::transformer::createTransformerShapeInference());
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addNestedPass<mlir::func::FuncOp>(mlir::transformer::createTransformerAttentionLayout());
  pm.addNestedPass<mlir::func::FuncOp>(mlir::transformer::createTransformerClassifyAttentionTiles());
}

void addLinalgStage(mlir::OpPassManager &pm, bool fuse) {
  pm.addPass(conversion::createTransformerToLinalg());
  if (!fuse) return;
  pm.addPass(createFuseElementwise());
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  pm.addPass(mlir::createLoopInvariantCodeMotionPass());
}

} // namespace gpt::codegen
