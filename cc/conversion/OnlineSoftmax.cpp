// The online softmax step both attention lowerings share (see OnlineSoftmax.h).
#include "cc/conversion/OnlineSoftmax.h"

#include "cc/conversion/LoweringUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <limits>

namespace gpt::conversion {
using namespace mlir;

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
} // namespace

SmallVector<Value> initialSoftmaxState(OpBuilder &b, Location loc, int64_t rows, int64_t valueSize) {
  return {filled(b, loc, {rows}, kNegInf), filled(b, loc, {rows}), filled(b, loc, {rows, valueSize})};
}

SmallVector<Value> onlineSoftmaxUpdate(OpBuilder &b, Location loc, Value masked, Value values, ValueRange state,
                                       KeyVisibility visibleKey) {
  MLIRContext *ctx = b.getContext();
  ArrayRef<int64_t> tile = rankedType(masked).getShape();
  const int64_t bq = tile[0], bk = tile[1], valueSize = rankedType(values).getDimSize(1);
  AffineMap id2 = AffineMap::getMultiDimIdentityMap(2, ctx), row2 = rowMap(2, ctx),
            id1 = AffineMap::getMultiDimIdentityMap(1, ctx);
  SmallVector<utils::IteratorType> parallel2(2, utils::IteratorType::parallel),
      parallel1(1, utils::IteratorType::parallel);
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
  // m' = max(m, blockMax) over m, after `correction` has read m.
  Value newMax =
      buildGeneric(b, loc, m, {blockMax}, {id1}, id1, parallel1, [](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return nb.create<arith::MaximumFOp>(l, a[1], a[0]);
      });
  Value probs = buildGeneric(b, loc, emptyTensor(b, loc, {bq, bk}), {masked, newMax}, {id2, row2}, id2, parallel2,
                             [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                               Value e = nb.create<math::ExpOp>(l, nb.create<arith::SubFOp>(l, a[0], a[1]));
                               if (!visibleKey) return e;
                               return nb.create<arith::SelectOp>(l, visibleKey(nb, l, a), e, f32Constant(nb, l, 0.0));
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
  // A half-width cache's values are widened to f32 once per block: p . v accumulates in f32.
  Value update = b.create<linalg::MatmulOp>(loc, ValueRange{probs, widenedTile(b, loc, values)},
                                            ValueRange{filled(b, loc, {bq, valueSize})})
                     .getResult(0);
  // acc' = c acc + p . v, over acc.
  Value newAcc = buildGeneric(b, loc, acc, {correction, update}, {row2, id2}, id2, parallel2,
                              [](OpBuilder &nb, Location l, ValueRange a) -> Value {
                                return nb.create<arith::AddFOp>(l, nb.create<arith::MulFOp>(l, a[2], a[0]), a[1]);
                              });
  return {newMax, newSum, newAcc};
}

Value normalizedSoftmaxOutput(OpBuilder &b, Location loc, ValueRange state) {
  MLIRContext *ctx = b.getContext();
  Value sum = state[1], acc = state[2];
  ArrayRef<int64_t> shape = rankedType(acc).getShape();
  AffineMap id2 = AffineMap::getMultiDimIdentityMap(2, ctx);
  return buildGeneric(
      b, loc, emptyTensor(b, loc, shape), {acc, sum}, {id2, rowMap(2, ctx)}, id2,
      SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
      [](OpBuilder &nb, Location l, ValueRange a) -> Value { return nb.create<arith::DivFOp>(l, a[0], a[1]); });
}

} // namespace gpt::conversion
