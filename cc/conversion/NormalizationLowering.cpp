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

// (x - mean) * rsqrt(var + eps) * weight + bias, statistics over the last dim.
struct LayerNormLowering : OpConversionPattern<LayerNormOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(LayerNormOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    RankedTensorType type = rankedType(op.getResult());
    int64_t rank = type.getRank();
    Value x = adaptor.getInput();
    AffineMap identity = AffineMap::getMultiDimIdentityMap(rank, ctx), row = rowMap(rank, ctx);
    double invN = 1.0 / static_cast<double>(type.getShape().back());

    Value sum = buildRowReduction(
        rewriter, loc, type.getShape(), {x}, {identity}, 0.0,
        [](OpBuilder &b, Location l, ValueRange a) -> Value { return b.create<arith::AddFOp>(l, a[0], a[1]); });
    Value squares =
        buildRowReduction(rewriter, loc, type.getShape(), {x, sum}, {identity, row}, 0.0,
                          [&](OpBuilder &b, Location l, ValueRange a) -> Value {
                            Value mean = b.create<arith::MulFOp>(l, a[1], f32Constant(b, l, invN));
                            Value centered = b.create<arith::SubFOp>(l, a[0], mean);
                            return b.create<arith::AddFOp>(l, a[2], b.create<arith::MulFOp>(l, centered, centered));
                          });
    float epsilon = op.getEpsilon().convertToFloat();
    SmallVector<utils::IteratorType> parallel(rank, utils::IteratorType::parallel);
    Value normalized =
        buildGeneric(rewriter, loc, emptyTensor(rewriter, loc, type.getShape()),
                     {x, sum, squares, adaptor.getWeight(), adaptor.getBias()},
                     {identity, row, row, featureMap(rank, ctx), featureMap(rank, ctx)}, identity, parallel,
                     [&](OpBuilder &b, Location l, ValueRange a) -> Value {
                       Value scale = f32Constant(b, l, invN);
                       Value mean = b.create<arith::MulFOp>(l, a[1], scale);
                       Value variance = b.create<arith::MulFOp>(l, a[2], scale);
                       Value rstd =
                           b.create<math::RsqrtOp>(l, b.create<arith::AddFOp>(l, variance, f32Constant(b, l, epsilon)));
                       Value centered = b.create<arith::SubFOp>(l, a[0], mean);
                       Value scaled = b.create<arith::MulFOp>(l, b.create<arith::MulFOp>(l, centered, rstd), a[3]);
                       return b.create<arith::AddFOp>(l, scaled, a[4]);
                     });
    rewriter.replaceOp(op, normalized);
    return success();
  }
};

// x * rsqrt(mean(x^2) + eps) * weight, the mean over the last dim: one row reduction (the sum of
// squares), then one elementwise generic, as LayerNorm's lowering without the centering.
struct RmsNormLowering : OpConversionPattern<RmsNormOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(RmsNormOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    RankedTensorType type = rankedType(op.getResult());
    int64_t rank = type.getRank();
    Value x = adaptor.getInput();
    AffineMap identity = AffineMap::getMultiDimIdentityMap(rank, ctx), row = rowMap(rank, ctx);
    double invN = 1.0 / static_cast<double>(type.getShape().back());
    Value squares = buildRowReduction(rewriter, loc, type.getShape(), {x}, {identity}, 0.0,
                                      [](OpBuilder &b, Location l, ValueRange a) -> Value {
                                        return b.create<arith::AddFOp>(l, a[1], b.create<arith::MulFOp>(l, a[0], a[0]));
                                      });
    float epsilon = op.getEpsilon().convertToFloat();
    SmallVector<utils::IteratorType> parallel(rank, utils::IteratorType::parallel);
    Value normalized = buildGeneric(rewriter, loc, emptyTensor(rewriter, loc, type.getShape()),
                                    {x, squares, adaptor.getWeight()}, {identity, row, featureMap(rank, ctx)}, identity,
                                    parallel, [&](OpBuilder &b, Location l, ValueRange a) -> Value {
                                      Value meanSquare = b.create<arith::MulFOp>(l, a[1], f32Constant(b, l, invN));
                                      Value rstd = b.create<math::RsqrtOp>(
                                          l, b.create<arith::AddFOp>(l, meanSquare, f32Constant(b, l, epsilon)));
                                      return b.create<arith::MulFOp>(l, b.create<arith::MulFOp>(l, a[0], rstd), a[2]);
                                    });
    rewriter.replaceOp(op, normalized);
    return success();
  }
};

