// Lowering of the ops that move data: transpose, slice, split/merge_heads, embedding, cache_update.
#include "cc/conversion/KvCacheQ8_0.h"
#include "cc/conversion/LoweringUtils.h"
#include "cc/conversion/Passes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Transforms/DialectConversion.h"

namespace gpt::conversion {
using namespace mlir;
using namespace mlir::transformer;

namespace {

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

struct SliceLowering : OpConversionPattern<SliceOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(SliceOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    RankedTensorType type = rankedType(op.getResult());
    int64_t rank = type.getRank();
    SmallVector<OpFoldResult> offsets(rank, rewriter.getIndexAttr(0)), strides(rank, rewriter.getIndexAttr(1));
    offsets.back() = rewriter.getIndexAttr(op.getOffset());
    SmallVector<OpFoldResult> sizes =
        llvm::map_to_vector(type.getShape(), [&](int64_t d) -> OpFoldResult { return rewriter.getIndexAttr(d); });
    rewriter.replaceOpWithNewOp<tensor::ExtractSliceOp>(op, type, adaptor.getInput(), offsets, sizes, strides);
    return success();
  }
};

// [T, H*d] -> expand to [T, H, d] -> unless token-major, transpose to [H, T, d].
struct SplitHeadsLowering : OpConversionPattern<SplitHeadsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(SplitHeadsOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType type = rankedType(op.getResult());
    ArrayRef<int64_t> out = type.getShape();
    bool tokenMajor = op.getTokenMajor();
    auto expandedType = tokenMajor ? type : RankedTensorType::get({out[1], out[0], out[2]}, rewriter.getF32Type());
    Value expanded = rewriter.create<tensor::ExpandShapeOp>(loc, expandedType, adaptor.getInput(),
                                                            SmallVector<ReassociationIndices>{{0}, {1, 2}});
    rewriter.replaceOp(op, tokenMajor ? expanded : transpose(rewriter, loc, expanded, {1, 0, 2}));
    return success();
  }
};

// [H, T, d] -> unless token-major, transpose to [T, H, d] -> collapse to [T, H*d].
struct MergeHeadsLowering : OpConversionPattern<MergeHeadsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(MergeHeadsOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Value tokensFirst = adaptor.getInput();
    if (!op.getTokenMajor()) tokensFirst = transpose(rewriter, op.getLoc(), tokensFirst, {1, 0, 2});
    rewriter.replaceOpWithNewOp<tensor::CollapseShapeOp>(op, tokensFirst,
                                                         SmallVector<ReassociationIndices>{{0}, {1, 2}});
    return success();
  }
};

/// The [T, D] rows `type` of a table gathered by the [T] `ids`: a generic over (t, j) whose body
/// gets the id, clamped into [0, rows) so that a bad id can never read outside the table (callers
/// validate ids), and returns element j (`linalg.index 1`) of that row.
using RowElementBuilder = llvm::function_ref<Value(OpBuilder &, Location, Value id)>;
Value buildGather(OpBuilder &b, Location loc, RankedTensorType type, Value ids, int64_t rows,
                  RowElementBuilder element) {
  MLIRContext *ctx = b.getContext();
  SmallVector<utils::IteratorType> parallel(2, utils::IteratorType::parallel);
  return buildGeneric(b, loc, emptyTensor(b, loc, type.getShape()), {ids},
                      {AffineMap::get(2, 0, getAffineDimExpr(0, ctx))}, AffineMap::getMultiDimIdentityMap(2, ctx),
                      parallel, [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                        Value id = nb.create<arith::IndexCastOp>(l, nb.getIndexType(), a[0]);
                        id = nb.create<arith::MaxSIOp>(l, id, nb.create<arith::ConstantIndexOp>(l, 0));
                        id = nb.create<arith::MinSIOp>(l, id, nb.create<arith::ConstantIndexOp>(l, rows - 1));
                        return element(nb, l, id);
                      });
}

