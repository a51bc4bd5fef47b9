// Lowering of layer_norm, rms_norm, mean and softmax: row reductions, then one elementwise linalg.generic.
#include "cc/conversion/LoweringUtils.h"
#include "cc/conversion/Passes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/DialectConversion.h"

#include <limits>

namespace gpt::conversion {
using namespace mlir;
using namespace mlir::transformer;

namespace {

/// What a lowering over the rows of `type` (its last dim) builds with: row reductions, then one
/// elementwise generic whose inputs are read whole (`identity`), one value per row (`row`) or one
/// per feature (`feature`).
struct RowOps {
  RowOps(OpBuilder &b, Location loc, RankedTensorType type)
      : b(b), loc(loc), type(type), identity(AffineMap::getMultiDimIdentityMap(type.getRank(), b.getContext())),
        row(rowMap(type.getRank(), b.getContext())), feature(featureMap(type.getRank(), b.getContext())),
        invN(1.0 / static_cast<double>(type.getShape().back())) {}

  /// A reduction over each row of `inputs` (read through `maps`) from `init`.
  Value reduce(ValueRange inputs, ArrayRef<AffineMap> maps, double init, BodyBuilder body) const {
    return buildRowReduction(b, loc, type.getShape(), inputs, maps, init, body);
  }
  /// A new tensor of `type`, each element `body` of `inputs` (read through `maps`).
  Value map(ValueRange inputs, ArrayRef<AffineMap> maps, BodyBuilder body) const {
    SmallVector<utils::IteratorType> parallel(type.getRank(), utils::IteratorType::parallel);
    return buildGeneric(b, loc, emptyTensor(b, loc, type.getShape()), inputs, maps, identity, parallel, body);
  }