// sum(x) / n over the last dim: the row reduction, one multiply by 1 / n, and the reduced dim put
// back as a dim of size 1 (tensor.expand_shape: no data moves).
struct MeanLowering : OpConversionPattern<MeanOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(MeanOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    Value x = adaptor.getInput();
    RankedTensorType in = rankedType(x), type = rankedType(op.getResult());
    int64_t rank = in.getRank();
    double invN = 1.0 / static_cast<double>(in.getShape().back());
    Value sum = buildRowReduction(
        rewriter, loc, in.getShape(), {x}, {AffineMap::getMultiDimIdentityMap(rank, ctx)}, 0.0,
        [](OpBuilder &b, Location l, ValueRange a) -> Value { return b.create<arith::AddFOp>(l, a[1], a[0]); });
    Value mean =
        buildElementwise(rewriter, loc, rankedType(sum), {sum}, [&](OpBuilder &b, Location l, ValueRange a) -> Value {
          return b.create<arith::MulFOp>(l, a[0], f32Constant(b, l, invN));
        });
    // [d0, ..., d(r-2)] -> [d0, ..., d(r-2), 1]: the last kept dim grouped with the new one.
    SmallVector<ReassociationIndices> groups;
    for (int64_t i = 0; i + 1 < rank; ++i) groups.push_back({i});
    if (!groups.empty()) groups.back().push_back(rank - 1);
    rewriter.replaceOpWithNewOp<tensor::ExpandShapeOp>(op, type, mean, groups);
    return success();
  }
};

// exp(x - max) / sum(exp(x - max)) over the last dim; subtracting the row max keeps exp finite.
struct SoftmaxLowering : OpConversionPattern<SoftmaxOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(SoftmaxOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    RankedTensorType type = rankedType(op.getResult());
    int64_t rank = type.getRank();
    Value x = adaptor.getInput();
    AffineMap identity = AffineMap::getMultiDimIdentityMap(rank, ctx), row = rowMap(rank, ctx);

    Value max = buildRowReduction(
        rewriter, loc, type.getShape(), {x}, {identity}, -std::numeric_limits<double>::infinity(),
        [](OpBuilder &b, Location l, ValueRange a) -> Value { return b.create<arith::MaximumFOp>(l, a[0], a[1]); });
    Value sum = buildRowReduction(rewriter, loc, type.getShape(), {x, max}, {identity, row}, 0.0,
                                  [](OpBuilder &b, Location l, ValueRange a) -> Value {
                                    Value e = b.create<math::ExpOp>(l, b.create<arith::SubFOp>(l, a[0], a[1]));
                                    return b.create<arith::AddFOp>(l, a[2], e);
                                  });
    SmallVector<utils::IteratorType> parallel(rank, utils::IteratorType::parallel);
    Value result =
        buildGeneric(rewriter, loc, emptyTensor(rewriter, loc, type.getShape()), {x, max, sum}, {identity, row, row},
                     identity, parallel, [](OpBuilder &b, Location l, ValueRange a) -> Value {
                       Value e = b.create<math::ExpOp>(l, b.create<arith::SubFOp>(l, a[0], a[1]));
                       return b.create<arith::DivFOp>(l, e, a[2]);
                     });
    rewriter.replaceOp(op, result);
    return success();
  }
};

} // namespace

void populateNormalizationLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<LayerNormLowering, RmsNormLowering, MeanLowering, SoftmaxLowering>(patterns.getContext());
}

} // namespace gpt::conversion
