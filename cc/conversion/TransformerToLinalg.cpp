// --transformer-to-linalg: lowers every transformer op to linalg/tensor/arith/math on tensors.
#include "cc/dialect/TransformerDialect.h"
#include "cc/conversion/Passes.h"
#include "cc/TargetParameters.h"
#include "cc/codegen/CodegenAttributes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/Transforms/DialectConversion.h"

#include <cmath>

namespace gpt::conversion {
using namespace mlir;
using namespace mlir::transformer;

#define GEN_PASS_DEF_TRANSFORMERTOLINALG
#include "cc/conversion/Passes.h.inc"

namespace {

using BodyBuilder = llvm::function_ref<Value(OpBuilder &, Location, ValueRange)>;

Value f32Constant(OpBuilder &b, Location loc, double value) {
  return b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(static_cast<float>(value)));
}

Value emptyTensor(OpBuilder &b, Location loc, ArrayRef<int64_t> shape) {
  return b.create<tensor::EmptyOp>(loc, shape, b.getF32Type());
}

/// A new f32 tensor of `shape` filled with `value` (the initial value of a reduction).
Value filled(OpBuilder &b, Location loc, ArrayRef<int64_t> shape, double value = 0.0) {
  return b.create<linalg::FillOp>(loc, f32Constant(b, loc, value), emptyTensor(b, loc, shape)).getResult(0);
}

/// Map from the iteration space of a rank-`rank` result to an operand of shape `shape` under
/// numpy broadcasting: missing leading dims are dropped, size-1 dims read index 0.
AffineMap broadcastMap(ArrayRef<int64_t> shape, ArrayRef<int64_t> resultShape, MLIRContext *ctx) {
  int64_t rank = resultShape.size(), offset = rank - shape.size();
  SmallVector<AffineExpr> exprs;
  for (auto [i, size] : llvm::enumerate(shape)) {
    bool broadcast = size == 1 && resultShape[offset + i] != 1;
    exprs.push_back(broadcast ? getAffineConstantExpr(0, ctx) : getAffineDimExpr(offset + i, ctx));
  }
  return AffineMap::get(rank, 0, exprs, ctx);
}

/// Map from a rank-`rank` iteration space to its first `rank - 1` dims (one value per row).
AffineMap rowMap(int64_t rank, MLIRContext *ctx) {
  return AffineMap::getMultiDimIdentityMap(rank, ctx).getMajorSubMap(rank - 1);
}

/// Map from a rank-`rank` iteration space to its last dim (a per-feature vector).
AffineMap featureMap(int64_t rank, MLIRContext *ctx) {
  return AffineMap::get(rank, 0, getAffineDimExpr(rank - 1, ctx));
}

/// A linalg.generic over the iteration space of `shape`; `body` gets the input elements and
/// the current output element and returns the new output element.
Value buildGeneric(OpBuilder &b, Location loc, Value init, ValueRange inputs, ArrayRef<AffineMap> inputMaps,
                   AffineMap outputMap, ArrayRef<utils::IteratorType> iterators, BodyBuilder body) {
  SmallVector<AffineMap> maps(inputMaps);
  maps.push_back(outputMap);
  auto generic = b.create<linalg::GenericOp>(
      loc, init.getType(), inputs, ValueRange{init}, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        nb.create<linalg::YieldOp>(nloc, body(nb, nloc, args));
      });
  return generic.getResult(0);
}

/// Elementwise generic producing `resultType` from broadcast-compatible `inputs`.
Value buildElementwise(OpBuilder &b, Location loc, RankedTensorType resultType, ValueRange inputs, BodyBuilder body) {
  MLIRContext *ctx = b.getContext();
  SmallVector<AffineMap> maps;
  for (Value input : inputs)
    maps.push_back(broadcastMap(cast<RankedTensorType>(input.getType()).getShape(), resultType.getShape(), ctx));
  SmallVector<utils::IteratorType> iterators(resultType.getRank(), utils::IteratorType::parallel);
  return buildGeneric(b, loc, emptyTensor(b, loc, resultType.getShape()), inputs, maps,
                      AffineMap::getMultiDimIdentityMap(resultType.getRank(), ctx), iterators, body);
}

/// Reduces the last dim of `inputs[0]`'s shape: `inputs` are read through `inputMaps`, the
/// accumulator starts at `initValue`; `body(args)` gets the input elements then the accumulator.
Value buildRowReduction(OpBuilder &b, Location loc, ArrayRef<int64_t> shape, ValueRange inputs,
                        ArrayRef<AffineMap> inputMaps, double initValue, BodyBuilder body) {
  int64_t rank = shape.size();
  Value init = filled(b, loc, shape.drop_back(), initValue);
  SmallVector<utils::IteratorType> iterators(rank, utils::IteratorType::parallel);
  iterators.back() = utils::IteratorType::reduction;
  return buildGeneric(b, loc, init, inputs, inputMaps, rowMap(rank, b.getContext()), iterators, body);
}

