// Lowering of transformer.causal_attention to a fused, flash-attention style loop nest.
#include "cc/TargetParameters.h"
#include "cc/conversion/LoweringUtils.h"
#include "cc/conversion/Passes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/Support/MathExtras.h"

#include <limits>

namespace gpt::conversion {
using namespace mlir;
using namespace mlir::transformer;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

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
  SmallVector<int64_t> shape; // static sizes

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

/// An attention operand, logically [H, N, cols], stored head-major or token-major ([N, H, cols],
/// as its flag on the op says). Either way each head's row is `cols` contiguous floats, read in
/// place: a token-major operand is a split_heads view of a projection, which no transpose copies.
struct HeadRows {
  Value tensor;
  bool tokenMajor;

  int64_t heads() const { return rankedType(tensor).getDimSize(tokenMajor ? 1 : 0); }
  int64_t rows() const { return rankedType(tensor).getDimSize(tokenMajor ? 0 : 1); }
  int64_t cols() const { return rankedType(tensor).getDimSize(2); }

  /// Rows row .. row + rows - 1 of head `head`, as a [rows, cols] tensor.
  Value slice(OpBuilder &b, Location loc, Value head, Value row, int64_t rows) const {
    HeadRegion region(b, tokenMajor, head, 1, row, rows, cols());
    auto type = RankedTensorType::get({rows, cols()}, b.getF32Type());
    return b.create<tensor::ExtractSliceOp>(loc, type, tensor, region.offsets, region.sizes, region.strides);
  }
};

/// Fused causal attention, flash-attention style: for each head and each block of Bq queries,
/// a loop over blocks of Bk keys keeps a running row max `m`, row sum `l` and output `acc`
/// (online softmax), so no [Tq, Tk] score matrix exists, only one [Bq, Bk] tile at a time.
/// The key loop stops at the last key any query of the block may see (key j is visible from
/// query i when j <= offset + i): blocks the causal mask removes entirely are never visited,
/// and a decode step (one query at `offset`) reads the cache only up to its own position.
/// With a sliding window W (key j visible from query i when offset + i - W < j <= offset + i)
/// the loop also starts at the key block holding the first query's first visible key: blocks
/// entirely before the window are never visited either, so the cost grows with W, not with Tk.
/// Blocks the window or the diagonal cut are masked key by key.
///
/// Per key block: s = q_blk . k_blk^T (a linalg.matmul by the transposed block, or for one
/// query a row reduction: a dot product per key), masked and scaled;
/// m' = max(m, rowmax(s)); p = exp(s - m'); c = exp(m - m'); l' = c l + rowsum(p);
/// acc' = c acc + p . v_blk. After the loop the block's output is acc / l.
///
/// The steps, outermost first: headLoop, queryBlock, keyBlock (scores, maskAndScale,
/// onlineSoftmaxUpdate). Each operand and the result are read or written in the layout the
/// op's flags give (see HeadRows).
class FlashAttention {
public:
  FlashAttention(CausalAttentionOp op, CausalAttentionOp::Adaptor adaptor)
      : loc(op.getLoc()), ctx(op.getContext()), queryRows{adaptor.getQuery(), op.getQueryTokenMajor()},
        keyRows{adaptor.getKey(), op.getKeyTokenMajor()}, valueRows{adaptor.getValue(), op.getValueTokenMajor()},
        tokenMajorResult(op.getResultTokenMajor()), queryOffset(adaptor.getQueryOffset()), window(op.getWindow()),
        scale(op.getScale().convertToFloat()), heads(queryRows.heads()), queries(queryRows.rows()),
        keys(keyRows.rows()), valueSize(valueRows.cols()), bq(blockSize(queries)), bk(blockSize(keys)),
        id2(AffineMap::getMultiDimIdentityMap(2, ctx)), row2(rowMap(2, ctx)),
        id1(AffineMap::getMultiDimIdentityMap(1, ctx)), parallel2(2, utils::IteratorType::parallel),
        parallel1(1, utils::IteratorType::parallel) {}

