// Lowering of the paged KV pool's ops: transformer.paged_cache_write and
// transformer.paged_attention, the cache write and attention of a batched step whose sequences'
// keys and values live in the blocks of a shared pool, reached through per-sequence block tables.
#include "cc/conversion/KvCacheQ8_0.h"
#include "cc/conversion/LoweringUtils.h"
#include "cc/conversion/OnlineSoftmax.h"
#include "cc/conversion/Passes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Transforms/DialectConversion.h"

#include <limits>

namespace gpt::conversion {
using namespace mlir;
using namespace mlir::transformer;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

Value indexConstant(OpBuilder &b, Location loc, int64_t value) {
  return b.create<arith::ConstantIndexOp>(loc, value).getResult();
}

/// `tensor[indices]` of an i64 tensor, as an index.
Value extractIndex(OpBuilder &b, Location loc, Value tensor, ValueRange indices) {
  Value element = b.create<tensor::ExtractOp>(loc, tensor, indices);
  return b.create<arith::IndexCastOp>(loc, b.getIndexType(), element);
}

/// Static sizes as fold results.
SmallVector<OpFoldResult> sizesOf(OpBuilder &b, ArrayRef<int64_t> sizes) {
  return llvm::map_to_vector(sizes, [&](int64_t size) -> OpFoldResult { return b.getIndexAttr(size); });
}

/// Row `row` (positions 0 .. S-1 of one head) of block `block` of a [N, H, S, d] pool: [S, d], in
/// the pool's element type, or dequantized to f32 from a q8_0 pool's [S, d * 17/16] bytes.
Value blockRows(OpBuilder &b, Location loc, Value pool, Value block, Value head) {
  ArrayRef<int64_t> shape = rankedType(pool).getShape();
  auto type = RankedTensorType::get({shape[2], shape[3]}, rankedType(pool).getElementType());
  SmallVector<OpFoldResult> offsets = {block, head, b.getIndexAttr(0), b.getIndexAttr(0)};
  Value rows = b.create<tensor::ExtractSliceOp>(loc, type, pool, offsets, sizesOf(b, {1, 1, shape[2], shape[3]}),
                                                sizesOf(b, {1, 1, 1, 1}));
  return isQ8_0Cache(pool) ? dequantizedQ8_0Rows(b, loc, rows) : rows;
}

// Token by token: a token with a slot s >= 0 has its [H, d] row written at block s / S,
// position s % S of the pool (in place after bufferization); a negative slot (padding) is skipped.
// A half-width pool (f16, bf16) takes each row rounded to its format, a q8_0 pool (i8) each row
// quantized (writeQ8_0Row).
struct PagedCacheWriteLowering : OpConversionPattern<PagedCacheWriteOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(PagedCacheWriteOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value update = adaptor.getUpdate(), slots = adaptor.getSlots();
    ArrayRef<int64_t> shape = rankedType(update).getShape(); // [H, T, d]
    const int64_t heads = shape[0], tokens = shape[1], headDim = shape[2];
    const int64_t blockSize = rankedType(adaptor.getPool()).getDimSize(2);
    const Type element = rankedType(adaptor.getPool()).getElementType();
    auto rowType = VectorType::get({headDim}, rewriter.getF32Type());
    auto loop = rewriter.create<scf::ForOp>(
        loc, indexConstant(rewriter, loc, 0), indexConstant(rewriter, loc, tokens), indexConstant(rewriter, loc, 1),
        ValueRange{adaptor.getPool()}, [&](OpBuilder &b, Location, Value token, ValueRange state) {
          Value slot = b.create<tensor::ExtractOp>(loc, slots, token);
          Value zero = b.create<arith::ConstantIntOp>(loc, 0, 64);
          Value real = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, slot, zero);
          auto write = b.create<scf::IfOp>(
              loc, real,
              [&](OpBuilder &tb, Location) {
                Value index = tb.create<arith::IndexCastOp>(loc, tb.getIndexType(), slot);
                Value size = indexConstant(tb, loc, blockSize);
                Value block = tb.create<arith::DivUIOp>(loc, index, size);
                Value row = tb.create<arith::RemUIOp>(loc, index, size);
                // Head by head, one vector of d lanes read from the update and written into the
                // block's row (in place after bufferization). An insert_slice of the whole [H, d]
                // row would bufferize to a memref.copy of a strided view, which becomes a call to
                // the runtime's generic element-by-element copy: ~1.5 ms of serial time in a
                // 16-token GPT-2-small step.
                auto headLoop = tb.create<scf::ForOp>(
                    loc, indexConstant(tb, loc, 0), indexConstant(tb, loc, heads), indexConstant(tb, loc, 1),
                    ValueRange{state[0]}, [&](OpBuilder &hb, Location, Value head, ValueRange pool) {
                      Value zero = indexConstant(hb, loc, 0);
                      Value lanes = hb.create<vector::TransferReadOp>(
                          loc, rowType, update, ValueRange{head, token, zero}, ArrayRef<bool>{true});
                      Value written;
                      if (element.isInteger(8)) {
                        written = writeQ8_0Row(hb, loc, lanes, pool[0], ValueRange{block, head, row});
                      } else {
                        lanes = roundToElement(hb, loc, lanes, element);
                        written = hb.create<vector::TransferWriteOp>(
                                        loc, lanes, pool[0], ValueRange{block, head, row, zero}, ArrayRef<bool>{true})
                                      .getResult();
                      }
                      hb.create<scf::YieldOp>(loc, written);
                    });
                Value written = headLoop.getResult(0);
                tb.create<scf::YieldOp>(loc, written);
              },
              [&](OpBuilder &eb, Location) { eb.create<scf::YieldOp>(loc, state[0]); });
          b.create<scf::YieldOp>(loc, write.getResult(0));
        });
    rewriter.replaceOp(op, loop.getResult(0));
    return success();
  }
};

