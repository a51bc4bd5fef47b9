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

/// The vector (of any shape) a vector.broadcast fills its result from, else null; broadcasts of
/// scalars are left alone, as in broadcastElement.
Value broadcastSource(Value value) {
  auto broadcast = value.getDefiningOp<vector::BroadcastOp>();
  if (!broadcast || !isa<VectorType>(broadcast.getSource().getType())) return Value();
  return broadcast.getSource();
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

/// op(broadcast(a), splat c, ...) -> broadcast(op(a, c, ...)) for an elementwise op whose
/// broadcast operands all come from vectors of one shape: computed once per element of the source
/// instead of once per lane of the result (a vector<32xi32> broadcast to vector<4x32xi32>: once
/// instead of four times). The same op on the same values: the same bits.
struct ElementwiseOnSplats : OpTraitRewritePattern<OpTrait::Elementwise> {
  using OpTraitRewritePattern::OpTraitRewritePattern;

  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    if (op->getNumResults() != 1 || op->getNumRegions() != 0 || op->getNumOperands() == 0 ||
        !OpTrait::hasElementwiseMappableTraits(op) || !isa<arith::ArithDialect, math::MathDialect>(op->getDialect()))
      return failure();
    auto resultType = dyn_cast<VectorType>(op->getResult(0).getType());
    if (!resultType) return failure();
    // The sources' shape (vector<1xT>, vector<32xT>) is the first broadcast operand's; the others
    // must have it too, or be splat constants made in it.
    VectorType shape;
    for (Value operand : op->getOperands())
      if (Value element = broadcastSource(operand)) {
        shape = cast<VectorType>(element.getType());
        break;
      }
    if (!shape) return rewriter.notifyMatchFailure(op, "no operand is a broadcast of a vector");
    SmallVector<Value> elements;
    for (Value operand : op->getOperands()) {
      if (Value element = broadcastSource(operand)) {
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
