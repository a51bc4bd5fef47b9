// --transformer-to-linalg: the pass, which checks for static shapes and applies every op family's patterns.
#include "cc/conversion/Passes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace gpt::conversion {
using namespace mlir;
using namespace mlir::transformer;

#define GEN_PASS_DEF_TRANSFORMERTOLINALG
#include "cc/conversion/Passes.h.inc"

namespace {

bool isStaticTensor(Type type) {
  if (!isa<TensorType>(type)) return true; // scalars such as an attention offset
  auto ranked = dyn_cast<RankedTensorType>(type);
  return ranked && ranked.hasStaticShape();
}

class TransformerToLinalgPass : public impl::TransformerToLinalgBase<TransformerToLinalgPass> {
public:
  void runOnOperation() override {
    // The patterns build static-shaped linalg; say plainly what is missing instead of failing
    // with a generic "failed to legalize" message.
    WalkResult shapes = getOperation().walk([](Operation *op) {
      if (!isa<TransformerDialect>(op->getDialect())) return WalkResult::advance();
      SmallVector<Type> types(op->getOperandTypes());
      llvm::append_range(types, op->getResultTypes());
      for (Type t : types) {
        if (!isStaticTensor(t)) {
          op->emitOpError() << "has type " << t << "; --transformer-to-linalg needs static shapes "
                            << "(run --transformer-shape-inference first)";
          return WalkResult::interrupt();
        }
      }
      return WalkResult::advance();
    });
    if (shapes.wasInterrupted()) return signalPassFailure();

    // Attention's mask expressions are cloned into the lowered loops as they are; the LLVM
    // lowering has no floor or ceiling division, so those become plain divisions here.
    RewritePatternSet divisions(&getContext());
    arith::populateCeilFloorDivExpandOpsPatterns(divisions);
    FrozenRewritePatternSet frozenDivisions(std::move(divisions));
    WalkResult expanded = getOperation().walk([&](CausalAttentionOp op) {
      if (op.getMaskExpression().empty()) return WalkResult::advance();
      return failed(applyPatternsAndFoldGreedily(op.getMaskExpression(), frozenDivisions)) ? WalkResult::interrupt()
                                                                                           : WalkResult::advance();
    });
    if (expanded.wasInterrupted()) return signalPassFailure();

    ConversionTarget target(getContext());
    target.addIllegalDialect<TransformerDialect>();
    // The packed matmul's lowering multiplies lanes with these inside its linalg.generic bodies.
    target.addLegalOp<LaneDotBf16Op, LaneDotU8I8Op>();
    target.addLegalDialect<arith::ArithDialect, linalg::LinalgDialect, math::MathDialect, scf::SCFDialect,
                           tensor::TensorDialect, vector::VectorDialect>();
    RewritePatternSet patterns(&getContext());
    populateTransformerToLinalgPatterns(patterns);
    if (failed(applyPartialConversion(getOperation(), target, std::move(patterns)))) return signalPassFailure();
  }
};

} // namespace

void populateTransformerToLinalgPatterns(RewritePatternSet &patterns) {
  populateElementwiseLoweringPatterns(patterns);
  populateMatmulLoweringPatterns(patterns);
  populateNormalizationLoweringPatterns(patterns);
  populateShapeLoweringPatterns(patterns);
  populateImportedShapeLoweringPatterns(patterns);
  populateAttentionLoweringPatterns(patterns);
  populatePagedAttentionLoweringPatterns(patterns);
}

} // namespace gpt::conversion
