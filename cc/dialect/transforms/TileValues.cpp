// The tile values of masked computations: which tiles of a [M, N] tensor are exactly 0 or -inf,
// carried from constants through the elementwise ops, softmax, transpose and matmul after them.
#include "cc/dialect/transforms/TileValues.h"

#include "cc/dialect/AttentionTiles.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseMap.h"

#include <cmath>

namespace mlir::transformer {

namespace {

// The letters of a tile value. Values that come from no constant (weights, activations) are
// taken to be finite: D.
constexpr char kZero = 'Z', // every element +-0
    kNegInf = 'N',          // every element -inf
    kDense = 'D',           // every element finite
    kAny = 'A';             // anything, infinities included (a tile a mask cuts: 0s and -infs)

/// Per tile of a static [M, N] value (blocks of attentionBlockSize(M) x attentionBlockSize(N)),
/// row-major: one of the letters above.
struct TileGrid {
  int64_t rows = 0, cols = 0; // tile counts
  std::string values;
  char at(int64_t r, int64_t c) const { return values[r * cols + c]; }
};

std::optional<std::pair<int64_t, int64_t>> matrixShape(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || type.getRank() != 2 || !type.hasStaticShape()) return std::nullopt;
  return std::pair{type.getDimSize(0), type.getDimSize(1)};
}

TileGrid denseGrid(int64_t m, int64_t n) {
  int64_t rows = m / attentionBlockSize(m), cols = n / attentionBlockSize(n);
  return {rows, cols, std::string(rows * cols, kDense)};
}

/// A constant's tiles: Z where every element is +-0, N where every one is -inf, D where every
/// one is finite, else A.
std::optional<TileGrid> constantGrid(Value value) {
  std::optional<std::pair<int64_t, int64_t>> shape = matrixShape(value);
  DenseElementsAttr data;
  if (!shape || !matchPattern(value, m_Constant(&data)) || !isa<FloatType>(data.getElementType())) return std::nullopt;
  auto [m, n] = *shape;
  int64_t bm = attentionBlockSize(m), bn = attentionBlockSize(n);
  TileGrid grid = denseGrid(m, n);
  std::vector<bool> allZero(grid.values.size(), true), allNegInf(grid.values.size(), true),
      allFinite(grid.values.size(), true);
  int64_t index = 0;
  for (const APFloat &x : data.getValues<APFloat>()) {
    int64_t tile = (index / n / bm) * grid.cols + (index % n) / bn;
    allZero[tile] = allZero[tile] && x.isZero();
    allNegInf[tile] = allNegInf[tile] && x.isInfinity() && x.isNegative();
    allFinite[tile] = allFinite[tile] && x.isFinite();
    ++index;
  }
  for (size_t t = 0; t < grid.values.size(); ++t)
    grid.values[t] = allZero[t] ? kZero : allNegInf[t] ? kNegInf : allFinite[t] ? kDense : kAny;
  return grid;
}

// The rules, one per op, each tested on its own in
// tests/dialect/transformer-classify-attention-tiles.mlir:
//
//   add:  Z + Z = Z;  N + x = N for x in {Z, D, N} (-inf plus anything finite);  Z + D = D + D = D
//         (a dense operand makes the tile dense);  anything + A = A
//   mul:  Z * x = Z for x in {Z, D} (a multiply by zero stays zero);  D * D = D;  otherwise A
//         (0 * -inf is NaN, -inf * x has x's sign)
//   neg:  Z -> Z, D -> D, N -> A (+inf), A -> A
//   relu: Z -> Z, N -> Z (max(-inf, 0) = 0), D -> D, A -> A
//   softmax (over rows): when a row of tiles has a Z or D tile (so every row of elements has a
//         finite element), its N tiles become Z (exp of -inf is zero) and the others D
//         (probabilities); otherwise every tile A
//   transpose: the grid transposed
//   matmul A [M, K] x B [K, N]: tile (i, j) is Z when mul(A(i, k), B(k, j)) is Z for every k
//         block, D when every such product is Z or D, else A
char addRule(char a, char b) {
  if (a == kAny || b == kAny) return kAny;
  if (a == kNegInf || b == kNegInf) return kNegInf;
  return a == kZero && b == kZero ? kZero : kDense;
}
char mulRule(char a, char b) {
  if ((a == kZero && (b == kZero || b == kDense)) || (b == kZero && a == kDense)) return kZero;
  return a == kDense && b == kDense ? kDense : kAny;
}
char negRule(char a) { return a == kNegInf ? kAny : a; }
char reluRule(char a) { return a == kNegInf ? kZero : a; }

/// add and mul: `rule` tile by tile; std::nullopt when the grids differ in shape.
std::optional<TileGrid> binaryGrid(const TileGrid &a, const TileGrid &b, char (*rule)(char, char)) {
  if (a.values.size() != b.values.size() || a.cols != b.cols) return std::nullopt;
  TileGrid out = a;
  for (size_t t = 0; t < out.values.size(); ++t) out.values[t] = rule(a.values[t], b.values[t]);
  return out;
}

/// neg and relu: `rule` tile by tile.
TileGrid unaryGrid(TileGrid in, char (*rule)(char)) {
  for (char &v : in.values) v = rule(v);
  return in;
}

TileGrid softmaxGrid(const TileGrid &in) {
  TileGrid out = in;
  for (int64_t r = 0; r < in.rows; ++r) {
    bool finiteInEveryRow = false;
    for (int64_t c = 0; c < in.cols; ++c) finiteInEveryRow |= in.at(r, c) == kZero || in.at(r, c) == kDense;
    for (int64_t c = 0; c < in.cols; ++c)
      out.values[r * in.cols + c] = !finiteInEveryRow ? kAny : in.at(r, c) == kNegInf ? kZero : kDense;
  }
  return out;
}

TileGrid transposeGrid(const TileGrid &in) {
  TileGrid out{in.cols, in.rows, std::string(in.values.size(), kDense)};
  for (int64_t r = 0; r < in.rows; ++r)
    for (int64_t c = 0; c < in.cols; ++c) out.values[c * in.rows + r] = in.at(r, c);
  return out;
}

/// std::nullopt when the inner tile counts differ.
std::optional<TileGrid> matmulGrid(const TileGrid &a, const TileGrid &b) {
  if (a.cols != b.rows) return std::nullopt;
  TileGrid out{a.rows, b.cols, std::string(a.rows * b.cols, kDense)};
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < b.cols; ++j) {
      bool zero = true, finite = true;
      for (int64_t k = 0; k < a.cols; ++k) {
        char product = mulRule(a.at(i, k), b.at(k, j));
        zero &= product == kZero;
        finite &= product != kAny;
      }
      out.values[i * out.cols + j] = zero ? kZero : finite ? kDense : kAny;
    }
  return out;
}

