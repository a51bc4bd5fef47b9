// Lowering of transformer.causal_attention to a fused, flash-attention style loop nest.
#include "cc/TargetParameters.h"
#include "cc/conversion/KvCacheQ8_0.h"
#include "cc/conversion/LoweringUtils.h"
#include "cc/conversion/OnlineSoftmax.h"
#include "cc/conversion/Passes.h"
#include "cc/dialect/AttentionTiles.h"
#include "cc/dialect/ShapeFunctions.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/Support/MathExtras.h"

#include <limits>

namespace gpt::conversion {
using namespace mlir;
using namespace mlir::transformer;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// The most queries of a cached step (a runtime query offset) that take one query per block.
/// Speculative verification runs the step with k+1 tokens (k drafted, at most 16 rows by default)
/// and compares each row's logits with what decode would give: one query at a time, each row's
/// dot products, masking and online softmax updates are decode's, in decode's order, so its bits
/// are decode's whatever the row count. A block of several queries (attentionBlockSize) sums
/// q . k^T as a matmul, in another order (up to 0.6 in a 4-bit SmolLM2's logit at 2 rows). Longer
/// steps (prefill at an offset) keep the blocks, whose key tiles are shared by their queries.
constexpr int64_t kMaxOneByOneStepQueries = 16;

/// The query block of the lowering: attentionBlockSize's, or 1 in a cached step of at most
/// kMaxOneByOneStepQueries queries without tile classes (those were computed for
/// attentionBlockSize's blocks).
int64_t queryBlockSize(CausalAttentionOp op, Value queryOffset, int64_t queries) {
  if (queryOffset && queries <= kMaxOneByOneStepQueries && !op.getTileSizes()) return 1;
  return attentionBlockSize(queries);
}

/// The key blocks a loop visits, per query block, in compressed-row form: query block qb visits
/// key blocks `blocks[starts[qb]] .. blocks[starts[qb + 1] - 1]`.
struct KeyBlockList {
  SmallVector<int64_t> starts{0}, blocks;
};

/// The key blocks of each query block in tile_classes of class `kind`, in order.
KeyBlockList keyBlocksOfClass(ArrayAttr classes, TileClass kind) {
  KeyBlockList list;
  for (StringRef row : classes.getAsValueRange<StringAttr>()) {
    for (auto [kb, letter] : llvm::enumerate(row))
      if (letter == char(kind)) list.blocks.push_back(kb);
    list.starts.push_back(list.blocks.size());
  }
  return list;
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
  /// The values of a row (head_dim): for a q8_0 cache fewer than its bytes (width()).
  int64_t cols() const { return *transformer::kvCacheHeadDim(rankedType(tensor).getElementType(), width()); }
  /// The elements of a row as stored.
  int64_t width() const { return rankedType(tensor).getDimSize(2); }

  /// Rows row .. row + rows - 1 of head `head`, as a [rows, cols] tensor of the operand's element
  /// type (a half-width KV cache's keys and values are widened where they are read), or of f32
  /// for a q8_0 cache: its rows are dequantized here, once per block, as a half-width block is
  /// widened once for p . v.
  Value slice(OpBuilder &b, Location loc, Value head, Value row, int64_t rows) const {
    HeadRegion region(b, tokenMajor, head, 1, row, rows, width());
    auto type = RankedTensorType::get({rows, width()}, rankedType(tensor).getElementType());
    Value stored = b.create<tensor::ExtractSliceOp>(loc, type, tensor, region.offsets, region.sizes, region.strides);
    return isQ8_0Cache(tensor) ? dequantizedQ8_0Rows(b, loc, stored) : stored;
  }
};

/// Fused causal attention, flash-attention style: for each (query) head and each block of Bq queries,
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
/// With tile_classes (--transformer-classify-attention-tiles: static positions, or a constant
/// mask operand), each query block instead visits exactly its non-empty key blocks, read from
/// two constant tables: first its full tiles, which skip the mask, then its partial ones, which
/// evaluate it (the causal/window rule, or the mask operand's bits). The online softmax does
/// not depend on the order of the key blocks.
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
        maskExpression(op.getMaskExpression().empty() ? nullptr : &op.getMaskExpression()),
        tileClasses(op.getTileClassesAttr()), scale(op.getScale().convertToFloat()), heads(queryRows.heads()),
        group(queryRows.heads() / keyRows.heads()), queries(queryRows.rows()), keys(keyRows.rows()),
        valueSize(valueRows.cols()), bq(queryBlockSize(op, adaptor.getQueryOffset(), queries)),
        bk(attentionBlockSize(keys)), id2(AffineMap::getMultiDimIdentityMap(2, ctx)),
        parallel2(2, utils::IteratorType::parallel) {}