/// Paged attention, one token at a time: each token is a query of its own sequence at its own
/// position, so the batch has no shared key range; a token's keys are its sequence's blocks,
/// looked up in the block table and read where they lie in the pool, block by block, every head
/// of a block in turn. Blocks 0 .. last - 1 (last = position / S) are full tiles, every key
/// visible, and block `last`, which holds the token's own position, is the one partial tile,
/// masked past it. With a window, the blocks before the window are skipped and the window's first
/// block is masked below it. Each (block, head) is
/// the decode step of causal_attention: s = K_blk . q as a [1, S] row (a dot product per key,
/// streaming each key row once), scaled, then the shared online softmax step (OnlineSoftmax.h),
/// whose p . V_blk is a [1, S] x [S, d] matmul reading V row by row. Tokens run in an scf.forall
/// (OpenMP threads when the pipeline has them), each iteration writing its [H, d] slice.
class PagedAttention {
public:
  PagedAttention(PagedAttentionOp op, PagedAttentionOp::Adaptor adaptor)
      : loc(op.getLoc()), ctx(op.getContext()), query(adaptor.getQuery()), keyPool(adaptor.getKeyPool()),
        valuePool(adaptor.getValuePool()), tables(adaptor.getBlockTables()), sequences(adaptor.getSequences()),
        positions(adaptor.getPositions()), scale(op.getScale().convertToFloat()), window(op.getWindow().value_or(0)) {
    ArrayRef<int64_t> q = rankedType(query).getShape();
    heads = q[0];
    tokens = q[1];
    headDim = q[2];
    blockSize = rankedType(keyPool).getDimSize(2);
    queriesPerKv = heads / rankedType(keyPool).getDimSize(1);
  }