class Propagation {
public:
  /// The grid of `value`, when something about it is known.
  std::optional<TileGrid> known(Value value) {
    if (auto it = grids.find(value); it != grids.end()) return it->second;
    return constantGrid(value);
  }
  /// The grid of `value`, all D when nothing is known (a weight, an activation).
  std::optional<TileGrid> orDense(Value value) {
    if (std::optional<TileGrid> grid = known(value)) return grid;
    if (std::optional<std::pair<int64_t, int64_t>> shape = matrixShape(value))
      return denseGrid(shape->first, shape->second);
    return std::nullopt;
  }

  /// The grid of `op`'s result from its operands' grids; std::nullopt when no operand is known.
  std::optional<TileGrid> visit(Operation *op) {
    if (op->getNumResults() != 1 || !matrixShape(op->getResult(0))) return std::nullopt;
    if (llvm::none_of(op->getOperands(), [&](Value v) { return known(v).has_value(); })) return std::nullopt;
    if (isa<AddOp, MulOp>(op)) {
      std::optional<TileGrid> a = orDense(op->getOperand(0)), b = orDense(op->getOperand(1));
      if (!a || !b) return std::nullopt;
      return binaryGrid(*a, *b, isa<AddOp>(op) ? addRule : mulRule);
    }
    if (isa<NegOp, ReluOp>(op)) return unaryGrid(*orDense(op->getOperand(0)), isa<NegOp>(op) ? negRule : reluRule);
    if (isa<SoftmaxOp>(op)) return softmaxGrid(*orDense(op->getOperand(0)));
    if (isa<TransposeOp>(op)) return transposeGrid(*orDense(op->getOperand(0)));
    if (isa<MatmulOp>(op)) {
      std::optional<TileGrid> a = orDense(op->getOperand(0)), b = orDense(op->getOperand(1));
      if (!a || !b) return std::nullopt;
      return matmulGrid(*a, *b);
    }
    return std::nullopt;
  }

  void record(Operation *op, TileGrid grid) {
    Builder b(op->getContext());
    auto [m, n] = *matrixShape(op->getResult(0));
    SmallVector<std::string> rows;
    for (int64_t r = 0; r < grid.rows; ++r) rows.push_back(grid.values.substr(r * grid.cols, grid.cols));
    op->setAttr(kTileValuesAttr, b.getStrArrayAttr(SmallVector<StringRef>(rows.begin(), rows.end())));
    op->setAttr(kTileValueSizesAttr, b.getDenseI64ArrayAttr({attentionBlockSize(m), attentionBlockSize(n)}));
    grids[op->getResult(0)] = std::move(grid);
  }

private:
  llvm::DenseMap<Value, TileGrid> grids;
};

} // namespace

void propagateTileValues(Operation *root) {
  Propagation propagation;
  root->walk([&](Operation *op) {
    if (std::optional<TileGrid> grid = propagation.visit(op)) propagation.record(op, std::move(*grid));
  });
}

} // namespace mlir::transformer
