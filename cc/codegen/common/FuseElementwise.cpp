// --gpt-fuse-elementwise: linalg's elementwise fusion, except into or out of a packed matmul.
#include "cc/codegen/common/Passes.h"

#include "cc/codegen/common/CodegenAttributes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_FUSEELEMENTWISE
#include "cc/codegen/common/Passes.h.inc"

namespace {

/// True when fusing would repeat an in-place update. A producer whose body reads its own output's
/// current value (an online softmax's running sum, l' = c l + s, computed over l) keeps that
/// output in the fused op; a consumer that reads the producer through a broadcasting map (a
/// [rows] value read by a [rows, cols] generic) would then rewrite each element once per column,
/// every write reading the previous one: l' = c (c l + s) + s, ... Upstream's fusion does not
/// check this, so the rule refuses it.
bool updatesInPlaceUnderBroadcast(OpOperand *fused) {
  auto producer = fused->get().getDefiningOp<linalg::GenericOp>();
  auto consumer = dyn_cast<linalg::GenericOp>(fused->getOwner());
  if (!producer || !consumer || consumer.getMatchingIndexingMap(fused).isPermutation()) return false;
  return llvm::any_of(producer.getDpsInitsMutable(),
                      [&](OpOperand &init) { return producer.payloadUsesValueFromOperand(&init); });
}

class FuseElementwisePass : public impl::FuseElementwiseBase<FuseElementwisePass> {
public:
  void runOnOperation() override {
    MLIRContext *context = &getContext();
    // Upstream's rule (fuse a producer with a single use) plus: a packed matmul (or the block
    // partial sums of a block-quantized one, or the quantization of its activations) is never merged with its
    // neighbours nor reshaped. Fusing the LayerNorm before it would recompute the normalization once per weight
    // panel, and either change would hide it from the register tiling, which matches its exact loop structure (the
    // quantization's per-block reductions stay rank-2 row reductions).
    linalg::ControlFusionFn control = [](OpOperand *fused) {
      Operation *producer = fused->get().getDefiningOp();
      auto matmulPart = [](Operation *op) {
        return isPackedMatmul(op) || isBlockPartials(op) || quantizesActivations(op);
      };
      return producer && producer->hasOneUse() && !matmulPart(producer) && !matmulPart(fused->getOwner()) &&
             !updatesInPlaceUnderBroadcast(fused);
    };
    RewritePatternSet patterns(context);
    linalg::populateElementwiseOpsFusionPatterns(patterns, control);
    linalg::populateFoldReshapeOpsByExpansionPatterns(patterns, control);
    linalg::populateConstantFoldLinalgOperations(patterns, control);
    affine::AffineApplyOp::getCanonicalizationPatterns(patterns, context);
    linalg::GenericOp::getCanonicalizationPatterns(patterns, context);
    tensor::ExpandShapeOp::getCanonicalizationPatterns(patterns, context);
    tensor::CollapseShapeOp::getCanonicalizationPatterns(patterns, context);
    context->getLoadedDialect<linalg::LinalgDialect>()->getCanonicalizationPatterns(patterns);
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns)))) signalPassFailure();
  }
};

} // namespace
} // namespace gpt::codegen