  Value build(OpBuilder &rewriter) {
    Value out = emptyTensor(rewriter, loc, {heads, tokens, headDim});
    // One iteration per (token, group of heads). A step of a single token (one sequence decoding)
    // splits its heads in two, so that both threads work on it; with more tokens, each keeps all
    // its heads, whose blocks are then read as whole contiguous pieces (see tokenHeads).
    const int64_t headGroups = (tokens == 1 && heads % 2 == 0) ? 2 : 1;
    groupSize = heads / headGroups;
    auto tokenLoop = rewriter.create<scf::ForallOp>(
        loc, ArrayRef<OpFoldResult>{rewriter.getIndexAttr(tokens * headGroups)}, ValueRange{out}, std::nullopt,
        [&](OpBuilder &b, Location, ValueRange args) {
          Value token = args[0], firstHead, shared = args[1]; // firstHead null: head 0
          if (headGroups > 1) {
            Value groups = indexConstant(b, loc, headGroups);
            token = b.create<arith::DivUIOp>(loc, args[0], groups);
            Value group = b.create<arith::RemUIOp>(loc, args[0], groups);
            firstHead = b.create<arith::MulIOp>(loc, group, indexConstant(b, loc, groupSize));
          }
          SmallVector<OpFoldResult> offsets = {firstHead ? OpFoldResult(firstHead) : b.getIndexAttr(0), token,
                                               b.getIndexAttr(0)};
          SmallVector<OpFoldResult> sizes = sizesOf(b, {groupSize, 1, headDim}), strides = sizesOf(b, {1, 1, 1});
          auto slice = RankedTensorType::get({groupSize, headDim}, b.getF32Type());
          Value tokenOut = b.create<tensor::ExtractSliceOp>(loc, slice, shared, offsets, sizes, strides);
          Value result = tokenHeads(b, token, firstHead, tokenOut);
          auto terminator = b.create<scf::InParallelOp>(loc);
          b.setInsertionPointToStart(terminator.getBody());
          b.create<tensor::ParallelInsertSliceOp>(loc, result, shared, offsets, sizes, strides);
        });
    return tokenLoop.getResult(0);
  }

private:
  /// Heads firstHead .. firstHead + groupSize - 1 of one token (a null firstHead: from head 0):
  /// their [groupSize, d] result written into `out`.
  Value tokenHeads(OpBuilder &b, Value token, Value firstHead, Value out) {
    Value position = extractIndex(b, loc, positions, token);
    Value sequence = extractIndex(b, loc, sequences, token);
    Value size = indexConstant(b, loc, blockSize);
    Value last = b.create<arith::DivUIOp>(loc, position, size);
    // Keys of the last block the token sees: position - last * S + 1 (1 .. S).
    Value lastStart = b.create<arith::MulIOp>(loc, last, size);
    Value sinceStart = b.create<arith::SubIOp>(loc, position, lastStart);
    Value visible = b.create<arith::AddIOp>(loc, sinceStart, indexConstant(b, loc, 1));
    Value lastBlock = extractIndex(b, loc, tables, {sequence, last});
    // With a window: the first visible position, max(position + 1 - W, 0), lies in block
    // `firstBlock` at `firstOffset`. That block is masked from below; the blocks between it and
    // the last are full; the blocks before it are not visited.
    Value firstBlock, firstOffset, fullStart = indexConstant(b, loc, 0), lastLower;
    if (window > 0) {
      Value one = indexConstant(b, loc, 1), width = indexConstant(b, loc, window);
      Value end = b.create<arith::AddIOp>(loc, position, one);
      Value beyond = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ugt, end, width);
      Value start = b.create<arith::SubIOp>(loc, end, width);
      Value first = b.create<arith::SelectOp>(loc, beyond, start, indexConstant(b, loc, 0));
      firstBlock = b.create<arith::DivUIOp>(loc, first, size);
      Value firstBlockStart = b.create<arith::MulIOp>(loc, firstBlock, size);
      firstOffset = b.create<arith::SubIOp>(loc, first, firstBlockStart);
      Value afterFirst = b.create<arith::AddIOp>(loc, firstBlock, one);
      fullStart = b.create<arith::MinUIOp>(loc, afterFirst, last);
      // The last block is also the first when the window starts inside it.
      Value sameBlock = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, firstBlock, last);
      lastLower = b.create<arith::SelectOp>(loc, sameBlock, firstOffset, indexConstant(b, loc, 0));
    }
    // Blocks outside, heads inside: a block's keys (and values) for all heads are one contiguous
    // [H, S, d] piece of the pool (48 KiB for GPT-2 small), read front to back, where a loop over
    // heads outside would read each block in H scattered 4 KiB pieces, a pattern that streams from
    // memory at half the rate or less. Each head's online-softmax state (m, l, acc) is a row of
    // [G], [G] and [G, d] tensors (G = groupSize heads) carried through the block loop.
    SmallVector<Value> state = initialSoftmaxState(b, loc, groupSize, headDim);
    if (window > 0) {
      // The window's first block, masked below firstOffset, when it comes before the last
      // (zero or one iteration).
      auto leading =
          b.create<scf::ForOp>(loc, firstBlock, fullStart, indexConstant(b, loc, 1), state,
                               [&](OpBuilder &nb, Location, Value blockIndex, ValueRange blockState) {
                                 Value block = extractIndex(nb, loc, tables, {sequence, blockIndex});
                                 nb.create<scf::YieldOp>(loc, everyHead(nb, token, firstHead, block, firstOffset,
                                                                        /*upper=*/nullptr, blockState));
                               });
      state = leading.getResults();
    }
    auto fullBlocks =
        b.create<scf::ForOp>(loc, fullStart, last, indexConstant(b, loc, 1), state,
                             [&](OpBuilder &nb, Location, Value blockIndex, ValueRange blockState) {
                               Value block = extractIndex(nb, loc, tables, {sequence, blockIndex});
                               nb.create<scf::YieldOp>(loc, everyHead(nb, token, firstHead, block, /*lower=*/nullptr,
                                                                      /*upper=*/nullptr, blockState));
                             });
    state = everyHead(b, token, firstHead, lastBlock, lastLower, visible, fullBlocks.getResults());
    // acc / l, head by head: the [G, d] result of the token's heads.
    Value normalized = normalizedSoftmaxOutput(b, loc, state);
    return b.create<tensor::InsertSliceOp>(loc, normalized, out, SmallVector<OpFoldResult>(2, b.getIndexAttr(0)),
                                           sizesOf(b, {groupSize, headDim}), sizesOf(b, {1, 1}));
  }

  /// One block's online-softmax step for heads firstHead .. firstHead + groupSize - 1 of the
  /// token, over their [G], [G] and [G, d] state (G = groupSize; see keyBlock for `lower` and
  /// `upper`).
  SmallVector<Value> everyHead(OpBuilder &b, Value token, Value firstHead, Value block, Value lower, Value upper,
                               ValueRange state) {
    auto headLoop = b.create<scf::ForOp>(
        loc, indexConstant(b, loc, 0), indexConstant(b, loc, groupSize), indexConstant(b, loc, 1), state,
        [&](OpBuilder &hb, Location, Value row, ValueRange headsState) {
          Value head = firstHead ? hb.create<arith::AddIOp>(loc, firstHead, row).getResult() : row;
          auto rowType = RankedTensorType::get({headDim}, hb.getF32Type());
          SmallVector<OpFoldResult> queryOffsets = {head, token, hb.getIndexAttr(0)};
          Value q = hb.create<tensor::ExtractSliceOp>(loc, rowType, query, queryOffsets, sizesOf(hb, {1, 1, headDim}),
                                                      sizesOf(hb, {1, 1, 1}));
          // This head's rows of the state: [1], [1], [1, d].
          SmallVector<OpFoldResult> rowOffsets = {row}, accOffsets = {row, hb.getIndexAttr(0)};
          auto scalarRow = RankedTensorType::get({1}, hb.getF32Type());
          auto accRow = RankedTensorType::get({1, headDim}, hb.getF32Type());
          SmallVector<Value> headState = {hb.create<tensor::ExtractSliceOp>(loc, scalarRow, headsState[0], rowOffsets,
                                                                            sizesOf(hb, {1}), sizesOf(hb, {1})),
                                          hb.create<tensor::ExtractSliceOp>(loc, scalarRow, headsState[1], rowOffsets,
                                                                            sizesOf(hb, {1}), sizesOf(hb, {1})),
                                          hb.create<tensor::ExtractSliceOp>(loc, accRow, headsState[2], accOffsets,
                                                                            sizesOf(hb, {1, headDim}),
                                                                            sizesOf(hb, {1, 1}))};
          SmallVector<Value> updated = keyBlock(hb, q, block, head, lower, upper, headState);
          SmallVector<Value> written = {hb.create<tensor::InsertSliceOp>(loc, updated[0], headsState[0], rowOffsets,
                                                                         sizesOf(hb, {1}), sizesOf(hb, {1})),
                                        hb.create<tensor::InsertSliceOp>(loc, updated[1], headsState[1], rowOffsets,
                                                                         sizesOf(hb, {1}), sizesOf(hb, {1})),
                                        hb.create<tensor::InsertSliceOp>(loc, updated[2], headsState[2], accOffsets,
                                                                         sizesOf(hb, {1, headDim}),
                                                                         sizesOf(hb, {1, 1}))};
          hb.create<scf::YieldOp>(loc, written);
        });
    return headLoop.getResults();
  }

  AffineMap id(int64_t rank) const { return AffineMap::getMultiDimIdentityMap(rank, ctx); }

  /// One block's online-softmax step over (m, l, acc). The token sees the block's keys from
  /// `lower` (null: 0) up to before `upper` (null: all of them); with both null the block is
  /// full and the mask is not evaluated.
  SmallVector<Value> keyBlock(OpBuilder &b, Value q, Value block, Value head, Value lower, Value upper,
                              ValueRange state) {
    const bool masked = lower || upper;
    // Grouped-query attention: query head h reads the pool's key/value head h / (H / Hkv).
    Value kvHead = queriesPerKv == 1 ? head : b.create<arith::DivUIOp>(loc, head, indexConstant(b, loc, queriesPerKv));
    Value keys = blockRows(b, loc, keyPool, block, kvHead), values = blockRows(b, loc, valuePool, block, kvHead);
    // s[j] = k[j] . q: a row reduction over the head dimension, read as [1, S] through the
    // consumer's map (an expand_shape would be propagated into the reduction, which would then
    // not look like a row reduction).
    AffineMap byKey = AffineMap::get(2, 0, getAffineDimExpr(1, ctx));
    // A half-width pool's keys are widened to f32 as the reduction reads them.
    Value dots = buildRowReduction(b, loc, {blockSize, headDim}, {keys, q}, {id(2), byKey}, 0.0,
                                   [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                     Value key = widenToF32(nb, l, a[0]);
                                     return nb.create<arith::AddFOp>(l, a[2], nb.create<arith::MulFOp>(l, key, a[1]));
                                   });
    auto visibleKey = [&](OpBuilder &nb, Location l, ValueRange) -> Value {
      Value key = nb.create<linalg::IndexOp>(l, 1);
      Value seen;
      if (upper) seen = nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::ult, key, upper);
      if (lower) {
        Value inWindow = nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::uge, key, lower);
        seen = seen ? nb.create<arith::AndIOp>(l, seen, inWindow).getResult() : inWindow;
      }
      return seen;
    };
    // scale * s, and -inf outside the keys the token sees in a partial block.
    Value scores =
        buildGeneric(b, loc, emptyTensor(b, loc, {1, blockSize}), {dots}, {byKey}, id(2),
                     SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
                     [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                       Value scaled = nb.create<arith::MulFOp>(l, a[0], f32Constant(nb, l, scale));
                       if (!masked) return scaled;
                       return nb.create<arith::SelectOp>(l, visibleKey(nb, l, a), scaled, f32Constant(nb, l, kNegInf));
                     });
    return onlineSoftmaxUpdate(b, loc, scores, values, state, masked ? KeyVisibility(visibleKey) : KeyVisibility());
  }

  Location loc;
  MLIRContext *ctx;
  Value query, keyPool, valuePool, tables, sequences, positions;
  float scale;
  int64_t window; // 0: none
  int64_t heads = 0, tokens = 0, headDim = 0, blockSize = 0;
  int64_t groupSize = 0;    // heads per iteration of the token loop
  int64_t queriesPerKv = 1; // query heads per key/value head of the pools (grouped-query attention)
};

struct PagedAttentionLowering : OpConversionPattern<PagedAttentionOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(PagedAttentionOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, PagedAttention(op, adaptor).build(rewriter));
    return success();
  }
};

} // namespace

void populatePagedAttentionLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<PagedCacheWriteLowering, PagedAttentionLowering>(patterns.getContext());
}

} // namespace gpt::conversion