  /// The attention's result, [H, Tq, dv] (token-major: [Tq, H, dv]).
  Value build(OpBuilder &b) {
    offset = queryOffset ? queryOffset : b.create<arith::ConstantIndexOp>(loc, 0).getResult();
    return headLoop(b);
  }

private:
  /// The scores of a query block against a key block, and the map through which the [bq, bk]
  /// iteration space reads them.
  struct Scores {
    Value value;
    AffineMap map;
  };

  Value index(OpBuilder &b, int64_t value) const { return b.create<arith::ConstantIndexOp>(loc, value).getResult(); }

  // Heads are independent: an scf.forall, which becomes an OpenMP loop when the pipeline has
  // threads (else a plain loop). Each iteration owns its head's [Tq, dv] slice of the output.
  // Attention too small to pay for a fork and join (a decode step of a small model) runs its
  // heads in one scf.forall iteration, i.e. on one thread.
  Value headLoop(OpBuilder &rewriter) {
    // Saturating: huge (legal) static dims must not wrap to a small product.
    int64_t work = 1;
    for (int64_t factor : {heads, queries, keys, queryRows.cols()})
      if (llvm::MulOverflow(work, factor, work)) work = std::numeric_limits<int64_t>::max();
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
    return headLoop.getResult(0);
  }

  // One query block: the key loop, then acc / l written into the output.
  Value queryBlock(OpBuilder &b, Value head, Value localHead, Value queryStart, Value out) {
    Value qBlock = queryRows.slice(b, loc, head, queryStart, bq);
    // Keys [0, end) with end = min(offset + queryStart + bq, keys): the last query of the block
    // sees up to offset + queryStart + bq - 1. Rounded up to whole key blocks.
    Value end = b.create<arith::MinUIOp>(
        loc, b.create<arith::AddIOp>(loc, b.create<arith::AddIOp>(loc, offset, queryStart), index(b, bq)),
        index(b, keys));
    // (arith.ceildivui would need arith-expand before the LLVM lowering.)
    Value keyBlocks = b.create<arith::DivUIOp>(loc, b.create<arith::AddIOp>(loc, end, index(b, bk - 1)), index(b, bk));
    Value keyEnd = b.create<arith::MulIOp>(loc, keyBlocks, index(b, bk));
    Value keyBegin = index(b, 0);
    if (window) {
      // Keys from offset + queryStart + 1 - W (the first query's first visible key; 0 when that
      // is negative), rounded down to a whole key block.
      Value first = b.create<arith::AddIOp>(loc, b.create<arith::AddIOp>(loc, offset, queryStart), index(b, 1));
      Value w = index(b, *window);
      Value past = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ugt, first, w);
      Value begin = b.create<arith::SelectOp>(loc, past, b.create<arith::SubIOp>(loc, first, w), index(b, 0));
      keyBegin = b.create<arith::MulIOp>(loc, b.create<arith::DivUIOp>(loc, begin, index(b, bk)), index(b, bk));
    }
    SmallVector<Value> init = {filled(b, loc, {bq}, kNegInf), filled(b, loc, {bq}), filled(b, loc, {bq, valueSize})};
    auto keyLoop = b.create<scf::ForOp>(
        loc, keyBegin, keyEnd, index(b, bk), init, [&](OpBuilder &nb, Location, Value keyStart, ValueRange state) {
          nb.create<scf::YieldOp>(loc, keyBlock(nb, head, queryStart, keyStart, qBlock, state));
        });
    Value sum = keyLoop.getResult(1), acc = keyLoop.getResult(2);
    Value normalized = buildGeneric(
        b, loc, emptyTensor(b, loc, {bq, valueSize}), {acc, sum}, {id2, row2}, id2, parallel2,
        [](OpBuilder &nb, Location l, ValueRange a) -> Value { return nb.create<arith::DivFOp>(l, a[0], a[1]); });
    // `out` is this iteration's [headsPerIteration, Tq, dv] slice of the result (token-major:
    // [Tq, headsPerIteration, dv]); `localHead` the head's index in it.
    HeadRegion region(b, tokenMajorResult, localHead, 1, queryStart, bq, valueSize);
    return b.create<tensor::InsertSliceOp>(loc, normalized, out, region.offsets, region.sizes, region.strides);
  }