struct EmbeddingLowering : OpConversionPattern<EmbeddingOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(EmbeddingOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Value table = adaptor.getTable();
    Value result = buildGather(rewriter, op.getLoc(), rankedType(op.getResult()), adaptor.getIds(),
                               rankedType(table).getDimSize(0), [&](OpBuilder &b, Location l, Value id) -> Value {
                                 Value feature = b.create<linalg::IndexOp>(l, 1);
                                 return b.create<tensor::ExtractOp>(l, table, ValueRange{id, feature});
                               });
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// Element `feature` of column `column` of panel `panel` of a q8_0 packed weight (lanes [V'/P, D/4,
/// P], scales [V'/P, D/32, P]): feature j = 32 b + q + 8 i (block b) is byte i of lane row 8 b + q,
/// times the block's scale.
Value q8_0Element(OpBuilder &b, Location l, Value codes, Value scales, Value panel, Value column, Value feature) {
  auto index = [&](int64_t v) { return b.create<arith::ConstantIndexOp>(l, v); };
  const int64_t block = 32, lanesPerBlock = block / 4;
  Value blockIndex = b.create<arith::DivUIOp>(l, feature, index(block));
  Value inBlock = b.create<arith::RemUIOp>(l, feature, index(block));
  // (Each value built in its own statement: the IR's order must not depend on the C++ compiler's
  // order of evaluating arguments.)
  Value firstRow = b.create<arith::MulIOp>(l, blockIndex, index(lanesPerBlock));
  Value lanesIn = b.create<arith::RemUIOp>(l, inBlock, index(lanesPerBlock));
  Value row = b.create<arith::AddIOp>(l, firstRow, lanesIn);
  Value byte = b.create<arith::DivUIOp>(l, inBlock, index(lanesPerBlock));
  Value lane = b.create<tensor::ExtractOp>(l, codes, ValueRange{panel, row, column});
  // The byte's code: shifted to the top of the lane (by 24 - 8 byte), then arithmetic-shifted down.
  Type i32 = b.getI32Type();
  Value byteBits =
      b.create<arith::MulIOp>(l, b.create<arith::IndexCastOp>(l, i32, byte), b.create<arith::ConstantIntOp>(l, 8, i32));
  Value top = b.create<arith::ConstantIntOp>(l, 24, i32);
  Value up = b.create<arith::SubIOp>(l, top, byteBits);
  Value code = b.create<arith::ShRSIOp>(l, b.create<arith::ShLIOp>(l, lane, up), top);
  Value scale = b.create<tensor::ExtractOp>(l, scales, ValueRange{panel, blockIndex, column});
  Type f32 = b.getF32Type();
  return b.create<arith::MulFOp>(l, b.create<arith::SIToFPOp>(l, f32, code), b.create<arith::ExtFOp>(l, f32, scale));
}

/// The same of a q6_k packed weight (lanes [V'/P, D * 3/16, P], scales [V'/P, D/32 + D/256, P];
/// kernels/FormatKernels.h): feature k = 16 h + 4 i + l of run h has its low nibble in bits
/// 8 i + 4 (l / 2) of lane row 3 h + l % 2 and its top 2 bits in bits 8 i + 2 l of row 3 h + 2; the
/// run's int8 scale is byte h % 2 of scale row h / 2, and super-block s's fp16 d is row D/32 + s.
/// The weight is (d * scale) * (code - 32) in f32, as llama.cpp's dequantize_row_q6_K computes it.
Value q6_KElement(OpBuilder &b, Location l, Value codes, Value scales, Value panel, Value column, Value feature,
                  int64_t features) {
  // Each op is built in its own statement, so that the IR's order does not depend on the C++
  // compiler's order of evaluating arguments.
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  auto index = [&](int64_t v) -> Value { return b.create<arith::ConstantIndexOp>(l, v); };
  auto constant = [&](int64_t v) -> Value { return b.create<arith::ConstantIntOp>(l, v, i32); };
  auto divide = [&](Value v, Value by) -> Value { return b.create<arith::DivUIOp>(l, v, by); };
  auto remainder = [&](Value v, Value by) -> Value { return b.create<arith::RemUIOp>(l, v, by); };
  auto add = [&](Value x, Value y) -> Value { return b.create<arith::AddIOp>(l, x, y); };
  auto multiply = [&](Value x, Value y) -> Value { return b.create<arith::MulIOp>(l, x, y); };
  auto toI32 = [&](Value v) -> Value { return b.create<arith::IndexCastOp>(l, i32, v); };
  auto field = [&](Value word, Value shift, int64_t mask) -> Value {
    Value shifted = b.create<arith::ShRUIOp>(l, word, shift);
    Value maskValue = constant(mask);
    return b.create<arith::AndIOp>(l, shifted, maskValue);
  };
  Value sixteen = index(16), four = index(4), two = index(2);
  Value run = divide(feature, sixteen);
  Value inRun = remainder(feature, sixteen);
  Value byteIndex = toI32(divide(inRun, four));
  Value position = toI32(remainder(inRun, four)); // l
  Value firstRow = multiply(run, index(3));
  Value twoI32 = constant(2);
  Value lowRow = add(firstRow, b.create<arith::IndexCastOp>(l, b.getIndexType(), remainder(position, twoI32)));
  Value highRow = add(firstRow, two);
  Value byteShift = multiply(byteIndex, constant(8));
  Value nibble = divide(position, twoI32);
  Value nibbleShift = multiply(nibble, constant(4));
  Value lowShift = add(byteShift, nibbleShift);
  Value highShift = add(byteShift, multiply(position, twoI32));
  Value lowWord = b.create<tensor::ExtractOp>(l, codes, ValueRange{panel, lowRow, column});
  Value highWord = b.create<tensor::ExtractOp>(l, codes, ValueRange{panel, highRow, column});
  Value low = field(lowWord, lowShift, 0xF);
  Value high = field(highWord, highShift, 0x3);
  Value highBits = b.create<arith::ShLIOp>(l, high, constant(4));
  Value code = b.create<arith::OrIOp>(l, low, highBits);
  Value centred = b.create<arith::SubIOp>(l, code, constant(32));
  // The run's int8 scale: its byte of the 16-bit scale row, sign-extended.
  Value scaleHalf = b.create<tensor::ExtractOp>(l, scales, ValueRange{panel, divide(run, two), column});
  Value scaleBits = b.create<arith::BitcastOp>(l, b.getI16Type(), scaleHalf);
  Value scaleWord = b.create<arith::ExtUIOp>(l, i32, scaleBits);
  Value scaleByteIndex = toI32(remainder(run, two));
  Value scaleShift = multiply(scaleByteIndex, constant(8));
  Value scaleByte = b.create<arith::ShRUIOp>(l, scaleWord, scaleShift);
  Value scaleI8 = b.create<arith::TruncIOp>(l, b.getI8Type(), scaleByte);
  Value scaleI32 = b.create<arith::ExtSIOp>(l, i32, scaleI8);
  Value scale = b.create<arith::SIToFPOp>(l, f32, scaleI32);
  Value superBlock = divide(feature, index(256));
  Value dRow = add(superBlock, index(features / 32));
  Value dHalf = b.create<tensor::ExtractOp>(l, scales, ValueRange{panel, dRow, column});
  Value d = b.create<arith::ExtFOp>(l, f32, dHalf);
  Value runScale = b.create<arith::MulFOp>(l, d, scale);
  Value codeValue = b.create<arith::SIToFPOp>(l, f32, centred);
  return b.create<arith::MulFOp>(l, runScale, codeValue);
}

/// Rows of a table stored as a packed weight [D, V'] of the op's format: id v lies in panel v / P,
/// column v % P. One row per token is dequantized (in decode, D values), so the gather stays scalar.
struct PackedEmbeddingLowering : OpConversionPattern<PackedEmbeddingOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(PackedEmbeddingOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Value codes = adaptor.getCodes(), scales = adaptor.getScales();
    ArrayRef<int64_t> packed = rankedType(codes).getShape();
    const int64_t width = packed[2], features = rankedType(op.getResult()).getDimSize(1);
    const bool q6_K = op.getWeightFormat().format == gpt::WeightFormat::Q6_K; // else q8_0 (verified)
    Value result =
        buildGather(rewriter, op.getLoc(), rankedType(op.getResult()), adaptor.getIds(), packed[0] * width,
                    [&](OpBuilder &b, Location l, Value id) -> Value {
                      Value panel = b.create<arith::DivUIOp>(l, id, b.create<arith::ConstantIndexOp>(l, width));
                      Value column = b.create<arith::RemUIOp>(l, id, b.create<arith::ConstantIndexOp>(l, width));
                      Value feature = b.create<linalg::IndexOp>(l, 1);
                      return q6_K ? q6_KElement(b, l, codes, scales, panel, column, feature, features)
                                  : q8_0Element(b, l, codes, scales, panel, column, feature);
                    });
    rewriter.replaceOp(op, result);
    return success();
  }
};

