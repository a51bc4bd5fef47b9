// Result-type rules of the transformer ops (see ShapeFunctions.h).
#include "cc/dialect/ShapeFunctions.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"

namespace mlir::transformer {
namespace {

Type f32(MLIRContext *ctx) { return Float32Type::get(ctx); }

TensorType unranked(Type like) { return UnrankedTensorType::get(f32(like.getContext())); }

TensorType ranked(ArrayRef<int64_t> shape, Type like) {
  return RankedTensorType::get(shape, f32(like.getContext()));
}

bool dimsCompatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

LogicalResult checkRank(RankedTensorType type, int64_t minRank, StringRef what, EmitErrorFn emitError) {
  if (type.getRank() >= minRank) return success();
  return emitError() << what << " must have rank >= " << minRank << ", got " << type;
}

} // namespace

FailureOr<TensorType> inferBroadcastType(Type lhs, Type rhs, EmitErrorFn emitError) {
  auto l = dyn_cast<RankedTensorType>(lhs);
  auto r = dyn_cast<RankedTensorType>(rhs);
  if (!l || !r) return unranked(lhs);
  int64_t rank = std::max(l.getRank(), r.getRank());
  SmallVector<int64_t> shape(rank);
  for (int64_t i = 0; i < rank; ++i) {
    // Walk from the innermost dim outwards; a missing dim acts as 1.
    int64_t li = l.getRank() - 1 - i, ri = r.getRank() - 1 - i;
    int64_t a = li >= 0 ? l.getDimSize(li) : 1;
    int64_t b = ri >= 0 ? r.getDimSize(ri) : 1;
    int64_t &out = shape[rank - 1 - i];
    if (a == b) out = a;
    else if (a == 1) out = b;
    else if (b == 1) out = a;
    // An unknown dim broadcast against a known N > 1 must be 1 or N: either way the result is N.
    else if (ShapedType::isDynamic(a)) out = b;
    else if (ShapedType::isDynamic(b)) out = a;
    else
      return emitError() << "operands are not broadcast-compatible: " << lhs << " and " << rhs
                         << " (dimension " << a << " vs " << b << ")";
  }
  return ranked(shape, lhs);
}

FailureOr<TensorType> inferSameShapeType(Type input, int64_t minRank, EmitErrorFn emitError) {
  auto in = dyn_cast<RankedTensorType>(input);
  if (!in) return unranked(input);
  if (failed(checkRank(in, minRank, "input", emitError))) return failure();
  return ranked(in.getShape(), input);
}

FailureOr<TensorType> inferTransposeType(Type input, EmitErrorFn emitError) {
  auto in = dyn_cast<RankedTensorType>(input);
  if (!in) return unranked(input);
  if (failed(checkRank(in, 2, "input", emitError))) return failure();
  SmallVector<int64_t> shape(in.getShape());
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  return ranked(shape, input);
}

FailureOr<TensorType> inferMatmulType(Type lhs, Type rhs, EmitErrorFn emitError) {
  auto l = dyn_cast<RankedTensorType>(lhs);
  auto r = dyn_cast<RankedTensorType>(rhs);
  if (!l || !r) return unranked(lhs);
  if (failed(checkRank(l, 2, "lhs", emitError)) || failed(checkRank(r, 2, "rhs", emitError)))
    return failure();
  int64_t k1 = l.getDimSize(l.getRank() - 1), k2 = r.getDimSize(r.getRank() - 2);
  if (!dimsCompatible(k1, k2))
    return emitError() << "contraction dimensions do not match: lhs " << lhs << " has " << k1
                       << " columns but rhs " << rhs << " has " << k2 << " rows";
  ArrayRef<int64_t> lBatch = l.getShape().drop_back(2), rBatch = r.getShape().drop_back(2);
  SmallVector<int64_t> shape(lBatch);
  if (r.getRank() != 2) {
    bool same = lBatch.size() == rBatch.size() &&
                llvm::all_of(llvm::zip(lBatch, rBatch),
                             [](auto p) { return dimsCompatible(std::get<0>(p), std::get<1>(p)); });
    if (!same)
      return emitError() << "batch dimensions do not match: lhs " << lhs << ", rhs " << rhs
                         << " (rhs must be rank 2 or have the same leading dimensions as lhs)";
    for (auto [i, d] : llvm::enumerate(rBatch))
      if (ShapedType::isDynamic(shape[i])) shape[i] = d;
  }
  shape.push_back(l.getDimSize(l.getRank() - 2));
  shape.push_back(r.getDimSize(r.getRank() - 1));
  return ranked(shape, lhs);
}

FailureOr<TensorType> inferLayerNormType(Type input, Type weight, Type bias, EmitErrorFn emitError) {
  auto in = dyn_cast<RankedTensorType>(input);
  if (!in) return unranked(input);
  if (failed(checkRank(in, 1, "input", emitError))) return failure();
  int64_t features = in.getShape().back();
  for (auto [name, type] : {std::pair<StringRef, Type>{"weight", weight}, {"bias", bias}}) {
    auto t = dyn_cast<RankedTensorType>(type);
    if (t && (t.getRank() != 1 || !dimsCompatible(t.getDimSize(0), features)))
      return emitError() << name << " " << type << " must be a rank-1 tensor of size " << features
                         << ", the last dimension of input " << input;
  }
  return ranked(in.getShape(), input);
}

LogicalResult verifyCompatibleResult(Type declared, TensorType inferred, EmitErrorFn emitError) {
  auto d = dyn_cast<RankedTensorType>(declared);
  auto i = dyn_cast<RankedTensorType>(inferred);
  if (!d || !i) return success();
  bool ok = d.getRank() == i.getRank() &&
            llvm::all_of(llvm::zip(d.getShape(), i.getShape()),
                         [](auto p) { return dimsCompatible(std::get<0>(p), std::get<1>(p)); });
  if (ok) return success();
  return emitError() << "result type " << declared << " does not match the type " << inferred
                     << " implied by the operands";
}

} // namespace mlir::transformer