RankedTensorType rankedType(Value v) { return cast<RankedTensorType>(v.getType()); }

//===----------------------------------------------------------------------===//
// Patterns
//===----------------------------------------------------------------------===//

struct ConstantLowering : OpConversionPattern<ConstantOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ConstantOp op, OpAdaptor, ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOpWithNewOp<arith::ConstantOp>(op, op.getValue());
    return success();
  }
};

/// Binary and unary elementwise ops, described by the scalar function they apply.
template <typename OpTy>
struct ElementwiseLowering : OpConversionPattern<OpTy> {
  using OpConversionPattern<OpTy>::OpConversionPattern;
  static Value scalar(OpBuilder &b, Location loc, ValueRange args);

  LogicalResult matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, buildElementwise(rewriter, op.getLoc(), rankedType(op.getResult()),
                                            adaptor.getOperands(), scalar));
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

struct TransposeLowering : OpConversionPattern<TransposeOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(TransposeOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    RankedTensorType type = rankedType(op.getResult());
    SmallVector<int64_t> permutation = llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()));
    std::swap(permutation[type.getRank() - 1], permutation[type.getRank() - 2]);
    Value init = emptyTensor(rewriter, op.getLoc(), type.getShape());
    auto transpose = rewriter.create<linalg::TransposeOp>(op.getLoc(), adaptor.getInput(), init, permutation);
    rewriter.replaceOp(op, transpose.getResult());
    return success();
  }
};

/// Reassociation grouping dims [0, n) into one and keeping every later dim of a rank-`rank` tensor.
SmallVector<ReassociationIndices> collapseLeading(int64_t n, int64_t rank) {
  SmallVector<ReassociationIndices> groups(1);
  for (int64_t i = 0; i < n; ++i) groups[0].push_back(i);
  for (int64_t i = n; i < rank; ++i) groups.push_back({i});
  return groups;
}

Value collapse(OpBuilder &b, Location loc, Value v, int64_t n) {
  return b.create<tensor::CollapseShapeOp>(loc, v, collapseLeading(n, rankedType(v).getRank()));
}

struct MatmulLowering : OpConversionPattern<MatmulOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(MatmulOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType resultType = rankedType(op.getResult());
    int64_t rank = resultType.getRank();
    Value lhs = adaptor.getLhs(), rhs = adaptor.getRhs();

    Value product;
    if (rankedType(rhs).getRank() == 2) {
      // A weight shared by every batch: fold the batch dims into M and run one 2-D matmul.
      if (rank > 2) lhs = collapse(rewriter, loc, lhs, rank - 1);
      int64_t m = rankedType(lhs).getDimSize(0), n = resultType.getShape().back();
      product = rewriter.create<linalg::MatmulOp>(loc, ValueRange{lhs, rhs}, ValueRange{filled(rewriter, loc, {m, n})}).getResult(0);
    } else {
      // Same batch dims on both sides: fold them into one and run a batch matmul.
      if (rank > 3) {
        lhs = collapse(rewriter, loc, lhs, rank - 2);
        rhs = collapse(rewriter, loc, rhs, rank - 2);
      }
      auto l = rankedType(lhs);
      SmallVector<int64_t> shape = {l.getDimSize(0), l.getDimSize(1), resultType.getShape().back()};
      product = rewriter.create<linalg::BatchMatmulOp>(loc, ValueRange{lhs, rhs}, ValueRange{filled(rewriter, loc, shape)}).getResult(0);
    }
    if (rankedType(product) != resultType) {
      int64_t folded = rankedType(rhs).getRank() == 2 ? rank - 1 : rank - 2;
      product = rewriter.create<tensor::ExpandShapeOp>(loc, resultType, product, collapseLeading(folded, rank));
    }
    rewriter.replaceOp(op, product);
    return success();
  }
};