// update -> cache[:, offset : offset + T, :], as one insert_slice (in place after bufferization).
// A half-width cache (f16, bf16) takes the update rounded to its format first, elementwise. A
// q8_0 cache (i8) takes each [d] row quantized where it goes (writeQ8_0Row), head by head and
// token by token: its codes and scales are written straight into the cache, in place.
struct CacheUpdateLowering : OpConversionPattern<CacheUpdateOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(CacheUpdateOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    ArrayRef<int64_t> update = rankedType(adaptor.getUpdate()).getShape();
    Value rows = adaptor.getUpdate();
    if (isQ8_0Cache(adaptor.getCache())) {
      rewriter.replaceOp(op, quantizedUpdate(rewriter, op.getLoc(), rows, adaptor.getCache(), adaptor.getOffset()));
      return success();
    }
    Type element = rankedType(adaptor.getCache()).getElementType();
    if (!element.isF32()) {
      Location loc = op.getLoc();
      Value empty = rewriter.create<tensor::EmptyOp>(loc, update, element);
      AffineMap id = AffineMap::getMultiDimIdentityMap(update.size(), rewriter.getContext());
      rows =
          buildGeneric(rewriter, loc, empty, {rows}, {id}, id,
                       SmallVector<utils::IteratorType>(update.size(), utils::IteratorType::parallel),
                       [&](OpBuilder &nb, Location l, ValueRange a) { return roundToElement(nb, l, a[0], element); });
    }
    SmallVector<OpFoldResult> offsets = {rewriter.getIndexAttr(0), adaptor.getOffset(), rewriter.getIndexAttr(0)};
    SmallVector<OpFoldResult> sizes =
        llvm::map_to_vector(update, [&](int64_t d) -> OpFoldResult { return rewriter.getIndexAttr(d); });
    SmallVector<OpFoldResult> strides(3, rewriter.getIndexAttr(1));
    rewriter.replaceOpWithNewOp<tensor::InsertSliceOp>(op, rows, adaptor.getCache(), offsets, sizes, strides);
    return success();
  }

