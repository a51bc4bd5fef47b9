// Lowering of the elementwise ops (constant, add, mul, neg, relu, gelu, gelu_erf, tanh, where, exp, rsqrt, pow,
// swiglu, silu, rope) to linalg.generic.
#include "cc/conversion/LoweringUtils.h"
#include "cc/conversion/Passes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/DialectConversion.h"

#include <cmath>

namespace gpt::conversion {
using namespace mlir;
using namespace mlir::transformer;

namespace {

struct ConstantLowering : OpConversionPattern<ConstantOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ConstantOp op, OpAdaptor, ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOpWithNewOp<arith::ConstantOp>(op, op.getValue());
    return success();
  }
};

/// Binary and unary elementwise ops, described by the scalar function they apply.
template <typename OpTy> struct ElementwiseLowering : OpConversionPattern<OpTy> {
  using OpConversionPattern<OpTy>::OpConversionPattern;
  static Value scalar(OpBuilder &b, Location loc, ValueRange args);

  LogicalResult matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(
        op, buildElementwise(rewriter, op.getLoc(), rankedType(op.getResult()), adaptor.getOperands(), scalar));
    return success();
  }
};

template <> Value ElementwiseLowering<AddOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  return b.create<arith::AddFOp>(loc, args[0], args[1]);
}
template <> Value ElementwiseLowering<MulOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  return b.create<arith::MulFOp>(loc, args[0], args[1]);
}
template <> Value ElementwiseLowering<NegOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  return b.create<arith::NegFOp>(loc, args[0]);
}
template <> Value ElementwiseLowering<ReluOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  return b.create<arith::MaximumFOp>(loc, args[0], f32Constant(b, loc, 0.0));
}
// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
template <> Value ElementwiseLowering<GeluOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  Value x = args[0];
  Value x3 = b.create<arith::MulFOp>(loc, b.create<arith::MulFOp>(loc, x, x), x);
  Value inner = b.create<arith::AddFOp>(loc, x, b.create<arith::MulFOp>(loc, f32Constant(b, loc, 0.044715), x3));
  Value scaled = b.create<arith::MulFOp>(loc, f32Constant(b, loc, std::sqrt(2.0 / M_PI)), inner);
  Value onePlusTanh = b.create<arith::AddFOp>(loc, f32Constant(b, loc, 1.0), b.create<math::TanhOp>(loc, scaled));
  Value halfX = b.create<arith::MulFOp>(loc, f32Constant(b, loc, 0.5), x);
  return b.create<arith::MulFOp>(loc, halfX, onePlusTanh);
}

template <> Value ElementwiseLowering<TanhOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  return b.create<math::TanhOp>(loc, args[0]);
}

// 0.5 * x * (1 + erf(x / sqrt(2))); on vectors, --gpt-approximate-vector-math replaces the erf by
// MLIR's polynomial, on scalars it is libm's erff.
template <> Value ElementwiseLowering<GeluErfOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  Value x = args[0];
  Value scaled = b.create<arith::MulFOp>(loc, f32Constant(b, loc, 1.0 / std::sqrt(2.0)), x);
  Value erf = b.create<math::ErfOp>(loc, scaled);
  Value onePlusErf = b.create<arith::AddFOp>(loc, f32Constant(b, loc, 1.0), erf);
  Value halfX = b.create<arith::MulFOp>(loc, f32Constant(b, loc, 0.5), x);
  return b.create<arith::MulFOp>(loc, halfX, onePlusErf);
}

// condition ? true_value : false_value
template <> Value ElementwiseLowering<WhereOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  return b.create<arith::SelectOp>(loc, args[0], args[1], args[2]);
}

template <> Value ElementwiseLowering<ExpOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  return b.create<math::ExpOp>(loc, args[0]);
}
template <> Value ElementwiseLowering<RsqrtOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  return b.create<math::RsqrtOp>(loc, args[0]);
}
template <> Value ElementwiseLowering<PowOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  return b.create<math::PowFOp>(loc, args[0], args[1]);
}

