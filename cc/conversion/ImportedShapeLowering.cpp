// Lowering of the shape ops of imported PyTorch graphs (permute, reshape, broadcast, concat) to
// linalg and tensor ops.
#include "cc/conversion/LoweringUtils.h"
#include "cc/conversion/Passes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/DialectConversion.h"

#include <numeric>

namespace gpt::conversion {
using namespace mlir;
using namespace mlir::transformer;

namespace {

// permute -> linalg.transpose (the same convention: result dim k is input dim permutation[k])
struct PermuteLowering : OpConversionPattern<PermuteOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(PermuteOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, transpose(rewriter, op.getLoc(), adaptor.getInput(), op.getPermutation()));
    return success();
  }
};

/// One reassociation group holding every dim of a rank-`rank` tensor.
SmallVector<ReassociationIndices> allInOne(int64_t rank) {
  ReassociationIndices group(rank);
  std::iota(group.begin(), group.end(), 0);
  return {group};
}

// reshape -> collapse to one dim, expand to the result's shape (row-major order kept, no copy)
struct ReshapeLowering : OpConversionPattern<ReshapeOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ReshapeOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType in = rankedType(adaptor.getInput()), out = rankedType(op.getResult());
    Value flat = adaptor.getInput();
    if (in.getRank() != 1) flat = rewriter.create<tensor::CollapseShapeOp>(loc, flat, allInOne(in.getRank()));
    Value result = flat;
    if (out.getRank() != 1) result = rewriter.create<tensor::ExpandShapeOp>(loc, out, flat, allInOne(out.getRank()));
    rewriter.replaceOp(op, result);
    return success();
  }
};

// broadcast -> a linalg.generic copying each element to every position it broadcasts to
struct BroadcastLowering : OpConversionPattern<BroadcastOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(BroadcastOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, buildElementwise(rewriter, op.getLoc(), rankedType(op.getResult()), {adaptor.getInput()},
                                            [](OpBuilder &, Location, ValueRange args) { return args[0]; }));
    return success();
  }
};

// concat -> each input inserted at its offset along `dim` of a new tensor
struct ConcatLowering : OpConversionPattern<ConcatOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ConcatOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType out = rankedType(op.getResult());
    Value result = emptyTensor(rewriter, loc, out.getShape());
    int64_t dim = op.getDim(), offset = 0;
    for (Value input : adaptor.getInputs()) {
      ArrayRef<int64_t> shape = rankedType(input).getShape();
      SmallVector<OpFoldResult> offsets(shape.size(), rewriter.getIndexAttr(0)), sizes, strides;
      offsets[dim] = rewriter.getIndexAttr(offset);
      for (int64_t size : shape) {
        sizes.push_back(rewriter.getIndexAttr(size));
        strides.push_back(rewriter.getIndexAttr(1));
      }
      result = rewriter.create<tensor::InsertSliceOp>(loc, input, result, offsets, sizes, strides);
      offset += shape[dim];
    }
    rewriter.replaceOp(op, result);
    return success();
  }
};

} // namespace

void populateImportedShapeLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<PermuteLowering, ReshapeLowering, BroadcastLowering, ConcatLowering>(patterns.getContext());
}

} // namespace gpt::conversion