private:
  // Row [h, t] of the update quantized into row [h, offset + t] of the q8_0 cache.
  static Value quantizedUpdate(OpBuilder &b, Location loc, Value update, Value cache, Value offset) {
    ArrayRef<int64_t> shape = rankedType(update).getShape(); // [H, T, d]
    auto rowType = VectorType::get({shape[2]}, b.getF32Type());
    Value zero = b.create<arith::ConstantIndexOp>(loc, 0), one = b.create<arith::ConstantIndexOp>(loc, 1);
    Value heads = b.create<arith::ConstantIndexOp>(loc, shape[0]),
          tokens = b.create<arith::ConstantIndexOp>(loc, shape[1]);
    auto headLoop = b.create<scf::ForOp>(
        loc, zero, heads, one, ValueRange{cache}, [&](OpBuilder &hb, Location, Value head, ValueRange headState) {
          auto tokenLoop = hb.create<scf::ForOp>(
              loc, zero, tokens, one, headState, [&](OpBuilder &tb, Location, Value token, ValueRange state) {
                Value row = tb.create<vector::TransferReadOp>(loc, rowType, update, ValueRange{head, token, zero},
                                                              ArrayRef<bool>{true});
                Value position = tb.create<arith::AddIOp>(loc, offset, token);
                tb.create<scf::YieldOp>(loc, writeQ8_0Row(tb, loc, row, state[0], ValueRange{head, position}));
              });
          hb.create<scf::YieldOp>(loc, tokenLoop.getResults());
        });
    return headLoop.getResult(0);
  }
};

} // namespace

void populateShapeLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<TransposeLowering, SliceLowering, SplitHeadsLowering, MergeHeadsLowering, EmbeddingLowering,
               PackedEmbeddingLowering, CacheUpdateLowering>(patterns.getContext());
}

} // namespace gpt::conversion