  // One key block of one query block: (m, l, acc) -> (m', l', acc').
  SmallVector<Value> keyBlock(OpBuilder &b, Value head, Value queryStart, Value keyStart, Value qBlock,
                              ValueRange state) {
    Value kBlock = keyRows.slice(b, loc, head, keyStart, bk), vBlock = valueRows.slice(b, loc, head, keyStart, bk);
    Scores s = scores(b, qBlock, kBlock);
    Value masked = maskAndScale(b, s, queryStart, keyStart);
    return onlineSoftmaxUpdate(b, masked, vBlock, queryStart, keyStart, state);
  }

  // A block of several queries multiplies by k_blk^T copied out once: the register tiles
  // then read it row by row, where reading k_blk itself column by column gathers 32 scalars
  // per vector, again for every tile of queries. One query (decode) takes one dot product
  // per cached key instead, s[j] = sum_d k[j, d] q[d]: a row reduction over the head
  // dimension that streams each key row once, with partial sums in a vector across d.
  Scores scores(OpBuilder &b, Value qBlock, Value kBlock) {
    if (bq == 1) {
      int64_t headDim = keyRows.cols();
      auto f32 = b.getF32Type();
      Value qRow = b.create<tensor::CollapseShapeOp>(loc, RankedTensorType::get({headDim}, f32), qBlock,
                                                     SmallVector<ReassociationIndices>{{0, 1}});
      Value dots = buildRowReduction(
          b, loc, {bk, headDim}, {kBlock, qRow}, {id2, AffineMap::get(2, 0, getAffineDimExpr(1, ctx))}, 0.0,
          [](OpBuilder &nb, Location l, ValueRange a) -> Value {
            return nb.create<arith::AddFOp>(l, a[2], nb.create<arith::MulFOp>(l, a[0], a[1]));
          });
      // Read as [1, bk] through the consumer's indexing map: an expand_shape here would be
      // propagated into the reduction, which would then not look like a row reduction.
      return {dots, AffineMap::get(2, 0, getAffineDimExpr(1, ctx))};
    }
    Value product = b.create<linalg::MatmulOp>(loc, ValueRange{qBlock, transpose(b, loc, kBlock, {1, 0})},
                                               ValueRange{filled(b, loc, {bq, bk})})
                        .getResult(0);
    return {product, id2};
  }

