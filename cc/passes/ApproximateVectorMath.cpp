// --gpt-approximate-vector-math: polynomial approximations of math ops on vectors.
#include "cc/passes/Passes.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::transformer {
#define GEN_PASS_DEF_APPROXIMATEVECTORMATH
#include "cc/passes/Passes.h.inc"

namespace {

class ApproximateVectorMathPass : public impl::ApproximateVectorMathBase<ApproximateVectorMathPass> {
public:
  void runOnOperation() override {
    // Only vector ops: a vector of tanh or exp has no libm call and would be split into one call
    // per lane, while on scalars the libm call is as fast as the polynomial (measured: GELU with
    // a scalar polynomial tanh made GPT-2's forward pass slower).
    SmallVector<Operation *> vectorMath;
    getOperation()->walk([&](Operation *op) {
      if (isa<math::MathDialect>(op->getDialect()) && op->getNumResults() == 1 &&
          isa<VectorType>(op->getResult(0).getType()))
        vectorMath.push_back(op);
    });
    if (vectorMath.empty()) return;
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(patterns);
    GreedyRewriteConfig config;
    config.strictMode = GreedyRewriteStrictness::ExistingAndNewOps;
    if (failed(applyOpPatternsAndFold(vectorMath, std::move(patterns), config))) signalPassFailure();
  }
};

} // namespace
} // namespace mlir::transformer