  OpBuilder &b;
  Location loc;
  RankedTensorType type;
  AffineMap identity, row, feature;
  double invN; // 1 / the row's length
};

/// The pattern around a lowering of Op to the one value `lower` builds over the rows of its result.
template <typename Op, Value (*lower)(const RowOps &, Op, typename Op::Adaptor)>
struct RowLowering : OpConversionPattern<Op> {
  using OpConversionPattern<Op>::OpConversionPattern;
  LogicalResult matchAndRewrite(Op op, typename Op::Adaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, lower(RowOps(rewriter, op.getLoc(), rankedType(op.getResult())), op, adaptor));
    return success();
  }
};

/// rsqrt(meanSquare + eps): a norm's 1 / standard deviation (or root mean square), built in a body.
Value inverseRoot(OpBuilder &b, Location l, Value meanSquare, float epsilon) {
  return b.create<math::RsqrtOp>(l, b.create<arith::AddFOp>(l, meanSquare, f32Constant(b, l, epsilon)));
}

// (x - mean) * rsqrt(var + eps) * weight + bias, statistics over the last dim.
Value lowerLayerNorm(const RowOps &rows, LayerNormOp op, LayerNormOp::Adaptor adaptor) {
  Value x = adaptor.getInput();
  const double invN = rows.invN;
  const float epsilon = op.getEpsilon().convertToFloat();
  Value sum = rows.reduce({x}, {rows.identity}, 0.0, [](OpBuilder &b, Location l, ValueRange a) -> Value {
    return b.create<arith::AddFOp>(l, a[0], a[1]);
  });
  Value squares =
      rows.reduce({x, sum}, {rows.identity, rows.row}, 0.0, [&](OpBuilder &b, Location l, ValueRange a) -> Value {
        Value mean = b.create<arith::MulFOp>(l, a[1], f32Constant(b, l, invN));
        Value centered = b.create<arith::SubFOp>(l, a[0], mean);
        return b.create<arith::AddFOp>(l, a[2], b.create<arith::MulFOp>(l, centered, centered));
      });
  return rows.map({x, sum, squares, adaptor.getWeight(), adaptor.getBias()},
                  {rows.identity, rows.row, rows.row, rows.feature, rows.feature},
                  [&](OpBuilder &b, Location l, ValueRange a) -> Value {
                    Value scale = f32Constant(b, l, invN);
                    Value mean = b.create<arith::MulFOp>(l, a[1], scale);
                    Value variance = b.create<arith::MulFOp>(l, a[2], scale);
                    Value rstd = inverseRoot(b, l, variance, epsilon);
                    Value centered = b.create<arith::SubFOp>(l, a[0], mean);
                    Value scaled = b.create<arith::MulFOp>(l, b.create<arith::MulFOp>(l, centered, rstd), a[3]);
                    return b.create<arith::AddFOp>(l, scaled, a[4]);
                  });
}

// x * rsqrt(mean(x^2) + eps) * weight, the mean over the last dim: one row reduction (the sum of
// squares), then one elementwise generic, as LayerNorm's lowering without the centering.
Value lowerRmsNorm(const RowOps &rows, RmsNormOp op, RmsNormOp::Adaptor adaptor) {
  Value x = adaptor.getInput();
  const double invN = rows.invN;
  const float epsilon = op.getEpsilon().convertToFloat();
  Value squares = rows.reduce({x}, {rows.identity}, 0.0, [](OpBuilder &b, Location l, ValueRange a) -> Value {
    return b.create<arith::AddFOp>(l, a[1], b.create<arith::MulFOp>(l, a[0], a[0]));
  });
  return rows.map({x, squares, adaptor.getWeight()}, {rows.identity, rows.row, rows.feature},
                  [&](OpBuilder &b, Location l, ValueRange a) -> Value {
                    Value meanSquare = b.create<arith::MulFOp>(l, a[1], f32Constant(b, l, invN));
                    Value rstd = inverseRoot(b, l, meanSquare, epsilon);
                    return b.create<arith::MulFOp>(l, b.create<arith::MulFOp>(l, a[0], rstd), a[2]);
                  });
}

// sum(x) / n over the last dim: the row reduction, one multiply by 1 / n, and the reduced dim put
// back as a dim of size 1 (tensor.expand_shape: no data moves).
struct MeanLowering : OpConversionPattern<MeanOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(MeanOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Value x = adaptor.getInput();
    RowOps rows(rewriter, op.getLoc(), rankedType(x));
    const int64_t rank = rows.type.getRank();
    const double invN = rows.invN;
    Value sum = rows.reduce({x}, {rows.identity}, 0.0, [](OpBuilder &b, Location l, ValueRange a) -> Value {
      return b.create<arith::AddFOp>(l, a[1], a[0]);
    });
    Value mean = buildElementwise(rewriter, op.getLoc(), rankedType(sum), {sum},
                                  [&](OpBuilder &b, Location l, ValueRange a) -> Value {
                                    return b.create<arith::MulFOp>(l, a[0], f32Constant(b, l, invN));
                                  });
    // [d0, ..., d(r-2)] -> [d0, ..., d(r-2), 1]: the last kept dim grouped with the new one.
    SmallVector<ReassociationIndices> groups;
    for (int64_t i = 0; i + 1 < rank; ++i) groups.push_back({i});
    if (!groups.empty()) groups.back().push_back(rank - 1);
    rewriter.replaceOpWithNewOp<tensor::ExpandShapeOp>(op, rankedType(op.getResult()), mean, groups);
    return success();
  }
};

// exp(x - max) / sum(exp(x - max)) over the last dim; subtracting the row max keeps exp finite.
Value lowerSoftmax(const RowOps &rows, SoftmaxOp, SoftmaxOp::Adaptor adaptor) {
  Value x = adaptor.getInput();
  Value max = rows.reduce(
      {x}, {rows.identity}, -std::numeric_limits<double>::infinity(),
      [](OpBuilder &b, Location l, ValueRange a) -> Value { return b.create<arith::MaximumFOp>(l, a[0], a[1]); });
  Value sum =
      rows.reduce({x, max}, {rows.identity, rows.row}, 0.0, [](OpBuilder &b, Location l, ValueRange a) -> Value {
        Value e = b.create<math::ExpOp>(l, b.create<arith::SubFOp>(l, a[0], a[1]));
        return b.create<arith::AddFOp>(l, a[2], e);
      });
  return rows.map({x, max, sum}, {rows.identity, rows.row, rows.row},
                  [](OpBuilder &b, Location l, ValueRange a) -> Value {
                    Value e = b.create<math::ExpOp>(l, b.create<arith::SubFOp>(l, a[0], a[1]));
                    return b.create<arith::DivFOp>(l, e, a[2]);
                  });
}

} // namespace

void populateNormalizationLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<RowLowering<LayerNormOp, lowerLayerNorm>, RowLowering<RmsNormOp, lowerRmsNorm>, MeanLowering,
               RowLowering<SoftmaxOp, lowerSoftmax>>(patterns.getContext());
}

} // namespace gpt::conversion
