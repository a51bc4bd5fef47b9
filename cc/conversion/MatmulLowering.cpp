// Lowering of matmul (linalg.matmul / batch_matmul) and packed_matmul (a linalg.generic over panels).
#include "cc/codegen/CodegenAttributes.h"
#include "cc/conversion/LoweringUtils.h"
#include "cc/conversion/Passes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/DialectConversion.h"

namespace gpt::conversion {
using namespace mlir;
using namespace mlir::transformer;

namespace {

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
      product = rewriter.create<linalg::MatmulOp>(loc, ValueRange{lhs, rhs}, ValueRange{filled(rewriter, loc, {m, n})})
                    .getResult(0);
    } else {
      // Same batch dims on both sides: fold them into one and run a batch matmul.
      if (rank > 3) {
        lhs = collapse(rewriter, loc, lhs, rank - 2);
        rhs = collapse(rewriter, loc, rhs, rank - 2);
      }
      auto l = rankedType(lhs);
      SmallVector<int64_t> shape = {l.getDimSize(0), l.getDimSize(1), resultType.getShape().back()};
      product =
          rewriter.create<linalg::BatchMatmulOp>(loc, ValueRange{lhs, rhs}, ValueRange{filled(rewriter, loc, shape)})
              .getResult(0);
    }
    if (rankedType(product) != resultType) {
      int64_t folded = rankedType(rhs).getRank() == 2 ? rank - 1 : rank - 2;
      product = rewriter.create<tensor::ExpandShapeOp>(loc, resultType, product, collapseLeading(folded, rank));
    }
    rewriter.replaceOp(op, product);
    return success();
  }
};

/// `value` [d0, ..., dn] viewed (expand_shape, no copy) with dim `dim` split into `shape`.
Value splitDim(OpBuilder &b, Location loc, Value value, int64_t dim, ArrayRef<int64_t> shape) {
  RankedTensorType type = rankedType(value);
  SmallVector<int64_t> expanded;
  SmallVector<ReassociationIndices> groups;
  for (int64_t i = 0; i < type.getRank(); ++i) {
    ReassociationIndices group;
    for (int64_t size : i == dim ? shape : ArrayRef<int64_t>(type.getShape()[i])) {
      group.push_back(expanded.size());
      expanded.push_back(size);
    }
    groups.push_back(group);
  }
  return b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get(expanded, type.getElementType()), value, groups);
}

/// Half `part` (0 or 1) of dim 2 of a rank-4 [M, B, 2, H] tensor, as [M, B, H].
Value half(OpBuilder &b, Location loc, Value value, int64_t part) {
  ArrayRef<int64_t> shape = rankedType(value).getShape();
  auto type = RankedTensorType::get({shape[0], shape[1], shape[3]}, rankedType(value).getElementType());
  SmallVector<OpFoldResult> offsets = {b.getIndexAttr(0), b.getIndexAttr(0), b.getIndexAttr(part), b.getIndexAttr(0)};
  SmallVector<OpFoldResult> sizes = {b.getIndexAttr(shape[0]), b.getIndexAttr(shape[1]), b.getIndexAttr(1),
                                     b.getIndexAttr(shape[3])};
  SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
  return b.create<tensor::ExtractSliceOp>(loc, type, value, offsets, sizes, strides);
}

