// Classification of causal_attention's (query block, key block) tiles as empty, full or partial.
#include "cc/dialect/AttentionTiles.h"
#include "cc/dialect/MaskExpression.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"

#include <algorithm>

namespace mlir::transformer {

int64_t attentionBlockSize(int64_t n) {
  int64_t block = 32;
  while (n % block != 0) block /= 2;
  return block;
}

namespace {

/// The number of queries and keys of `op` (its logical [H, Tq, d] x [H, Tk, d]), when static.
std::optional<std::pair<int64_t, int64_t>> staticQueriesAndKeys(CausalAttentionOp op) {
  auto q = dyn_cast<RankedTensorType>(op.getQuery().getType());
  auto k = dyn_cast<RankedTensorType>(op.getKey().getType());
  if (!q || !k || !q.hasStaticShape() || !k.hasStaticShape()) return std::nullopt;
  return std::pair{q.getDimSize(op.getQueryTokenMajor() ? 0 : 1), k.getDimSize(op.getKeyTokenMajor() ? 0 : 1)};
}

/// The tile of queries [q0, q1] and keys [k0, k1] under "key j visible from query i iff
/// j <= i and (with a window W) i - W < j": a band around the diagonal, so the corners decide.
TileClass classifyBand(int64_t q0, int64_t q1, int64_t k0, int64_t k1, std::optional<int64_t> window) {
  // Empty: even the last query is before the first key, or the first query's window ends before
  // the last key... i.e. the nearest (query, key) pair is outside the band.
  if (k0 > q1) return TileClass::Empty;
  if (window && k1 <= q0 - *window) return TileClass::Empty;
  // Full: the farthest pairs are inside it (the first query sees the last key, the last query
  // still sees the first key).
  bool causalFull = k1 <= q0;
  bool windowFull = !window || k0 > q1 - *window;
  return causalFull && windowFull ? TileClass::Full : TileClass::Partial;
}

/// A tile of `count` visible pairs out of `pairs`.
char tileOfCount(int64_t count, int64_t pairs) {
  return char(count == 0 ? TileClass::Empty : count == pairs ? TileClass::Full : TileClass::Partial);
}

/// `classes` filled by evaluating op's mask expression pair by pair; unclassified when some pair has
/// no compile-time value.
FailureOr<std::optional<TileClasses>> classifyByExpression(CausalAttentionOp op, TileClasses classes, int64_t queries,
                                                           int64_t keys) {
  int64_t bq = classes.queryBlock, bk = classes.keyBlock;
  std::optional<MaskEvaluator> visible = MaskEvaluator::compile(op.getMaskExpression());
  if (!visible) return std::optional<TileClasses>();
  SmallVector<int64_t> rowVisible(bq);
  for (int64_t qb = 0; qb < queries / bq; ++qb) {
    std::fill(rowVisible.begin(), rowVisible.end(), 0);
    for (int64_t kb = 0; kb < keys / bk; ++kb) {
      int64_t count = 0;
      for (int64_t i = qb * bq; i < qb * bq + bq; ++i)
        for (int64_t j = kb * bk; j < kb * bk + bk; ++j) {
          std::optional<bool> bit = (*visible)(i, j);
          if (!bit) return std::optional<TileClasses>(); // no value here: leave it to run time
          count += *bit;
          rowVisible[i - qb * bq] += *bit;
        }
      classes.rows[qb][kb] = tileOfCount(count, bq * bk);
    }
    for (int64_t i = 0; i < bq; ++i)
      if (rowVisible[i] == 0)
        return op.emitOpError() << "the mask expression lets query " << qb * bq + i
                                << " see no key: softmax over no keys has no value";
  }
  return std::optional<TileClasses>(std::move(classes));
}

/// `classes` filled by the causal rule (with its window), tile corner by tile corner.
std::optional<TileClasses> classifyBands(TileClasses classes, int64_t queries, int64_t keys,
                                         std::optional<int64_t> window) {
  int64_t bq = classes.queryBlock, bk = classes.keyBlock;
  for (int64_t qb = 0; qb < queries / bq; ++qb)
    for (int64_t kb = 0; kb < keys / bk; ++kb)
      classes.rows[qb][kb] = char(classifyBand(qb * bq, qb * bq + bq - 1, kb * bk, kb * bk + bk - 1, window));
  return classes;
}

/// `classes` filled by counting the visible pairs of op's constant boolean mask in each tile.
FailureOr<std::optional<TileClasses>> classifyByMask(CausalAttentionOp op, TileClasses classes, int64_t queries,
                                                     int64_t keys) {
  int64_t bq = classes.queryBlock, bk = classes.keyBlock;
  DenseElementsAttr bits;
  if (!matchPattern(op.getMask(), m_Constant(&bits)))
    return op.emitOpError() << "the mask must be a compile-time constant (an arith.constant), to be classified "
                            << "tile by tile";
  // Per tile: how many of its bq * bk pairs are visible.
  SmallVector<int64_t> visible((queries / bq) * (keys / bk), 0);
  int64_t row = 0, col = 0, rowVisible = 0;
  for (bool bit : bits.getValues<bool>()) {
    if (bit) {
      ++visible[(row / bq) * (keys / bk) + col / bk];
      ++rowVisible;
    }
    if (++col == keys) {
      if (rowVisible == 0)
        return op.emitOpError() << "mask row " << row << " sees no key: softmax over no keys has no value";
      col = 0;
      rowVisible = 0;
      ++row;
    }
  }
  for (int64_t qb = 0; qb < queries / bq; ++qb)
    for (int64_t kb = 0; kb < keys / bk; ++kb)
      classes.rows[qb][kb] = tileOfCount(visible[qb * (keys / bk) + kb], bq * bk);
  return std::optional<TileClasses>(std::move(classes));
}

} // namespace

FailureOr<std::optional<TileClasses>> classifyAttentionTiles(CausalAttentionOp op) {
  std::optional<std::pair<int64_t, int64_t>> dims = staticQueriesAndKeys(op);
  if (!dims || op.getQueryOffset()) return std::optional<TileClasses>();
  auto [queries, keys] = *dims;
  int64_t bq = attentionBlockSize(queries), bk = attentionBlockSize(keys);
  // The table has a letter per tile, and a mask is read bit by bit: past these sizes (far beyond
  // any sequence a model runs) the causal rule keeps the lowering's run-time band instead of a
  // table, and a mask is refused, rather than exhausting memory or time at compile time.
  constexpr int64_t kMaxTiles = int64_t(1) << 22, kMaxMaskBits = int64_t(1) << 28;
  const bool tooManyTiles = queries / bq > kMaxTiles / std::max<int64_t>(keys / bk, 1);
  const bool expression = !op.getMaskExpression().empty();
  if (!op.getMask() && tooManyTiles) return std::optional<TileClasses>();
  // An expression is evaluated pair by pair: past the mask-size cap it stays unclassified (every
  // tile visited and masked), which is slower but right.
  if (expression && queries > kMaxMaskBits / std::max<int64_t>(keys, 1)) return std::optional<TileClasses>();
  if (op.getMask() && (tooManyTiles || queries > kMaxMaskBits / std::max<int64_t>(keys, 1)))
    return op.emitOpError() << "a mask over " << queries << " queries and " << keys
                            << " keys is too large to classify tile by tile (at most " << kMaxMaskBits
                            << " mask bits and " << kMaxTiles << " tiles)";
  TileClasses classes{bq, bk, SmallVector<std::string>(queries / bq, std::string(keys / bk, char(TileClass::Empty)))};
  if (expression) return classifyByExpression(op, std::move(classes), queries, keys);
  if (!op.getMask()) return classifyBands(std::move(classes), queries, keys, op.getWindow());
  return classifyByMask(op, std::move(classes), queries, keys);
}

LogicalResult verifyTileClasses(Operation *op, ArrayRef<int64_t> sizes, ArrayAttr classes, int64_t queries,
                                int64_t keys) {
  if (sizes.size() != 2 || sizes[0] < 1 || sizes[1] < 1)
    return op->emitOpError() << "tile_sizes must be two positive block sizes [Bq, Bk]";
  if (queries % sizes[0] != 0 || keys % sizes[1] != 0)
    return op->emitOpError() << "tile_sizes [" << sizes[0] << ", " << sizes[1] << "] must divide the " << queries
                             << " queries and " << keys << " keys";
  if (int64_t(classes.size()) != queries / sizes[0])
    return op->emitOpError() << "tile_classes must have one entry per block of " << sizes[0] << " queries ("
                             << queries / sizes[0] << "), got " << classes.size();
  for (auto [qb, entry] : llvm::enumerate(classes.getAsValueRange<StringAttr>())) {
    if (int64_t(entry.size()) != keys / sizes[1])
      return op->emitOpError() << "tile_classes[" << qb << "] must have one letter per block of " << sizes[1]
                               << " keys (" << keys / sizes[1] << "), got \"" << entry << "\"";
    if (entry.find_first_not_of("EFP") != StringRef::npos)
      return op->emitOpError() << "tile_classes[" << qb << "] = \"" << entry
                               << "\" may hold only E (empty), F (full) and P (partial)";
  }
  return success();
}

} // namespace mlir::transformer