/// [M, K] x [N/P, K, P] as one linalg.generic over (m, panel, column, k) that writes [M, N/P, P]:
/// a register tile of one panel's P columns reads the weight from consecutive addresses. The
/// result is then viewed (collapse_shape, no copy) as [M, N].
struct PackedMatmulLowering : OpConversionPattern<PackedMatmulOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(PackedMatmulOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    RankedTensorType resultType = rankedType(op.getResult());
    int64_t rank = resultType.getRank();
    Value lhs = adaptor.getLhs();
    if (rank > 2) lhs = collapse(rewriter, loc, lhs, rank - 1);
    ArrayRef<int64_t> packed = rankedType(adaptor.getRhs()).getShape();
    int64_t m = rankedType(lhs).getDimSize(0);

    Value init = filled(rewriter, loc, {m, packed[0], packed[2]});
    AffineExpr mDim, panel, column, k;
    bindDims(ctx, mDim, panel, column, k);
    SmallVector<AffineMap> inputMaps = {AffineMap::get(4, 0, {mDim, k}, ctx),
                                        AffineMap::get(4, 0, {panel, k, column}, ctx)};
    using utils::IteratorType;
    SmallVector<IteratorType> iterators = {IteratorType::parallel, IteratorType::parallel, IteratorType::parallel,
                                           IteratorType::reduction};
    Value panels = buildGeneric(rewriter, loc, init, {lhs, adaptor.getRhs()}, inputMaps,
                                AffineMap::get(4, 0, {mDim, panel, column}, ctx), iterators,
                                [](OpBuilder &b, Location l, ValueRange args) -> Value {
                                  Value product = b.create<arith::MulFOp>(l, args[0], args[1]);
                                  return b.create<arith::AddFOp>(l, args[2], product);
                                });
    gpt::codegen::markPackedMatmul(panels.getDefiningOp());
    Value product = rewriter.create<tensor::CollapseShapeOp>(loc, panels, SmallVector<ReassociationIndices>{{0}, {1, 2}});
    if (rank > 2)
      product = rewriter.create<tensor::ExpandShapeOp>(loc, resultType, product, collapseLeading(rank - 1, rank));
    rewriter.replaceOp(op, product);
    return success();
  }
};

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

    Value sum = buildRowReduction(rewriter, loc, type.getShape(), {x}, {identity}, 0.0,
                                  [](OpBuilder &b, Location l, ValueRange a) -> Value {
                                    return b.create<arith::AddFOp>(l, a[0], a[1]);
                                  });
    Value squares = buildRowReduction(
        rewriter, loc, type.getShape(), {x, sum}, {identity, row}, 0.0,
        [&](OpBuilder &b, Location l, ValueRange a) -> Value {
          Value mean = b.create<arith::MulFOp>(l, a[1], f32Constant(b, l, invN));
          Value centered = b.create<arith::SubFOp>(l, a[0], mean);
          return b.create<arith::AddFOp>(l, a[2], b.create<arith::MulFOp>(l, centered, centered));
        });
    float epsilon = op.getEpsilon().convertToFloat();
    SmallVector<utils::IteratorType> parallel(rank, utils::IteratorType::parallel);
    Value normalized = buildGeneric(
        rewriter, loc, emptyTensor(rewriter, loc, type.getShape()),
        {x, sum, squares, adaptor.getWeight(), adaptor.getBias()},
        {identity, row, row, featureMap(rank, ctx), featureMap(rank, ctx)}, identity, parallel,
        [&](OpBuilder &b, Location l, ValueRange a) -> Value {
          Value scale = f32Constant(b, l, invN);
          Value mean = b.create<arith::MulFOp>(l, a[1], scale);
          Value variance = b.create<arith::MulFOp>(l, a[2], scale);
          Value rstd = b.create<math::RsqrtOp>(l, b.create<arith::AddFOp>(l, variance, f32Constant(b, l, epsilon)));
          Value centered = b.create<arith::SubFOp>(l, a[0], mean);
          Value scaled = b.create<arith::MulFOp>(l, b.create<arith::MulFOp>(l, centered, rstd), a[3]);
          return b.create<arith::AddFOp>(l, scaled, a[4]);
        });
    rewriter.replaceOp(op, normalized);
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

    Value max = buildRowReduction(rewriter, loc, type.getShape(), {x}, {identity},
                                  -std::numeric_limits<double>::infinity(),
                                  [](OpBuilder &b, Location l, ValueRange a) -> Value {
                                    return b.create<arith::MaximumFOp>(l, a[0], a[1]);
                                  });
    Value sum = buildRowReduction(rewriter, loc, type.getShape(), {x, max}, {identity, row}, 0.0,
                                  [](OpBuilder &b, Location l, ValueRange a) -> Value {
                                    Value e = b.create<math::ExpOp>(l, b.create<arith::SubFOp>(l, a[0], a[1]));
                                    return b.create<arith::AddFOp>(l, a[2], e);
                                  });
    SmallVector<utils::IteratorType> parallel(rank, utils::IteratorType::parallel);
    Value result = buildGeneric(rewriter, loc, emptyTensor(rewriter, loc, type.getShape()), {x, max, sum},
                                {identity, row, row}, identity, parallel,
                                [](OpBuilder &b, Location l, ValueRange a) -> Value {
                                  Value e = b.create<math::ExpOp>(l, b.create<arith::SubFOp>(l, a[0], a[1]));
                                  return b.create<arith::DivFOp>(l, e, a[2]);
                                });
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct EmbeddingLowering : OpConversionPattern<EmbeddingOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(EmbeddingOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    RankedTensorType type = rankedType(op.getResult());
    Value table = adaptor.getTable();
    int64_t vocab = rankedType(table).getDimSize(0);
    SmallVector<utils::IteratorType> parallel(2, utils::IteratorType::parallel);
    Value result = buildGeneric(
        rewriter, loc, emptyTensor(rewriter, loc, type.getShape()), {adaptor.getIds()},
        {AffineMap::get(2, 0, getAffineDimExpr(0, ctx))}, AffineMap::getMultiDimIdentityMap(2, ctx), parallel,
        [&](OpBuilder &b, Location l, ValueRange a) -> Value {
          // Clamp the id so that a bad id can never read outside the table; callers validate ids.
          Value id = b.create<arith::IndexCastOp>(l, b.getIndexType(), a[0]);
          id = b.create<arith::MaxSIOp>(l, id, b.create<arith::ConstantIndexOp>(l, 0));
          id = b.create<arith::MinSIOp>(l, id, b.create<arith::ConstantIndexOp>(l, vocab - 1));
          Value feature = b.create<linalg::IndexOp>(l, 1);
          return b.create<tensor::ExtractOp>(l, table, ValueRange{id, feature});
        });
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct SliceLowering : OpConversionPattern<SliceOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(SliceOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    RankedTensorType type = rankedType(op.getResult());
    int64_t rank = type.getRank();
    SmallVector<OpFoldResult> offsets(rank, rewriter.getIndexAttr(0)), strides(rank, rewriter.getIndexAttr(1));
    offsets.back() = rewriter.getIndexAttr(op.getOffset());
    SmallVector<OpFoldResult> sizes = llvm::map_to_vector(type.getShape(), [&](int64_t d) -> OpFoldResult {
      return rewriter.getIndexAttr(d);
    });
    rewriter.replaceOpWithNewOp<tensor::ExtractSliceOp>(op, type, adaptor.getInput(), offsets, sizes, strides);
    return success();
  }
};

