// Recovery of transformer.rms_norm from its written-out form (see RecoverWrittenOutOps.h).
#include "cc/dialect/RecoverWrittenOutOps.h"

#include "cc/dialect/ConstantFolding.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/PatternMatch.h"

#include <cmath>
#include <optional>
#include <utility>

namespace mlir::transformer {
namespace {

/// The value of a transformer.constant splat (any shape), or none.
std::optional<float> splatValue(Value value) {
  auto constant = value.getDefiningOp<ConstantOp>();
  if (!constant) return std::nullopt;
  auto splat = dyn_cast<SplatElementsAttr>(constant.getValue());
  if (!splat) return std::nullopt;
  return splat.getSplatValue<APFloat>().convertToFloat();
}

/// The (lhs, rhs) of a binary op in both orders.
template <typename Op> std::pair<Value, Value> operandOrders(Op op, int order) {
  return order == 0 ? std::pair(op.getLhs(), op.getRhs()) : std::pair(op.getRhs(), op.getLhs());
}

/// `rewrite(a, b)` for `op`'s operands (a, b) = (lhs, rhs), then (rhs, lhs): success once one order
/// rewrites it, else a match failure saying what `op` is not.
template <typename Rewrite>
LogicalResult rewriteEitherOrder(MulOp op, PatternRewriter &rewriter, const char *notWhat, Rewrite rewrite) {
  for (int order : {0, 1}) {
    auto [a, b] = operandOrders(op, order);
    if (succeeded(rewrite(a, b))) return success();
  }
  return rewriter.notifyMatchFailure(op, notWhat);
}

/// The epsilon of `mean(x * x) + eps` (either order of the sum), a positive finite splat; or none.
std::optional<float> epsilonOfMeanSquare(Value value, Value x) {
  auto sum = value.getDefiningOp<AddOp>();
  if (!sum) return std::nullopt;
  for (int order : {0, 1}) {
    auto [meanValue, epsValue] = operandOrders(sum, order);
    auto mean = meanValue.getDefiningOp<MeanOp>();
    auto square = mean ? mean.getInput().getDefiningOp<MulOp>() : MulOp();
    std::optional<float> eps = splatValue(epsValue);
    if (!square || square.getLhs() != x || square.getRhs() != x || !eps) continue;
    // The epsilon is added to every row's mean: a splat of rank <= the mean's, broadcast.
    auto epsType = dyn_cast<RankedTensorType>(epsValue.getType());
    if (!epsType || epsType.getNumElements() != 1 || !(*eps > 0.0f) || !std::isfinite(*eps)) continue;
    return eps;
  }
  return std::nullopt;
}

// x * rsqrt(mean(x * x) + eps) = rms_norm(x, 1, eps)
struct RecoverRmsNorm : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp op, PatternRewriter &rewriter) const override {
    return rewriteEitherOrder(op, rewriter, "not x * rsqrt(mean(x * x) + eps)", [&](Value x, Value scale) {
      auto rsqrt = scale.getDefiningOp<RsqrtOp>();
      auto type = dyn_cast<RankedTensorType>(x.getType());
      if (!rsqrt || !type || !type.hasStaticShape() || type.getRank() < 1 || op.getType() != type) return failure();
      std::optional<float> eps = epsilonOfMeanSquare(rsqrt.getInput(), x);
      if (!eps) return failure();
      auto weightType = RankedTensorType::get({type.getShape().back()}, type.getElementType());
      Value ones = rewriter.create<ConstantOp>(op.getLoc(), DenseElementsAttr::get(weightType, 1.0f));
      rewriter.replaceOpWithNewOp<RmsNormOp>(op, type, x, ones, rewriter.getF32FloatAttr(*eps));
      return success();
    });
  }
};

// w * rms_norm(x, 1, eps) = rms_norm(x, w, eps), w rank-1 of x's last dimension
struct FoldRmsNormWeight : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp op, PatternRewriter &rewriter) const override {
    return rewriteEitherOrder(op, rewriter, "not weight * rms_norm(x, 1, eps)", [&](Value weight, Value normalized) {
      auto norm = normalized.getDefiningOp<RmsNormOp>();
      // Only a norm this product alone reads: another user would need the unweighted one too.
      if (!norm || !norm->hasOneUse() || op.getType() != norm.getType()) return failure();
      auto ones = norm.getWeight().getDefiningOp<ConstantOp>();
      auto weightType = dyn_cast<RankedTensorType>(weight.getType());
      if (!ones || !isSplatOf(ones.getValue(), 1.0f) || weightType != norm.getWeight().getType()) return failure();
      rewriter.replaceOpWithNewOp<RmsNormOp>(op, norm.getType(), norm.getInput(), weight, norm.getEpsilonAttr());
      return success();
    });
  }
};

} // namespace

void populateRecoverRmsNormPatterns(RewritePatternSet &patterns) {
  patterns.add<RecoverRmsNorm, FoldRmsNormWeight>(patterns.getContext());
}

} // namespace mlir::transformer
