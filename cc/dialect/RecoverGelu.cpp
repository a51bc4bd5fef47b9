// Recovery of transformer.gelu from its written-out tanh form (see RecoverWrittenOutOps.h).
#include "cc/dialect/RecoverWrittenOutOps.h"

#include "cc/dialect/TransformerDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/PatternMatch.h"

#include <cmath>
#include <optional>
#include <utility>

namespace mlir::transformer {
namespace {

/// Whether `value` is a transformer.constant holding one value (any shape, a splat) close to
/// `expected` (relative 1e-5: literals written in Python arrive rounded to f32).
bool isScalarConstant(Value value, double expected) {
  auto constant = value.getDefiningOp<ConstantOp>();
  if (!constant) return false;
  auto splat = dyn_cast<SplatElementsAttr>(constant.getValue());
  if (!splat) return false;
  double actual = splat.getSplatValue<APFloat>().convertToDouble();
  return std::abs(actual - expected) <= 1e-5 * std::abs(expected);
}

/// The operands of `op` (a binary op of type Op) with one that satisfies `pred` first, or none.
template <typename Op, typename Pred> std::optional<std::pair<Value, Value>> orderedOperands(Value value, Pred pred) {
  auto op = value.getDefiningOp<Op>();
  if (!op) return std::nullopt;
  if (pred(op.getLhs())) return std::make_pair(op.getLhs(), op.getRhs());
  if (pred(op.getRhs())) return std::make_pair(op.getRhs(), op.getLhs());
  return std::nullopt;
}

/// Whether `value` is x * x * x, associated either way.
bool isCubeOf(Value value, Value x) {
  auto outer = value.getDefiningOp<MulOp>();
  if (!outer) return false;
  auto isSquare = [&](Value v) {
    auto square = v.getDefiningOp<MulOp>();
    return square && square.getLhs() == x && square.getRhs() == x;
  };
  return (outer.getRhs() == x && isSquare(outer.getLhs())) || (outer.getLhs() == x && isSquare(outer.getRhs()));
}

/// The x of `0.5 * x` (either operand order), or null.
Value halfOf(Value value) {
  auto operands = orderedOperands<MulOp>(value, [](Value v) { return isScalarConstant(v, 0.5); });
  return operands ? operands->second : Value();
}

/// Whether `value` is 1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)) for this x.
bool isOnePlusTanhOf(Value value, Value x) {
  auto sum = orderedOperands<AddOp>(value, [](Value v) { return isScalarConstant(v, 1.0); });
  if (!sum) return false;
  auto tanh = sum->second.getDefiningOp<TanhOp>();
  if (!tanh) return false;
  auto scaled =
      orderedOperands<MulOp>(tanh.getInput(), [](Value v) { return isScalarConstant(v, std::sqrt(2.0 / M_PI)); });
  if (!scaled) return false;
  auto polynomial = orderedOperands<AddOp>(scaled->second, [&](Value v) { return v == x; });
  if (!polynomial) return false;
  auto cubic = orderedOperands<MulOp>(polynomial->second, [](Value v) { return isScalarConstant(v, 0.044715); });
  return cubic && isCubeOf(cubic->second, x);
}

// (0.5 * x) * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) = gelu(x)
struct RecoverTanhGelu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp op, PatternRewriter &rewriter) const override {
    for (auto [half, onePlusTanh] : {std::pair(op.getLhs(), op.getRhs()), std::pair(op.getRhs(), op.getLhs())}) {
      Value x = halfOf(half);
      if (!x || x.getType() != op.getType() || !isOnePlusTanhOf(onePlusTanh, x)) continue;
      rewriter.replaceOpWithNewOp<GeluOp>(op, op.getType(), x);
      return success();
    }
    return rewriter.notifyMatchFailure(op, "not the tanh GELU");
  }
};

} // namespace

void populateRecoverGeluPatterns(RewritePatternSet &patterns) { patterns.add<RecoverTanhGelu>(patterns.getContext()); }

} // namespace mlir::transformer