// x[j] * cos(a) -/+ x[partner] * sin(a), with a = position * theta_i: the partner and i are j +/- half and
// j mod half (rotate-half), or j xor 1 and j / 2 (interleaved pairs). The frequencies theta_i are
// a constant table (RopeOp::getFrequencies, Llama 3's scaling applied) read by index; the angle
// and its cosine/sine are computed in f64: positions reach thousands of radians, where f32 would
// lose the low digits of the angle. The cosines and the signed sines go into a [positions, head size]
// table first, then the rotation reads them: a sin/cos per position and lane instead of one per head
// too (libm's sincos was 5-8% of a 1.7B prefill), and the q and k ropes of a layer share one table
// (the same positions; CSE merges the two).
struct RopeLowering : OpConversionPattern<RopeOp> {
  using OpConversionPattern::OpConversionPattern;

  /// The lane's pair (frequency index), its partner lane, and whether it is the pair's first (the
  /// element whose partner's product is subtracted).
  struct Lane {
    Value first, pair, partner;
  };
  static Lane lane(OpBuilder &b, Location l, Value j, int64_t half, bool interleaved) {
    if (interleaved) {
      Value one = b.create<arith::ConstantIndexOp>(l, 1), two = b.create<arith::ConstantIndexOp>(l, 2);
      Value odd = b.create<arith::RemUIOp>(l, j, two);
      Value first = b.create<arith::CmpIOp>(l, arith::CmpIPredicate::eq, odd, b.create<arith::ConstantIndexOp>(l, 0));
      return {first, b.create<arith::DivUIOp>(l, j, two), b.create<arith::XOrIOp>(l, j, one)};
    }
    Value halfIdx = b.create<arith::ConstantIndexOp>(l, half);
    Value first = b.create<arith::CmpIOp>(l, arith::CmpIPredicate::ult, j, halfIdx);
    Value partner = b.create<arith::SelectOp>(l, first, b.create<arith::AddIOp>(l, j, halfIdx),
                                              b.create<arith::SubIOp>(l, j, halfIdx));
    return {first, b.create<arith::RemUIOp>(l, j, halfIdx), partner};
  }

  /// cos(a) and first ? -sin(a) : sin(a) per (position, lane), as two f32 [positions, head size] tensors
  /// of one generic: a producer of two uses, which elementwise fusion leaves apart from the rotation
  /// (fused, it would compute the sines once per head again).
  static std::pair<Value, Value> buildTable(OpBuilder &b, Location loc, Value positions, Value frequencies,
                                            int64_t tokens, int64_t headDim, bool interleaved) {
    MLIRContext *ctx = b.getContext();
    Value init = emptyTensor(b, loc, {tokens, headDim});
    AffineMap identity = AffineMap::getMultiDimIdentityMap(2, ctx);
    SmallVector<AffineMap> maps = {AffineMap::get(2, 0, getAffineDimExpr(0, ctx)), identity, identity};
    SmallVector<utils::IteratorType> parallel(2, utils::IteratorType::parallel);
    auto table = b.create<linalg::GenericOp>(
        loc, TypeRange{init.getType(), init.getType()}, ValueRange{positions}, ValueRange{init, init}, maps, parallel,
        [&](OpBuilder &nb, Location l, ValueRange a) {
          Lane ln = lane(nb, l, nb.create<linalg::IndexOp>(l, 1), headDim / 2, interleaved);
          Value invFreq = nb.create<tensor::ExtractOp>(l, frequencies, ValueRange{ln.pair});
          Type f64 = nb.getF64Type(), f32 = nb.getF32Type();
          Value angle = nb.create<arith::MulFOp>(l, nb.create<arith::SIToFPOp>(l, f64, a[0]), invFreq);
          Value cos = nb.create<arith::TruncFOp>(l, f32, nb.create<math::CosOp>(l, angle));
          Value sin = nb.create<arith::TruncFOp>(l, f32, nb.create<math::SinOp>(l, angle));
          Value signedSin = nb.create<arith::SelectOp>(l, ln.first, nb.create<arith::NegFOp>(l, sin), sin);
          nb.create<linalg::YieldOp>(l, ValueRange{cos, signedSin});
        });
    return {table.getResult(0), table.getResult(1)};
  }