  // True where key keyStart + j is visible from query queryStart + i: j <= offset + i, and with a
  // window W also offset + i < j + W.
  Value visible(OpBuilder &nb, Location l, Value queryStart, Value keyStart) const {
    Value i = nb.create<arith::AddIOp>(l, queryStart, nb.create<linalg::IndexOp>(l, 0));
    Value j = nb.create<arith::AddIOp>(l, keyStart, nb.create<linalg::IndexOp>(l, 1));
    Value position = nb.create<arith::AddIOp>(l, i, offset);
    Value causal = nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::ule, j, position);
    if (!window) return causal;
    Value inWindow = nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::ult, position,
                                              nb.create<arith::AddIOp>(l, j, index(nb, *window)));
    return nb.create<arith::AndIOp>(l, causal, inWindow);
  }

  // scale * s where the key is visible, -inf where the causal mask hides it.
  Value maskAndScale(OpBuilder &b, Scores s, Value queryStart, Value keyStart) {
    return buildGeneric(b, loc, emptyTensor(b, loc, {bq, bk}), {s.value}, {s.map}, id2, parallel2,
                        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                          Value scaled = nb.create<arith::MulFOp>(l, a[0], f32Constant(nb, l, scale));
                          return nb.create<arith::SelectOp>(l, visible(nb, l, queryStart, keyStart), scaled,
                                                            f32Constant(nb, l, kNegInf));
                        });
  }

  // The online softmax step of one key block over the running state (m, l, acc).
  SmallVector<Value> onlineSoftmaxUpdate(OpBuilder &b, Value masked, Value vBlock, Value queryStart, Value keyStart,
                                         ValueRange state) {
    Value m = state[0], l = state[1], acc = state[2];
    Value blockMax = buildRowReduction(
        b, loc, {bq, bk}, {masked}, {id2}, kNegInf,
        [](OpBuilder &nb, Location l, ValueRange a) -> Value { return nb.create<arith::MaximumFOp>(l, a[0], a[1]); });
    // The rescale of the old state, exp(m - max(m, blockMax)); 0 before the first visible key.
    Value correction = buildGeneric(b, loc, emptyTensor(b, loc, {bq}), {m, blockMax}, {id1, id1}, id1, parallel1,
                                    [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                      Value newMax = nb.create<arith::MaximumFOp>(l, a[0], a[1]);
                                      Value unset = nb.create<arith::CmpFOp>(l, arith::CmpFPredicate::OEQ, a[0],
                                                                             f32Constant(nb, l, kNegInf));
                                      Value e = nb.create<math::ExpOp>(l, nb.create<arith::SubFOp>(l, a[0], newMax));
                                      return nb.create<arith::SelectOp>(l, unset, f32Constant(nb, l, 0.0), e);
                                    });
    // The running state is updated in place (destination = the loop-carried tensor), so its
    // buffers carry over from one key block to the next instead of being allocated anew:
    // m' = max(m, blockMax) over m, after `correction` has read m.
    Value newMax = buildGeneric(
        b, loc, m, {blockMax}, {id1}, id1, parallel1,
        [](OpBuilder &nb, Location l, ValueRange a) -> Value { return nb.create<arith::MaximumFOp>(l, a[1], a[0]); });
    // exp(s - m') for visible keys, exactly 0 for masked ones (never exp of -inf).
    Value probs = buildGeneric(b, loc, emptyTensor(b, loc, {bq, bk}), {masked, newMax}, {id2, row2}, id2, parallel2,
                               [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                 Value e = nb.create<math::ExpOp>(l, nb.create<arith::SubFOp>(l, a[0], a[1]));
                                 return nb.create<arith::SelectOp>(l, visible(nb, l, queryStart, keyStart), e,
                                                                   f32Constant(nb, l, 0.0));
                               });
    Value blockSum =
        buildRowReduction(b, loc, {bq, bk}, {probs}, {id2}, 0.0, [](OpBuilder &nb, Location l, ValueRange a) -> Value {
          return nb.create<arith::AddFOp>(l, a[0], a[1]);
        });
    // l' = c l + rowsum(p), over l.
    Value newSum = buildGeneric(b, loc, l, {correction, blockSum}, {id1, id1}, id1, parallel1,
                                [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                  return nb.create<arith::AddFOp>(l, nb.create<arith::MulFOp>(l, a[2], a[0]), a[1]);
                                });
    Value update =
        b.create<linalg::MatmulOp>(loc, ValueRange{probs, vBlock}, ValueRange{filled(b, loc, {bq, valueSize})})
            .getResult(0);
    // acc' = c acc + p . v, over acc.
    Value newAcc = buildGeneric(b, loc, acc, {correction, update}, {row2, id2}, id2, parallel2,
                                [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                  return nb.create<arith::AddFOp>(l, nb.create<arith::MulFOp>(l, a[2], a[0]), a[1]);
                                });
    return {newMax, newSum, newAcc};
  }

  Location loc;
  MLIRContext *ctx;
  HeadRows queryRows, keyRows, valueRows;
  bool tokenMajorResult;
  Value queryOffset, offset;     // the operand (may be null), and the index the loops use
  std::optional<int64_t> window; // the sliding window W, when the mask has one
  float scale;
  int64_t heads, queries, keys, valueSize, bq, bk;
  AffineMap id2, row2, id1;
  SmallVector<utils::IteratorType> parallel2, parallel1;
};

struct CausalAttentionLowering : OpConversionPattern<CausalAttentionOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(CausalAttentionOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, FlashAttention(op, adaptor).build(rewriter));
    return success();
  }
};

} // namespace

void populateAttentionLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<CausalAttentionLowering>(patterns.getContext());
}

} // namespace gpt::conversion