  /// The attention's result, [H, Tq, dv] (token-major: [Tq, H, dv]). `maskBits`: the constant
  /// mask operand's data, when the op has one.
  Value build(OpBuilder &b, DenseElementsAttr maskBits) {
    offset = queryOffset ? queryOffset : b.create<arith::ConstantIndexOp>(loc, 0).getResult();
    if (maskBits) mask = byteMask(b, maskBits);
    if (maskExpression && queryOffset && queries == 1) seenBlocks = seenKeyBlocks(b);
    if (tileClasses)
      for (auto [table, kind] : {std::pair{&fullTiles, TileClass::Full}, {&partialTiles, TileClass::Partial}}) {
        KeyBlockList list = keyBlocksOfClass(tileClasses, kind);
        *table = {indexTable(b, list.starts), indexTable(b, list.blocks)};
      }
    return headLoop(b);
  }

private:
  /// The scores of a query block against a key block, and the map through which the [bq, bk]
  /// iteration space reads them.
  struct Scores {
    Value value;
    AffineMap map;
  };

  /// A KeyBlockList as two constant index tensors.
  struct KeyBlockTable {
    Value starts, blocks;
  };

  Value index(OpBuilder &b, int64_t value) const { return b.create<arith::ConstantIndexOp>(loc, value).getResult(); }

  // An empty list still gets one (never read) element: a tensor<0xindex> constant is legal, but
  // a global of no bytes is not worth a corner case further down the pipeline.
  Value indexTable(OpBuilder &b, ArrayRef<int64_t> values) const {
    SmallVector<int64_t> padded(values);
    if (padded.empty()) padded.push_back(0);
    auto type = RankedTensorType::get({int64_t(padded.size())}, b.getIndexType());
    return b.create<arith::ConstantOp>(loc, DenseIntElementsAttr::get(type, padded));
  }

  // The mask as one byte per (query, key), nonzero where visible. Not i1: a vector of i1 is
  // bit-packed in memory while a buffer of i1 holds a byte per element, so vectorized reads of
  // an i1 buffer would read the wrong bits.
  Value byteMask(OpBuilder &b, DenseElementsAttr bits) const {
    auto type = RankedTensorType::get(cast<ShapedType>(bits.getType()).getShape(), b.getI8Type());
    DenseElementsAttr bytes;
    if (bits.isSplat()) {
      bytes = DenseElementsAttr::get(type, b.getI8IntegerAttr(bits.getSplatValue<bool>()));
    } else {
      SmallVector<int8_t> values;
      values.reserve(bits.getNumElements());
      for (bool bit : bits.getValues<bool>()) values.push_back(bit);
      bytes = DenseElementsAttr::get(type, ArrayRef<int8_t>(values));
    }
    return b.create<arith::ConstantOp>(loc, bytes);
  }