Value transpose(OpBuilder &b, Location loc, Value input, ArrayRef<int64_t> permutation) {
  ArrayRef<int64_t> in = rankedType(input).getShape();
  SmallVector<int64_t> shape = llvm::map_to_vector(permutation, [&](int64_t p) { return in[p]; });
  return b.create<linalg::TransposeOp>(loc, input, emptyTensor(b, loc, shape), permutation).getResult()[0];
}

/// The [T, H, d] tensor that `value` is the [1, 0, 2] transpose of (the transpose split_heads
/// lowers to, and merge_heads undoes), or null.
Value headTransposeSource(Value value) {
  auto transpose = value.getDefiningOp<linalg::TransposeOp>();
  if (!transpose || transpose.getPermutation() != ArrayRef<int64_t>{1, 0, 2}) return nullptr;
  return transpose.getInput();
}

// [T, H*d] -> expand to [T, H, d] -> transpose to [H, T, d].
struct SplitHeadsLowering : OpConversionPattern<SplitHeadsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(SplitHeadsOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    ArrayRef<int64_t> out = rankedType(op.getResult()).getShape();
    auto expandedType = RankedTensorType::get({out[1], out[0], out[2]}, rewriter.getF32Type());
    Value expanded = rewriter.create<tensor::ExpandShapeOp>(loc, expandedType, adaptor.getInput(),
                                                            SmallVector<ReassociationIndices>{{0}, {1, 2}});
    rewriter.replaceOp(op, transpose(rewriter, loc, expanded, {1, 0, 2}));
    return success();
  }
};

// [H, T, d] -> transpose to [T, H, d] -> collapse to [T, H*d].
struct MergeHeadsLowering : OpConversionPattern<MergeHeadsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(MergeHeadsOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    // Attention that wrote its result token-major hands on a transpose of it: undo that instead.
    Value transposed = headTransposeSource(adaptor.getInput());
    if (!transposed) transposed = transpose(rewriter, op.getLoc(), adaptor.getInput(), {1, 0, 2});
    rewriter.replaceOpWithNewOp<tensor::CollapseShapeOp>(op, transposed, SmallVector<ReassociationIndices>{{0}, {1, 2}});
    return success();
  }
};