/// [M, K] x [N/P, K, P] as one linalg.generic over (m, panel, column, k) that writes [M, N/P, P]:
/// a register tile of one panel's P columns reads the weight from consecutive addresses. The
/// result is then viewed (collapse_shape, no copy) as [M, N].
///
/// A block-quantized weight (q8_0, q4_0) applies each block's scale once per block, as llama.cpp
/// does, in two generics:
/// - the block partial sums `partial[m, panel, block, column] = sum_i x[m, block, i] * code[i]`
///   over the block's codes (marked `gpt.block_partials`), reading the lhs as [M, K/32, 32] and
///   the codes as [N/P, K/32, 32, P] (q4_0: the lhs as two [M, K/32, 16] halves, one per nibble
///   of the block's 16 bytes);
/// - their scaled sum over blocks, `out[m, panel, column] = sum_b partial * scale`, the packed
///   matmul proper (loops M, panel, column, block), which the schedule tiles like an f32 one and
///   into whose block loop it fuses the partial sums (transform.gpt.vectorize_block_matmul), so
///   that they live in registers and are never stored.
/// Both accumulate with math.fma: the JIT does not contract a mulf and an addf into one.
struct PackedMatmulLowering : OpConversionPattern<PackedMatmulOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(PackedMatmulOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType resultType = rankedType(op.getResult());
    int64_t rank = resultType.getRank();
    Value lhs = adaptor.getLhs();
    if (rank > 2) lhs = collapse(rewriter, loc, lhs, rank - 1);
    ArrayRef<int64_t> packed = rankedType(adaptor.getRhs()).getShape();
    int64_t m = rankedType(lhs).getDimSize(0);
    Value init = filled(rewriter, loc, {m, packed[0], packed[2]});

    Value panels;
    switch (op.getWeightFormat()) {
    case PackedWeightFormat::F32:
    case PackedWeightFormat::BF16:
      panels = plainPanels(rewriter, loc, lhs, adaptor.getRhs(), init);
      break;
    case PackedWeightFormat::Q8_0:
    case PackedWeightFormat::Q4_0:
      panels = scaledBlocks(rewriter, loc, blockPartials(rewriter, loc, op.getWeightFormat(), lhs, adaptor.getRhs()),
                            adaptor.getScales(), init);
      break;
    }
    gpt::codegen::markPackedMatmul(panels.getDefiningOp());
    Value product =
        rewriter.create<tensor::CollapseShapeOp>(loc, panels, SmallVector<ReassociationIndices>{{0}, {1, 2}});
    if (rank > 2)
      product = rewriter.create<tensor::ExpandShapeOp>(loc, resultType, product, collapseLeading(rank - 1, rank));
    rewriter.replaceOp(op, product);
    return success();
  }