  Value element(OpBuilder &b, Value table, Value position) const {
    return b.create<tensor::ExtractOp>(loc, table, ValueRange{position});
  }

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
    SmallVector<Value> init = initialSoftmaxState(b, loc, bq, valueSize);
    SmallVector<Value> state = tileClasses ? classifiedKeyLoops(b, head, queryStart, qBlock, init)
                                           : bandKeyLoop(b, head, queryStart, qBlock, init);
    Value normalized = normalizedSoftmaxOutput(b, loc, state);
    // `out` is this iteration's [headsPerIteration, Tq, dv] slice of the result (token-major:
    // [Tq, headsPerIteration, dv]); `localHead` the head's index in it.
    HeadRegion region(b, tokenMajorResult, localHead, 1, queryStart, bq, valueSize);
    return b.create<tensor::InsertSliceOp>(loc, normalized, out, region.offsets, region.sizes, region.strides);
  }

  // The key loops of a classified query block: over its full tiles (unmasked), then over its
  // partial tiles (masked), each reading the key block indices from its table.
  SmallVector<Value> classifiedKeyLoops(OpBuilder &b, Value head, Value queryStart, Value qBlock,
                                        SmallVector<Value> state) {
    Value queryBlockIndex = b.create<arith::DivUIOp>(loc, queryStart, index(b, bq));
    Value nextQueryBlock = b.create<arith::AddIOp>(loc, queryBlockIndex, index(b, 1));
    for (auto [table, partial] : {std::pair{&fullTiles, false}, {&partialTiles, true}}) {
      Value first = element(b, table->starts, queryBlockIndex), last = element(b, table->starts, nextQueryBlock);
      auto loop = b.create<scf::ForOp>(
          loc, first, last, index(b, 1), state, [&](OpBuilder &nb, Location, Value entry, ValueRange loopState) {
            Value keyBlockIndex = element(nb, table->blocks, entry);
            Value keyStart = nb.create<arith::MulIOp>(loc, keyBlockIndex, index(nb, bk));
            nb.create<scf::YieldOp>(loc, keyBlock(nb, head, queryStart, keyStart, qBlock, loopState, partial));
          });
      state = SmallVector<Value>(loop.getResults());
    }
    return state;
  }

  // The key loop of an unclassified query block (a runtime offset): every key block from the
  // window's first (or 0) to the diagonal's last, each masked. An unclassified constant mask
  // operand bounds nothing: every key block, each masked; an unclassified mask expression every
  // key block up to the last new token's (the keys written so far), each masked.
  SmallVector<Value> bandKeyLoop(OpBuilder &b, Value head, Value queryStart, Value qBlock, ValueRange init) {
    if (mask) return maskedKeyLoop(b, head, queryStart, qBlock, init, index(b, 0), index(b, keys));
    if (maskExpression) {
      if (!queryOffset) return maskedKeyLoop(b, head, queryStart, qBlock, init, index(b, 0), index(b, keys));
      Value written =
          b.create<arith::MinUIOp>(loc, b.create<arith::AddIOp>(loc, offset, index(b, queries)), index(b, keys));
      Value keyBlocks =
          b.create<arith::DivUIOp>(loc, b.create<arith::AddIOp>(loc, written, index(b, bk - 1)), index(b, bk));
      return maskedKeyLoop(b, head, queryStart, qBlock, init, index(b, 0),
                           b.create<arith::MulIOp>(loc, keyBlocks, index(b, bk)));
    }
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
    return maskedKeyLoop(b, head, queryStart, qBlock, init, keyBegin, keyEnd);
  }

  // Every key block from keyBegin to keyEnd, each masked; with seenBlocks (a decode step under a
  // mask expression) only those in which the query sees a key: a strided or fixed mask then reads
  // its band's and its sparse keys' blocks, not every block up to the position.
  SmallVector<Value> maskedKeyLoop(OpBuilder &b, Value head, Value queryStart, Value qBlock, ValueRange init,
                                   Value keyBegin, Value keyEnd) {
    auto keyLoop = b.create<scf::ForOp>(
        loc, keyBegin, keyEnd, index(b, bk), init, [&](OpBuilder &nb, Location, Value keyStart, ValueRange state) {
          if (!seenBlocks) {
            nb.create<scf::YieldOp>(loc, keyBlock(nb, head, queryStart, keyStart, qBlock, state, /*partial=*/true));
            return;
          }
          Value blockSize = index(nb, bk);
          Value blockIndex = nb.create<arith::DivUIOp>(loc, keyStart, blockSize);
          Value flag = element(nb, seenBlocks, blockIndex);
          Value zero = nb.create<arith::ConstantIntOp>(loc, 0, 8);
          Value seen = nb.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, flag, zero);
          auto visit = nb.create<scf::IfOp>(
              loc, seen,
              [&](OpBuilder &tb, Location) {
                tb.create<scf::YieldOp>(loc, keyBlock(tb, head, queryStart, keyStart, qBlock, state, /*partial=*/true));
              },
              [&](OpBuilder &eb, Location) { eb.create<scf::YieldOp>(loc, state); });
          nb.create<scf::YieldOp>(loc, visit.getResults());
        });
    return SmallVector<Value>(keyLoop.getResults());
  }

  // A decode step's one query under a mask expression: per key block written so far, 1 if the
  // expression shows the query any of its keys, else 0 (bytes, as byteMask says why). Computed
  // once before the head loop (it does not depend on the head); a block's keys are tried one by
  // one up to the first visible one, so a block in a band costs one evaluation and only a block
  // with nothing to see is read to its end. Entries past the written keys are never read.
  Value seenKeyBlocks(OpBuilder &b) const {
    int64_t blocks = llvm::divideCeil(keys, bk);
    // One sequential op per statement: nested creates in one argument list would order the IR
    // by the compiler's argument evaluation order.
    Value one = index(b, 1), keyCount = index(b, keys), roundUp = index(b, bk - 1), blockSize = index(b, bk);
    Value next = b.create<arith::AddIOp>(loc, offset, one);
    Value written = b.create<arith::MinUIOp>(loc, next, keyCount);
    Value writtenRoundedUp = b.create<arith::AddIOp>(loc, written, roundUp);
    Value writtenBlocks = b.create<arith::DivUIOp>(loc, writtenRoundedUp, blockSize);
    Value empty = b.create<tensor::EmptyOp>(loc, ArrayRef<int64_t>{blocks}, b.getI8Type());
    Value zero = index(b, 0);
    auto loop = b.create<scf::ForOp>(loc, zero, writtenBlocks, one, ValueRange{empty},
                                     [&](OpBuilder &nb, Location, Value block, ValueRange flags) {
                                       Value keyStart = nb.create<arith::MulIOp>(loc, block, blockSize);
                                       Value any = anyKeyVisible(nb, offset, keyStart);
                                       Value seen = nb.create<arith::ExtUIOp>(loc, nb.getI8Type(), any);
                                       Value updated = nb.create<tensor::InsertOp>(loc, seen, flags[0], block);
                                       nb.create<scf::YieldOp>(loc, updated);
                                     });
    return loop.getResult(0);
  }

  // Whether the mask expression shows the query at `position` any key of the block from
  // keyStart, its keys tried in order up to the first visible one.
  Value anyKeyVisible(OpBuilder &b, Value position, Value keyStart) const {
    Value first = index(b, 0), none = b.create<arith::ConstantIntOp>(loc, 0, 1);
    Value blockSize = index(b, bk), step = index(b, 1), found = b.create<arith::ConstantIntOp>(loc, 1, 1);
    Type i1 = b.getI1Type(), indexType = b.getIndexType();
    auto search = b.create<scf::WhileOp>(
        loc, TypeRange{indexType, i1}, ValueRange{first, none},
        [&](OpBuilder &cb, Location, ValueRange args) {
          Value inBlock = cb.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, args[0], blockSize);
          Value notYet = cb.create<arith::XOrIOp>(loc, args[1], found);
          Value goOn = cb.create<arith::AndIOp>(loc, inBlock, notYet);
          cb.create<scf::ConditionOp>(loc, goOn, args);
        },
        [&](OpBuilder &nb, Location, ValueRange args) {
          Value j = nb.create<arith::AddIOp>(loc, keyStart, args[0]);
          Value seen = evaluateExpression(nb, loc, position, j);
          Value next = nb.create<arith::AddIOp>(loc, args[0], step);
          nb.create<scf::YieldOp>(loc, ValueRange{next, seen});
        });
    return search.getResult(1);
  }

  // One key block of one query block: (m, l, acc) -> (m', l', acc'). Only a partial tile
  // evaluates the mask.
  SmallVector<Value> keyBlock(OpBuilder &b, Value head, Value queryStart, Value keyStart, Value qBlock,
                              ValueRange state, bool partial) {
    // Grouped-query attention: query head h reads key/value head h / (H / Hkv).
    Value kvHead = group == 1 ? head : b.create<arith::DivUIOp>(loc, head, index(b, group)).getResult();
    Value kBlock = keyRows.slice(b, loc, kvHead, keyStart, bk), vBlock = valueRows.slice(b, loc, kvHead, keyStart, bk);
    Scores s = scores(b, qBlock, kBlock);
    std::optional<TileMask> tileMask;
    if (partial) tileMask = TileMask{queryStart, keyStart, maskTile(b, queryStart, keyStart)};
    Value masked = maskAndScale(b, s, tileMask);
    return onlineSoftmaxUpdate(b, masked, vBlock, tileMask, state);
  }

  /// What a partial tile's mask is evaluated from: its first query and key, and the [bq, bk]
  /// bits of the mask operand there (null when the causal rule and window decide).
  struct TileMask {
    Value queryStart, keyStart, bits;
  };

  Value maskTile(OpBuilder &b, Value queryStart, Value keyStart) const {
    if (!mask) return {};
    auto type = RankedTensorType::get({bq, bk}, b.getI8Type());
    SmallVector<OpFoldResult> offsets = {queryStart, keyStart}, sizes = {b.getIndexAttr(bq), b.getIndexAttr(bk)},
                              strides(2, b.getIndexAttr(1));
    return b.create<tensor::ExtractSliceOp>(loc, type, mask, offsets, sizes, strides);
  }

  /// The inputs (and maps) of a generic over a [bq, bk] tile, with the mask bits appended in a
  /// partial tile of a mask operand; the bits are then the body's argument `inputs.size()`.
  void appendMaskBits(const std::optional<TileMask> &tileMask, SmallVector<Value> &inputs,
                      SmallVector<AffineMap> &maps) const {
    if (!tileMask || !tileMask->bits) return;
    inputs.push_back(tileMask->bits);
    maps.push_back(id2);
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
      // A half-width cache's keys are widened to f32 as the reduction reads them.
      Value dots = buildRowReduction(b, loc, {bk, headDim}, {kBlock, qRow},
                                     {id2, AffineMap::get(2, 0, getAffineDimExpr(1, ctx))}, 0.0,
                                     [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                       Value key = widenToF32(nb, l, a[0]);
                                       return nb.create<arith::AddFOp>(l, a[2], nb.create<arith::MulFOp>(l, key, a[1]));
                                     });
      // Read as [1, bk] through the consumer's indexing map: an expand_shape here would be
      // propagated into the reduction, which would then not look like a row reduction.
      return {dots, AffineMap::get(2, 0, getAffineDimExpr(1, ctx))};
    }
    // (A half-width cache's keys are widened to f32 in the same copy.)
    Value product =
        b.create<linalg::MatmulOp>(loc, ValueRange{qBlock, widenedTile(b, loc, kBlock, /*transposed=*/true)},
                                   ValueRange{filled(b, loc, {bq, bk})})
            .getResult(0);
    return {product, id2};
  }

  // True where key keyStart + j is visible from query queryStart + i in a partial tile: the mask
  // operand's bit (body argument `bitsArg`), or j <= offset + i, and with a window W also
  // offset + i < j + W.
  Value visible(OpBuilder &nb, Location l, const TileMask &tileMask, ValueRange args, size_t bitsArg) const {
    if (tileMask.bits) {
      Value zero = nb.create<arith::ConstantIntOp>(l, 0, 8);
      return nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::ne, args[bitsArg], zero);
    }
    Value queryStart = tileMask.queryStart, keyStart = tileMask.keyStart;
    Value i = nb.create<arith::AddIOp>(l, queryStart, nb.create<linalg::IndexOp>(l, 0));
    Value j = nb.create<arith::AddIOp>(l, keyStart, nb.create<linalg::IndexOp>(l, 1));
    Value position = nb.create<arith::AddIOp>(l, i, offset);
    if (maskExpression) return evaluateExpression(nb, l, position, j);
    Value causal = nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::ule, j, position);
    if (!window) return causal;
    Value inWindow = nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::ult, position,
                                              nb.create<arith::AddIOp>(l, j, index(nb, *window)));
    return nb.create<arith::AndIOp>(l, causal, inWindow);
  }

  // The mask expression at (query position, key), its ops cloned inline; with a runtime offset
  // also j < offset + Tq: keys past the last new token are not written yet.
  Value evaluateExpression(OpBuilder &nb, Location l, Value position, Value j) const {
    Block &body = maskExpression->front();
    IRMapping mapping;
    mapping.map(body.getArgument(0), position);
    mapping.map(body.getArgument(1), j);
    for (Operation &op : body.without_terminator()) nb.clone(op, mapping);
    Value seen = mapping.lookup(cast<YieldOp>(body.getTerminator()).getValue());
    if (!queryOffset) return seen;
    Value end = nb.create<arith::AddIOp>(l, offset, index(nb, queries));
    Value written = nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::ult, j, end);
    return nb.create<arith::AndIOp>(l, seen, written);
  }

  // scale * s where the key is visible, -inf where the mask hides it (a partial tile's only).
  Value maskAndScale(OpBuilder &b, Scores s, const std::optional<TileMask> &tileMask) {
    SmallVector<Value> inputs = {s.value};
    SmallVector<AffineMap> maps = {s.map};
    appendMaskBits(tileMask, inputs, maps);
    return buildGeneric(b, loc, emptyTensor(b, loc, {bq, bk}), inputs, maps, id2, parallel2,
                        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                          Value scaled = nb.create<arith::MulFOp>(l, a[0], f32Constant(nb, l, scale));
                          if (!tileMask) return scaled;
                          return nb.create<arith::SelectOp>(l, visible(nb, l, *tileMask, a, 1), scaled,
                                                            f32Constant(nb, l, kNegInf));
                        });
  }

  // The online softmax step of one key block over the running state (m, l, acc). In a partial
  // tile p is forced to 0 for hidden keys. A mask operand is not read (an expression not
  // evaluated) a second time: its masked scores are exactly -inf (maskAndScale), and a visible
  // score is finite. Each partial tile then
  // reads its piece of a mask that may be far larger than the caches ([4096, 4096] bytes) once.
  SmallVector<Value> onlineSoftmaxUpdate(OpBuilder &b, Value masked, Value vBlock,
                                         const std::optional<TileMask> &tileMask, ValueRange state) {
    auto visibleKey = [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
      if (tileMask->bits || maskExpression)
        return nb.create<arith::CmpFOp>(l, arith::CmpFPredicate::ONE, a[0], f32Constant(nb, l, kNegInf));
      return visible(nb, l, *tileMask, a, /*bitsArg=*/0);
    };
    return conversion::onlineSoftmaxUpdate(b, loc, masked, vBlock, state,
                                           tileMask ? KeyVisibility(visibleKey) : KeyVisibility());
  }

  Location loc;
  MLIRContext *ctx;
  HeadRows queryRows, keyRows, valueRows;
  bool tokenMajorResult;
  Value queryOffset, offset;     // the operand (may be null), and the index the loops use
  Value mask;                    // the [Tq, Tk] mask as bytes (byteMask), when the op has one
  Value seenBlocks;              // a decode step's visited key blocks (seenKeyBlocks), when it has them
  std::optional<int64_t> window; // the sliding window W, when the mask has one
  Region *maskExpression;        // the op's `visible` region, when it has one
  ArrayAttr tileClasses;         // --transformer-classify-attention-tiles' result, when it ran
  KeyBlockTable fullTiles, partialTiles;
  float scale;
  int64_t heads, group, queries, keys, valueSize, bq, bk; // group: query heads per key/value head
  AffineMap id2;
  SmallVector<utils::IteratorType> parallel2;
};

struct CausalAttentionLowering : OpConversionPattern<CausalAttentionOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(CausalAttentionOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    if (std::optional<ArrayRef<int64_t>> sizes = op.getTileSizes()) {
      int64_t queries = rankedType(adaptor.getQuery()).getDimSize(op.getQueryTokenMajor() ? 0 : 1);
      int64_t keys = rankedType(adaptor.getKey()).getDimSize(op.getKeyTokenMajor() ? 0 : 1);
      if ((*sizes)[0] != attentionBlockSize(queries) || (*sizes)[1] != attentionBlockSize(keys))
        return op.emitOpError() << "tile_sizes [" << (*sizes)[0] << ", " << (*sizes)[1]
                                << "] are not the lowering's blocks: rerun --transformer-classify-attention-tiles";
    }
    DenseElementsAttr maskBits;
    if (op.getMask() && !matchPattern(op.getMask(), m_Constant(&maskBits)))
      return op.emitOpError() << "the mask must be a compile-time constant (an arith.constant)";
    rewriter.replaceOp(op, FlashAttention(op, adaptor).build(rewriter, maskBits));
    return success();
  }
};

} // namespace

void populateAttentionLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<CausalAttentionLowering>(patterns.getContext());
}

} // namespace gpt::conversion