// x[j] * cos(a) -/+ x[j +/- half] * sin(a), with a = position * base^(-2 (j mod half) / d). The
// angle and its cosine/sine are computed in f64: positions reach thousands of radians, where f32
// would lose the low digits of the angle.
struct RopeLowering : OpConversionPattern<RopeOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(RopeOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    RankedTensorType type = rankedType(op.getResult());
    Value x = adaptor.getInput();
    int64_t headDim = type.getDimSize(2), half = headDim / 2;
    double logBase = std::log(static_cast<double>(op.getBase().convertToFloat()));
    SmallVector<utils::IteratorType> parallel(3, utils::IteratorType::parallel);
    AffineMap identity = AffineMap::getMultiDimIdentityMap(3, ctx);
    Value result = buildGeneric(
        rewriter, loc, emptyTensor(rewriter, loc, type.getShape()), {x, adaptor.getPositions()},
        {identity, AffineMap::get(3, 0, getAffineDimExpr(1, ctx))}, identity, parallel,
        [&](OpBuilder &b, Location l, ValueRange a) -> Value {
          Value h = b.create<linalg::IndexOp>(l, 0), t = b.create<linalg::IndexOp>(l, 1);
          Value j = b.create<linalg::IndexOp>(l, 2);
          Value halfIdx = b.create<arith::ConstantIndexOp>(l, half);
          Value firstHalf = b.create<arith::CmpIOp>(l, arith::CmpIPredicate::ult, j, halfIdx);
          Value pair = b.create<arith::RemUIOp>(l, j, halfIdx);  // frequency index j mod half
          Value partner = b.create<arith::SelectOp>(l, firstHalf, b.create<arith::AddIOp>(l, j, halfIdx),
                                                    b.create<arith::SubIOp>(l, j, halfIdx));
          Value other = b.create<tensor::ExtractOp>(l, x, ValueRange{h, t, partner});

          Type f64 = b.getF64Type();
          Value pairF = b.create<arith::UIToFPOp>(l, f64, b.create<arith::IndexCastUIOp>(l, b.getI64Type(), pair));
          Value exponent = b.create<arith::MulFOp>(
              l, pairF, b.create<arith::ConstantOp>(l, b.getF64FloatAttr(-2.0 * logBase / headDim)));
          Value invFreq = b.create<math::ExpOp>(l, exponent);
          Value angle = b.create<arith::MulFOp>(l, b.create<arith::SIToFPOp>(l, f64, a[1]), invFreq);
          Value cos = b.create<arith::TruncFOp>(l, b.getF32Type(), b.create<math::CosOp>(l, angle));
          Value sin = b.create<arith::TruncFOp>(l, b.getF32Type(), b.create<math::SinOp>(l, angle));
          Value rotated = b.create<arith::MulFOp>(l, other, sin);
          rotated = b.create<arith::SelectOp>(l, firstHalf, b.create<arith::NegFOp>(l, rotated), rotated);
          return b.create<arith::AddFOp>(l, b.create<arith::MulFOp>(l, a[0], cos), rotated);
        });
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// The largest of 32, 16, 8, 4, 2, 1 that divides `n`: the block size of an attention loop.
int64_t blockSize(int64_t n) {
  int64_t block = 32;
  while (n % block != 0) block /= 2;
  return block;
}

/// A region of `heads` heads from `head` by `rows` rows from `row` (every one of `cols` columns)
/// of a [H, N, cols] tensor, or of a token-major [N, H, cols] one: the first two dims swapped.
struct HeadRegion {
  SmallVector<OpFoldResult> offsets, sizes, strides;
  SmallVector<int64_t> shape;  // static sizes

  HeadRegion(OpBuilder &b, bool tokenMajor, OpFoldResult head, int64_t heads, OpFoldResult row, int64_t rows,
             int64_t cols)
      : offsets{head, row, b.getIndexAttr(0)}, strides(3, b.getIndexAttr(1)), shape{heads, rows, cols} {
    if (tokenMajor) {
      std::swap(offsets[0], offsets[1]);
      std::swap(shape[0], shape[1]);
    }
    sizes = getAsIndexOpFoldResult(b.getContext(), shape);
  }
};

/// An attention operand, logically [H, N, cols]. When it is split_heads' transpose of a
/// token-major [N, H, cols] tensor, its rows are read from that tensor in place: each head's row
/// is `cols` contiguous floats there too, and the transpose, left without users, never runs.
struct HeadRows {
  Value tensor;
  bool tokenMajor;

  explicit HeadRows(Value operand) : tensor(headTransposeSource(operand)), tokenMajor(tensor != nullptr) {
    if (!tensor) tensor = operand;
  }

  /// Rows row .. row + rows - 1 of head `head`, as a [rows, cols] tensor.
  Value slice(OpBuilder &b, Location loc, Value head, Value row, int64_t rows) const {
    int64_t cols = rankedType(tensor).getDimSize(2);
    HeadRegion region(b, tokenMajor, head, 1, row, rows, cols);
    auto type = RankedTensorType::get({rows, cols}, b.getF32Type());
    return b.create<tensor::ExtractSliceOp>(loc, type, tensor, region.offsets, region.sizes, region.strides);
  }
};

/// Fused causal attention, flash-attention style: for each head and each block of Bq queries,
/// a loop over blocks of Bk keys keeps a running row max `m`, row sum `l` and output `acc`
/// (online softmax), so no [Tq, Tk] score matrix exists, only one [Bq, Bk] tile at a time.
/// The key loop stops at the last key any query of the block may see (key j is visible from
/// query i when j <= offset + i): blocks the causal mask removes entirely are never visited,
/// and a decode step (one query at `offset`) reads the cache only up to its own position.
///
/// Per key block: s = q_blk . k_blk^T (a linalg.matmul by the transposed block, or for one
/// query a row reduction: a dot product per key), masked and scaled;
/// m' = max(m, rowmax(s)); p = exp(s - m'); c = exp(m - m'); l' = c l + rowsum(p);
/// acc' = c acc + p . v_blk. After the loop the block's output is acc / l.
struct CausalAttentionLowering : OpConversionPattern<CausalAttentionOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(CausalAttentionOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    Value q = adaptor.getQuery(), k = adaptor.getKey(), v = adaptor.getValue();
    HeadRows queryRows(q), keyRows(k), valueRows(v);
    // The result goes straight to merge_heads (the usual case): write it token-major, [Tq, H, dv],
    // which merge_heads then only collapses, instead of head-major for merge_heads to transpose.
    bool tokenMajorResult = op->hasOneUse() && isa<MergeHeadsOp>(*op->user_begin());
    int64_t heads = rankedType(q).getDimSize(0), queries = rankedType(q).getDimSize(1);
    int64_t keys = rankedType(k).getDimSize(1), valueSize = rankedType(v).getDimSize(2);
    int64_t bq = blockSize(queries), bk = blockSize(keys);
    Value offset = adaptor.getQueryOffset() ? adaptor.getQueryOffset()
                                            : rewriter.create<arith::ConstantIndexOp>(loc, 0).getResult();
    float scale = op.getScale().convertToFloat();
    const double negInf = -std::numeric_limits<double>::infinity();
    auto index = [&](OpBuilder &b, int64_t value) { return b.create<arith::ConstantIndexOp>(loc, value).getResult(); };

    AffineMap id2 = AffineMap::getMultiDimIdentityMap(2, ctx), row2 = rowMap(2, ctx);
    AffineMap id1 = AffineMap::getMultiDimIdentityMap(1, ctx);
    SmallVector<utils::IteratorType> parallel2(2, utils::IteratorType::parallel);
    SmallVector<utils::IteratorType> parallel1(1, utils::IteratorType::parallel);

    // One key block of one query block: (m, l, acc) -> (m', l', acc').
    auto keyBlock = [&](OpBuilder &b, Value head, Value queryStart, Value keyStart, Value qBlock,
                        ValueRange state) -> SmallVector<Value> {
      Value m = state[0], l = state[1], acc = state[2];
      Value kBlock = keyRows.slice(b, loc, head, keyStart, bk), vBlock = valueRows.slice(b, loc, head, keyStart, bk);
      // A block of several queries multiplies by k_blk^T copied out once: the register tiles
      // then read it row by row, where reading k_blk itself column by column gathers 32 scalars
      // per vector, again for every tile of queries. One query (decode) takes one dot product
      // per cached key instead, s[j] = sum_d k[j, d] q[d]: a row reduction over the head
      // dimension that streams each key row once, with partial sums in a vector across d.
      Value scores;
      AffineMap scoresMap = id2;
      if (bq == 1) {
        int64_t headDim = rankedType(k).getDimSize(2);
        auto f32 = b.getF32Type();
        Value qRow = b.create<tensor::CollapseShapeOp>(loc, RankedTensorType::get({headDim}, f32), qBlock,
                                                       SmallVector<ReassociationIndices>{{0, 1}});
        Value dots = buildRowReduction(b, loc, {bk, headDim}, {kBlock, qRow},
                                       {id2, AffineMap::get(2, 0, getAffineDimExpr(1, ctx))}, 0.0,
                                       [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                         return nb.create<arith::AddFOp>(l, a[2], nb.create<arith::MulFOp>(l, a[0], a[1]));
                                       });
        // Read as [1, bk] through the consumer's indexing map: an expand_shape here would be
        // propagated into the reduction, which then no longer looks like a row reduction.
        scores = dots;
        scoresMap = AffineMap::get(2, 0, getAffineDimExpr(1, ctx));
      } else {
        scores = b.create<linalg::MatmulOp>(loc, ValueRange{qBlock, transpose(b, loc, kBlock, {1, 0})},
                                            ValueRange{filled(b, loc, {bq, bk})})
                     .getResult(0);
      }
      // True where key keyStart + j is visible from query queryStart + i.
      auto visible = [&](OpBuilder &nb, Location l) -> Value {
        Value i = nb.create<arith::AddIOp>(l, queryStart, nb.create<linalg::IndexOp>(l, 0));
        Value j = nb.create<arith::AddIOp>(l, keyStart, nb.create<linalg::IndexOp>(l, 1));
        return nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::ule, j, nb.create<arith::AddIOp>(l, i, offset));
      };
      Value masked = buildGeneric(b, loc, emptyTensor(b, loc, {bq, bk}), {scores}, {scoresMap}, id2, parallel2,
                                  [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                    Value scaled = nb.create<arith::MulFOp>(l, a[0], f32Constant(nb, l, scale));
                                    return nb.create<arith::SelectOp>(l, visible(nb, l), scaled,
                                                                      f32Constant(nb, l, negInf));
                                  });
      Value blockMax = buildRowReduction(b, loc, {bq, bk}, {masked}, {id2}, negInf,
                                         [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                           return nb.create<arith::MaximumFOp>(l, a[0], a[1]);
                                         });
      // The rescale of the old state, exp(m - max(m, blockMax)); 0 before the first visible key.
      Value correction = buildGeneric(b, loc, emptyTensor(b, loc, {bq}), {m, blockMax}, {id1, id1}, id1, parallel1,
                                      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                        Value newMax = nb.create<arith::MaximumFOp>(l, a[0], a[1]);
                                        Value unset = nb.create<arith::CmpFOp>(l, arith::CmpFPredicate::OEQ, a[0],
                                                                               f32Constant(nb, l, negInf));
                                        Value e = nb.create<math::ExpOp>(l, nb.create<arith::SubFOp>(l, a[0], newMax));
                                        return nb.create<arith::SelectOp>(l, unset, f32Constant(nb, l, 0.0), e);
                                      });
      // The running state is updated in place (destination = the loop-carried tensor), so its
      // buffers carry over from one key block to the next instead of being allocated anew:
      // m' = max(m, blockMax) over m, after `correction` has read m.
      Value newMax = buildGeneric(b, loc, m, {blockMax}, {id1}, id1, parallel1,
                                  [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                    return nb.create<arith::MaximumFOp>(l, a[1], a[0]);
                                  });
      // exp(s - m') for visible keys, exactly 0 for masked ones (never exp of -inf).
      Value probs = buildGeneric(b, loc, emptyTensor(b, loc, {bq, bk}), {masked, newMax}, {id2, row2}, id2, parallel2,
                                 [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                   Value e = nb.create<math::ExpOp>(l, nb.create<arith::SubFOp>(l, a[0], a[1]));
                                   return nb.create<arith::SelectOp>(l, visible(nb, l), e, f32Constant(nb, l, 0.0));
                                 });
      Value blockSum = buildRowReduction(b, loc, {bq, bk}, {probs}, {id2}, 0.0,
                                         [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                           return nb.create<arith::AddFOp>(l, a[0], a[1]);
                                         });
      // l' = c l + rowsum(p), over l.
      Value newSum = buildGeneric(b, loc, l, {correction, blockSum}, {id1, id1}, id1, parallel1,
                                  [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                    return nb.create<arith::AddFOp>(l, nb.create<arith::MulFOp>(l, a[2], a[0]), a[1]);
                                  });
      Value update = b.create<linalg::MatmulOp>(loc, ValueRange{probs, vBlock},
                                                ValueRange{filled(b, loc, {bq, valueSize})})
                         .getResult(0);
      // acc' = c acc + p . v, over acc.
      Value newAcc = buildGeneric(b, loc, acc, {correction, update}, {row2, id2}, id2, parallel2,
                                  [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                    return nb.create<arith::AddFOp>(l, nb.create<arith::MulFOp>(l, a[2], a[0]), a[1]);
                                  });
      return {newMax, newSum, newAcc};
    };

    // One query block: the key loop, then acc / l written into the output.
    auto queryBlock = [&](OpBuilder &b, Value head, Value localHead, Value queryStart, Value out) -> Value {
      Value qBlock = queryRows.slice(b, loc, head, queryStart, bq);
      // Keys [0, end) with end = min(offset + queryStart + bq, keys): the last query of the block
      // sees up to offset + queryStart + bq - 1. Rounded up to whole key blocks.
      Value end = b.create<arith::MinUIOp>(
          loc, b.create<arith::AddIOp>(loc, b.create<arith::AddIOp>(loc, offset, queryStart), index(b, bq)),
          index(b, keys));
      // (arith.ceildivui would need arith-expand before the LLVM lowering.)
      Value keyBlocks = b.create<arith::DivUIOp>(loc, b.create<arith::AddIOp>(loc, end, index(b, bk - 1)), index(b, bk));
      Value keyEnd = b.create<arith::MulIOp>(loc, keyBlocks, index(b, bk));
      SmallVector<Value> init = {filled(b, loc, {bq}, negInf), filled(b, loc, {bq}),
                                 filled(b, loc, {bq, valueSize})};
      auto keyLoop = b.create<scf::ForOp>(
          loc, index(b, 0), keyEnd, index(b, bk), init,
          [&](OpBuilder &nb, Location, Value keyStart, ValueRange state) {
            nb.create<scf::YieldOp>(loc, keyBlock(nb, head, queryStart, keyStart, qBlock, state));
          });
      Value sum = keyLoop.getResult(1), acc = keyLoop.getResult(2);
      Value normalized = buildGeneric(b, loc, emptyTensor(b, loc, {bq, valueSize}), {acc, sum}, {id2, row2}, id2,
                                      parallel2, [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                        return nb.create<arith::DivFOp>(l, a[0], a[1]);
                                      });
      // `out` is this iteration's [headsPerIteration, Tq, dv] slice of the result (token-major:
      // [Tq, headsPerIteration, dv]); `localHead` the head's index in it.
      HeadRegion region(b, tokenMajorResult, localHead, 1, queryStart, bq, valueSize);
      return b.create<tensor::InsertSliceOp>(loc, normalized, out, region.offsets, region.sizes, region.strides);
    };

    // Heads are independent: an scf.forall, which becomes an OpenMP loop when the pipeline has
    // threads (else a plain loop). Each iteration owns its head's [Tq, dv] slice of the output.
    // Attention too small to pay for a fork and join (a decode step of a small model) runs its
    // heads in one scf.forall iteration, i.e. on one thread.
    int64_t work = heads * queries * keys * rankedType(q).getDimSize(2);
    int64_t headsPerIteration = work < gpt::target::kMinParallelWork ? heads : 1;
    SmallVector<int64_t> outShape = {heads, queries, valueSize};
    if (tokenMajorResult) std::swap(outShape[0], outShape[1]);
    Value out = emptyTensor(rewriter, loc, outShape);
    auto headLoop = rewriter.create<scf::ForallOp>(
        loc, ArrayRef<OpFoldResult>{rewriter.getIndexAttr(heads / headsPerIteration)}, ValueRange{out}, std::nullopt,
        [&](OpBuilder &b, Location, ValueRange args) {
          Value firstHead = b.create<arith::MulIOp>(loc, args[0], index(b, headsPerIteration)), shared = args[1];
          HeadRegion region(b, tokenMajorResult, firstHead, headsPerIteration, b.getIndexAttr(0), queries, valueSize);
          auto headsType = RankedTensorType::get(region.shape, b.getF32Type());
          Value headsOut =
              b.create<tensor::ExtractSliceOp>(loc, headsType, shared, region.offsets, region.sizes, region.strides);
          auto headsLoop = b.create<scf::ForOp>(
              loc, index(b, 0), index(b, headsPerIteration), index(b, 1), ValueRange{headsOut},
              [&](OpBuilder &hb, Location, Value local, ValueRange headState) {
                Value head = hb.create<arith::AddIOp>(loc, firstHead, local);
                auto queryLoop = hb.create<scf::ForOp>(
                    loc, index(hb, 0), index(hb, queries), index(hb, bq), headState,
                    [&](OpBuilder &nb, Location, Value queryStart, ValueRange queryState) {
                      nb.create<scf::YieldOp>(loc, queryBlock(nb, head, local, queryStart, queryState[0]));
                    });
                hb.create<scf::YieldOp>(loc, queryLoop.getResults());
              });
          auto terminator = b.create<scf::InParallelOp>(loc);
          b.setInsertionPointToStart(terminator.getBody());
          b.create<tensor::ParallelInsertSliceOp>(loc, headsLoop.getResult(0), shared, region.offsets, region.sizes,
                                                  region.strides);
        });
    // A token-major result is handed on as its [H, Tq, dv] transpose, which merge_heads undoes
    // (see MergeHeadsLowering): neither transpose runs.
    Value result = headLoop.getResult(0);
    rewriter.replaceOp(op, tokenMajorResult ? transpose(rewriter, loc, result, {1, 0, 2}) : result);
    return success();
  }
};