private:
  using IteratorType = utils::IteratorType;

  /// f32 or bf16 panels, loops (m, panel, column, k).
  static Value plainPanels(OpBuilder &b, Location loc, Value lhs, Value rhs, Value init) {
    MLIRContext *ctx = b.getContext();
    AffineExpr mDim, panel, column, k;
    bindDims(ctx, mDim, panel, column, k);
    SmallVector<AffineMap> inputMaps = {AffineMap::get(4, 0, {mDim, k}, ctx),
                                        AffineMap::get(4, 0, {panel, k, column}, ctx)};
    SmallVector<IteratorType> iterators = {IteratorType::parallel, IteratorType::parallel, IteratorType::parallel,
                                           IteratorType::reduction};
    return buildGeneric(b, loc, init, {lhs, rhs}, inputMaps, AffineMap::get(4, 0, {mDim, panel, column}, ctx),
                        iterators, [](OpBuilder &b, Location l, ValueRange args) -> Value {
                          // A bf16 weight is widened as it is read; the product accumulates in f32.
                          Value weight = args[1];
                          if (weight.getType() != b.getF32Type())
                            weight = b.create<arith::ExtFOp>(l, b.getF32Type(), weight);
                          Value product = b.create<arith::MulFOp>(l, args[0], weight);
                          return b.create<arith::AddFOp>(l, args[2], product);
                        });
  }

  /// [M, N/P, K/32, P] sums of x times the codes over each block (loops m, panel, column, block,
  /// index in block; the last one the reduction).
  static Value blockPartials(OpBuilder &b, Location loc, PackedWeightFormat format, Value lhs, Value codes) {
    MLIRContext *ctx = b.getContext();
    const int64_t block = PackedMatmulOp::kBlockSize;
    ArrayRef<int64_t> packed = rankedType(codes).getShape();
    int64_t m = rankedType(lhs).getDimSize(0), blocks = rankedType(lhs).getDimSize(1) / block;
    Value init = filled(b, loc, {m, packed[0], blocks, packed[2]});
    AffineExpr mDim, panel, column, blockDim, index;
    bindDims(ctx, mDim, panel, column, blockDim, index);
    AffineMap lhsMap = AffineMap::get(5, 0, {mDim, blockDim, index}, ctx);
    AffineMap codesMap = AffineMap::get(5, 0, {panel, blockDim, index, column}, ctx);
    AffineMap outputMap = AffineMap::get(5, 0, {mDim, panel, blockDim, column}, ctx);
    SmallVector<IteratorType> iterators(4, IteratorType::parallel);
    iterators.push_back(IteratorType::reduction);
    Type f32 = b.getF32Type();
    Value partials;
    if (format == PackedWeightFormat::Q8_0) {
      Value x = splitDim(b, loc, lhs, 1, {blocks, block});
      Value q = splitDim(b, loc, codes, 1, {blocks, block});
      partials = buildGeneric(b, loc, init, {x, q}, {lhsMap, codesMap}, outputMap, iterators,
                              [f32](OpBuilder &b, Location l, ValueRange args) -> Value {
                                Value code = b.create<arith::SIToFPOp>(l, f32, args[1]);
                                return b.create<math::FmaOp>(l, args[0], code, args[2]);
                              });
    } else {
      Value x = splitDim(b, loc, lhs, 1, {blocks, 2, block / 2});
      Value q = splitDim(b, loc, codes, 1, {blocks, block / 2});
      partials = buildGeneric(
          b, loc, init, {half(b, loc, x, 0), half(b, loc, x, 1), q}, {lhsMap, lhsMap, codesMap}, outputMap, iterators,
          [f32](OpBuilder &b, Location l, ValueRange args) -> Value {
            // Each nibble is an unsigned code c in [0, 15] for the weight (c - 8) * scale.
            Type i8 = b.getI8Type();
            auto constant = [&](int64_t v) { return b.create<arith::ConstantOp>(l, b.getIntegerAttr(i8, v)); };
            Value byte = args[2];
            Value low = b.create<arith::AndIOp>(l, byte, constant(15));
            Value high = b.create<arith::ShRUIOp>(l, byte, constant(4));
            Value lowCode = b.create<arith::SIToFPOp>(l, f32, b.create<arith::SubIOp>(l, low, constant(8)));
            Value highCode = b.create<arith::SIToFPOp>(l, f32, b.create<arith::SubIOp>(l, high, constant(8)));
            Value sum = b.create<math::FmaOp>(l, args[0], lowCode, args[3]);
            return b.create<math::FmaOp>(l, args[1], highCode, sum);
          });
    }
    gpt::codegen::markBlockPartials(partials.getDefiningOp());
    return partials;
  }

  /// [M, N/P, P] sums over blocks of the partial sums times their scales (loops m, panel, column,
  /// block).
  static Value scaledBlocks(OpBuilder &b, Location loc, Value partials, Value scales, Value init) {
    MLIRContext *ctx = b.getContext();
    AffineExpr mDim, panel, column, blockDim;
    bindDims(ctx, mDim, panel, column, blockDim);
    SmallVector<AffineMap> inputMaps = {AffineMap::get(4, 0, {mDim, panel, blockDim, column}, ctx),
                                        AffineMap::get(4, 0, {panel, blockDim, column}, ctx)};
    SmallVector<IteratorType> iterators = {IteratorType::parallel, IteratorType::parallel, IteratorType::parallel,
                                           IteratorType::reduction};
    return buildGeneric(b, loc, init, {partials, scales}, inputMaps, AffineMap::get(4, 0, {mDim, panel, column}, ctx),
                        iterators, [](OpBuilder &b, Location l, ValueRange args) -> Value {
                          Value scale = b.create<arith::ExtFOp>(l, b.getF32Type(), args[1]);
                          return b.create<math::FmaOp>(l, args[0], scale, args[2]);
                        });
  }
};

} // namespace

void populateMatmulLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<MatmulLowering, PackedMatmulLowering>(patterns.getContext());
}

} // namespace gpt::conversion
