// --gpt-approximate-vector-math: polynomial approximations of math ops on vectors, and maxima
// that may ignore the sign of zero.
#include "cc/codegen/cpu/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_APPROXIMATEVECTORMATH
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

class ApproximateVectorMathPass : public impl::ApproximateVectorMathBase<ApproximateVectorMathPass> {
public:
  void runOnOperation() override {
    relaxMaxima();
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

private:
  /// Adds `nsz` to maxima (elementwise, on scalars or vectors, and across a vector's lanes):
  /// max(-0, +0) may then give either zero, which none of the program's maxima can tell apart
  /// (softmax subtracts its row maximum, ReLU compares with zero). Without it LLVM orders -0
  /// below +0 with a sign test and blend at every step, which made the attention's row maximum 7%
  /// of nano's layer time. NaN still propagates.
  void relaxMaxima() {
    getOperation()->walk([](arith::ArithFastMathInterface op) {
      auto reduction = dyn_cast<vector::ReductionOp>(op.getOperation());
      if (!isa<arith::MaximumFOp>(op) && !(reduction && reduction.getKind() == vector::CombiningKind::MAXIMUMF)) return;
      arith::FastMathFlags flags = op.getFastMathFlagsAttr().getValue() | arith::FastMathFlags::nsz;
      op->setAttr(op.getFastMathAttrName(), arith::FastMathFlagsAttr::get(op->getContext(), flags));
    });
  }
};

} // namespace
} // namespace gpt::codegen