  LogicalResult matchAndRewrite(RopeOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    RankedTensorType type = rankedType(op.getResult());
    Value x = adaptor.getInput();
    int64_t tokens = type.getDimSize(1), headDim = type.getDimSize(2), half = headDim / 2;
    bool interleaved = op.getInterleaved();
    SmallVector<double> theta = op.getFrequencies(headDim);
    auto tableType = RankedTensorType::get({half}, rewriter.getF64Type());
    Value frequencies = rewriter.create<arith::ConstantOp>(loc, DenseElementsAttr::get(tableType, ArrayRef(theta)));
    auto [cos, signedSin] =
        buildTable(rewriter, loc, adaptor.getPositions(), frequencies, tokens, headDim, interleaved);
    SmallVector<utils::IteratorType> parallel(3, utils::IteratorType::parallel);
    AffineMap identity = AffineMap::getMultiDimIdentityMap(3, ctx);
    AffineMap perPosition = AffineMap::get(3, 0, {getAffineDimExpr(1, ctx), getAffineDimExpr(2, ctx)}, ctx);
    Value result = buildGeneric(rewriter, loc, emptyTensor(rewriter, loc, type.getShape()), {x, cos, signedSin},
                                {identity, perPosition, perPosition}, identity, parallel,
                                [&](OpBuilder &b, Location l, ValueRange a) -> Value {
                                  Value h = b.create<linalg::IndexOp>(l, 0), t = b.create<linalg::IndexOp>(l, 1);
                                  Lane ln = lane(b, l, b.create<linalg::IndexOp>(l, 2), half, interleaved);
                                  Value other = b.create<tensor::ExtractOp>(l, x, ValueRange{h, t, ln.partner});
                                  return b.create<arith::AddFOp>(l, b.create<arith::MulFOp>(l, a[0], a[1]),
                                                                 b.create<arith::MulFOp>(l, other, a[2]));
                                });
    rewriter.replaceOp(op, result);
    return success();
  }
};

// silu(gate) * up = gate * up / (1 + exp(-gate)): one exp and one division, and for a very negative
// gate exp overflows to +inf and the product goes to -0 as silu does (no inf * 0).
template <> Value ElementwiseLowering<SwigluOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  Value gate = args[0];
  Value denominator = b.create<arith::AddFOp>(loc, f32Constant(b, loc, 1.0),
                                              b.create<math::ExpOp>(loc, b.create<arith::NegFOp>(loc, gate)));
  return b.create<arith::DivFOp>(loc, b.create<arith::MulFOp>(loc, gate, args[1]), denominator);
}

// x / (1 + exp(-x)): for a very negative x exp overflows to +inf and the quotient is -0, as
// silu's limit (no inf * 0).
template <> Value ElementwiseLowering<SiluOp>::scalar(OpBuilder &b, Location loc, ValueRange args) {
  Value denominator = b.create<arith::AddFOp>(loc, f32Constant(b, loc, 1.0),
                                              b.create<math::ExpOp>(loc, b.create<arith::NegFOp>(loc, args[0])));
  return b.create<arith::DivFOp>(loc, args[0], denominator);
}

} // namespace

void populateElementwiseLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<ConstantLowering, ElementwiseLowering<AddOp>, ElementwiseLowering<MulOp>, ElementwiseLowering<NegOp>,
               ElementwiseLowering<ReluOp>, ElementwiseLowering<GeluOp>, ElementwiseLowering<GeluErfOp>,
               ElementwiseLowering<TanhOp>, ElementwiseLowering<WhereOp>, ElementwiseLowering<ExpOp>,
               ElementwiseLowering<RsqrtOp>, ElementwiseLowering<PowOp>, ElementwiseLowering<SwigluOp>,
               ElementwiseLowering<SiluOp>, RopeLowering>(patterns.getContext());
}

} // namespace gpt::conversion
