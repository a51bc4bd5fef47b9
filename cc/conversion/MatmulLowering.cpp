// Lowering of matmul (linalg.matmul / batch_matmul) and packed_matmul (a linalg.generic over panels).
#include "cc/codegen/CodegenAttributes.h"
#include "cc/conversion/LoweringUtils.h"
#include "cc/conversion/Passes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
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
                                  // A low-precision weight is widened as it is read; the
                                  // product accumulates in f32.
                                  Value weight = args[1];
                                  if (weight.getType() != b.getF32Type())
                                    weight = b.create<arith::ExtFOp>(l, b.getF32Type(), weight);
                                  Value product = b.create<arith::MulFOp>(l, args[0], weight);
                                  return b.create<arith::AddFOp>(l, args[2], product);
                                });
    gpt::codegen::markPackedMatmul(panels.getDefiningOp());
    Value product =
        rewriter.create<tensor::CollapseShapeOp>(loc, panels, SmallVector<ReassociationIndices>{{0}, {1, 2}});
    if (rank > 2)
      product = rewriter.create<tensor::ExpandShapeOp>(loc, resultType, product, collapseLeading(rank - 1, rank));
    rewriter.replaceOp(op, product);
    return success();
  }
};

} // namespace

void populateMatmulLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<MatmulLowering, PackedMatmulLowering>(patterns.getContext());
}

} // namespace gpt::conversion
