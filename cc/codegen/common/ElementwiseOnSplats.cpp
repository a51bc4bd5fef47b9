// transform.apply_patterns.gpt.elementwise_on_splats's patterns (ElementwiseOnSplats.h).
#include "cc/codegen/common/ElementwiseOnSplats.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"

namespace gpt::codegen {
using namespace mlir;

namespace {

/// The vector of one element a vector.broadcast fills its result from, else null. (Broadcasts of
/// scalars are left alone: an op moved onto a scalar would lower otherwise, math.exp to a libm
/// call instead of the vector approximation every lane of the vector gets.)
Value broadcastElement(Value value) {
  auto broadcast = value.getDefiningOp<vector::BroadcastOp>();
  if (!broadcast) return Value();
  auto source = dyn_cast<VectorType>(broadcast.getSource().getType());
  return source && source.getNumElements() == 1 ? broadcast.getSource() : Value();
}

/// transpose(broadcast(e)) -> broadcast(e): every lane holds e's element in either order.
struct TransposeOfSplat : OpRewritePattern<vector::TransposeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(vector::TransposeOp transpose, PatternRewriter &rewriter) const override {
    Value element = broadcastElement(transpose.getVector());
    if (!element) return rewriter.notifyMatchFailure(transpose, "not a broadcast of one element");
    rewriter.replaceOpWithNewOp<vector::BroadcastOp>(transpose, transpose.getResultVectorType(), element);
    return success();
  }
};

/// op(broadcast(a), splat c, ...) -> broadcast(op(a, c, ...)) for an elementwise op: computed
/// once instead of once per lane.
struct ElementwiseOnSplats : OpTraitRewritePattern<OpTrait::Elementwise> {
  using OpTraitRewritePattern::OpTraitRewritePattern;

  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    if (op->getNumResults() != 1 || op->getNumRegions() != 0 || op->getNumOperands() == 0 ||
        !OpTrait::hasElementwiseMappableTraits(op) || !isa<arith::ArithDialect, math::MathDialect>(op->getDialect()))
      return failure();
    auto resultType = dyn_cast<VectorType>(op->getResult(0).getType());
    if (!resultType) return failure();
    // The elements' shape (vector<1xT>, vector<1x1xT>) is the first broadcast operand's; the
    // others must have it too, or be splat constants made in it.
    VectorType shape;
    for (Value operand : op->getOperands())
      if (Value element = broadcastElement(operand)) {
        shape = cast<VectorType>(element.getType());
        break;
      }
    if (!shape) return rewriter.notifyMatchFailure(op, "no operand is a broadcast of one element");
    SmallVector<Value> elements;
    for (Value operand : op->getOperands()) {
      if (Value element = broadcastElement(operand)) {
        if (cast<VectorType>(element.getType()).getShape() != shape.getShape())
          return rewriter.notifyMatchFailure(op, "broadcasts from vectors of different shapes");
        elements.push_back(element);
        continue;
      }
      SplatElementsAttr splat;
      if (!matchPattern(operand, m_Constant(&splat)))
        return rewriter.notifyMatchFailure(op, "an operand is not a splat");
      auto type = shape.clone(getElementTypeOrSelf(operand.getType()));
      elements.push_back(rewriter.create<arith::ConstantOp>(
          op->getLoc(), type, DenseElementsAttr::get(type, splat.getSplatValue<Attribute>())));
    }
    OperationState state(op->getLoc(), op->getName(), elements, {shape.clone(resultType.getElementType())},
                         op->getAttrs());
    Operation *onElements = rewriter.create(state);
    rewriter.replaceOpWithNewOp<vector::BroadcastOp>(op, resultType, onElements->getResult(0));
    return success();
  }
};

} // namespace

void populateElementwiseOnSplatsPatterns(RewritePatternSet &patterns) {
  patterns.add<TransposeOfSplat, ElementwiseOnSplats>(patterns.getContext());
}

} // namespace gpt::codegen