// update -> cache[:, offset : offset + T, :], as one insert_slice (in place after bufferization).
struct CacheUpdateLowering : OpConversionPattern<CacheUpdateOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(CacheUpdateOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    ArrayRef<int64_t> update = rankedType(adaptor.getUpdate()).getShape();
    SmallVector<OpFoldResult> offsets = {rewriter.getIndexAttr(0), adaptor.getOffset(), rewriter.getIndexAttr(0)};
    SmallVector<OpFoldResult> sizes = llvm::map_to_vector(update, [&](int64_t d) -> OpFoldResult {
      return rewriter.getIndexAttr(d);
    });
    SmallVector<OpFoldResult> strides(3, rewriter.getIndexAttr(1));
    rewriter.replaceOpWithNewOp<tensor::InsertSliceOp>(op, adaptor.getUpdate(), adaptor.getCache(), offsets, sizes, strides);
    return success();
  }
};

bool isStaticTensor(Type type) {
  if (!isa<TensorType>(type)) return true;  // scalars such as an attention offset
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

    ConversionTarget target(getContext());
    target.addIllegalDialect<TransformerDialect>();
    target.addLegalDialect<arith::ArithDialect, linalg::LinalgDialect, math::MathDialect, scf::SCFDialect,
                           tensor::TensorDialect>();
    RewritePatternSet patterns(&getContext());
    populateTransformerToLinalgPatterns(patterns);
    if (failed(applyPartialConversion(getOperation(), target, std::move(patterns)))) return signalPassFailure();
    // Head transposes that attention reads around (HeadRows) or merge_heads undoes are left
    // without users: erased here, so that no pipeline level, the unfused baseline included,
    // computes them.
    getOperation()->walk([](linalg::TransposeOp transpose) {
      if (transpose->use_empty()) transpose->erase();
    });
  }
};

} // namespace

void populateTransformerToLinalgPatterns(RewritePatternSet &patterns) {
  patterns.add<ConstantLowering, ElementwiseLowering<AddOp>, ElementwiseLowering<MulOp>, ElementwiseLowering<NegOp>,
               ElementwiseLowering<ReluOp>, ElementwiseLowering<GeluOp>, TransposeLowering, MatmulLowering, PackedMatmulLowering,
               LayerNormLowering, SoftmaxLowering, EmbeddingLowering, SliceLowering, SplitHeadsLowering,
               MergeHeadsLowering, RopeLowering, CausalAttentionLowering, CacheUpdateLowering>(patterns.getContext());
}

} // namespace gpt::conversion
