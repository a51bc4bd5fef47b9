// Builders shared by the transformer-to-linalg patterns (see LoweringUtils.h).
#include "cc/conversion/LoweringUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/TypeUtilities.h"

namespace gpt::conversion {
using namespace mlir;

RankedTensorType rankedType(Value v) { return cast<RankedTensorType>(v.getType()); }

Value f32Constant(OpBuilder &b, Location loc, double value) {
  return b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(static_cast<float>(value)));
}

Value emptyTensor(OpBuilder &b, Location loc, ArrayRef<int64_t> shape) {
  return b.create<tensor::EmptyOp>(loc, shape, b.getF32Type());
}

Value filled(OpBuilder &b, Location loc, ArrayRef<int64_t> shape, double value) {
  return b.create<linalg::FillOp>(loc, f32Constant(b, loc, value), emptyTensor(b, loc, shape)).getResult(0);
}

AffineMap broadcastMap(ArrayRef<int64_t> shape, ArrayRef<int64_t> resultShape, MLIRContext *ctx) {
  int64_t rank = resultShape.size(), offset = rank - shape.size();
  SmallVector<AffineExpr> exprs;
  for (auto [i, size] : llvm::enumerate(shape)) {
    bool broadcast = size == 1 && resultShape[offset + i] != 1;
    exprs.push_back(broadcast ? getAffineConstantExpr(0, ctx) : getAffineDimExpr(offset + i, ctx));
  }
  return AffineMap::get(rank, 0, exprs, ctx);
}

AffineMap rowMap(int64_t rank, MLIRContext *ctx) {
  // Built from its results (getMajorSubMap(0) is a null map): a rank-1 op reduces to a scalar.
  SmallVector<AffineExpr> rows;
  for (int64_t i = 0; i + 1 < rank; ++i) rows.push_back(getAffineDimExpr(i, ctx));
  return AffineMap::get(rank, 0, rows, ctx);
}

AffineMap featureMap(int64_t rank, MLIRContext *ctx) {
  return AffineMap::get(rank, 0, getAffineDimExpr(rank - 1, ctx));
}

Value buildGeneric(OpBuilder &b, Location loc, Value init, ValueRange inputs, ArrayRef<AffineMap> inputMaps,
                   AffineMap outputMap, ArrayRef<utils::IteratorType> iterators, BodyBuilder body) {
  SmallVector<AffineMap> maps(inputMaps);
  maps.push_back(outputMap);
  auto generic = b.create<linalg::GenericOp>(
      loc, init.getType(), inputs, ValueRange{init}, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) { nb.create<linalg::YieldOp>(nloc, body(nb, nloc, args)); });
  return generic.getResult(0);
}

Value buildElementwise(OpBuilder &b, Location loc, RankedTensorType resultType, ValueRange inputs, BodyBuilder body) {
  MLIRContext *ctx = b.getContext();
  SmallVector<AffineMap> maps;
  for (Value input : inputs)
    maps.push_back(broadcastMap(cast<RankedTensorType>(input.getType()).getShape(), resultType.getShape(), ctx));
  SmallVector<utils::IteratorType> iterators(resultType.getRank(), utils::IteratorType::parallel);
  return buildGeneric(b, loc, emptyTensor(b, loc, resultType.getShape()), inputs, maps,
                      AffineMap::getMultiDimIdentityMap(resultType.getRank(), ctx), iterators, body);
}

Value buildRowReduction(OpBuilder &b, Location loc, ArrayRef<int64_t> shape, ValueRange inputs,
                        ArrayRef<AffineMap> inputMaps, double initValue, BodyBuilder body) {
  int64_t rank = shape.size();
  Value init = filled(b, loc, shape.drop_back(), initValue);
  SmallVector<utils::IteratorType> iterators(rank, utils::IteratorType::parallel);
  iterators.back() = utils::IteratorType::reduction;
  return buildGeneric(b, loc, init, inputs, inputMaps, rowMap(rank, b.getContext()), iterators, body);
}

SmallVector<ReassociationIndices> collapseLeading(int64_t n, int64_t rank) {
  SmallVector<ReassociationIndices> groups(1);
  for (int64_t i = 0; i < n; ++i) groups[0].push_back(i);
  for (int64_t i = n; i < rank; ++i) groups.push_back({i});
  return groups;
}

Value collapse(OpBuilder &b, Location loc, Value v, int64_t n) {
  return b.create<tensor::CollapseShapeOp>(loc, v, collapseLeading(n, rankedType(v).getRank()));
}

Value transpose(OpBuilder &b, Location loc, Value input, ArrayRef<int64_t> permutation) {
  ArrayRef<int64_t> in = rankedType(input).getShape();
  SmallVector<int64_t> shape = llvm::map_to_vector(permutation, [&](int64_t p) { return in[p]; });
  return b.create<linalg::TransposeOp>(loc, input, emptyTensor(b, loc, shape), permutation).getResult()[0];
}

namespace {
/// An integer constant of `type`'s shape (a splat for a vector type).
Value integerConstant(OpBuilder &b, Location loc, Type type, int64_t value) {
  auto vector = dyn_cast<VectorType>(type);
  Type element = vector ? vector.getElementType() : type;
  TypedAttr scalar = b.getIntegerAttr(element, value);
  if (!vector) return b.create<arith::ConstantOp>(loc, scalar);
  return b.create<arith::ConstantOp>(loc, DenseElementsAttr::get(vector, scalar));
}

/// `like`'s shape (scalar or vector) with element type `element`.
Type withElement(Type like, Type element) {
  if (auto vector = dyn_cast<VectorType>(like)) return vector.clone(element);
  return element;
}
} // namespace

Value roundToElement(OpBuilder &b, Location loc, Value value, Type element) {
  Type type = value.getType();
  if (element.isF32()) return value;
  if (!element.isBF16()) return b.create<arith::TruncFOp>(loc, withElement(type, element), value);
  Type i32 = withElement(type, b.getI32Type()), i16 = withElement(type, b.getI16Type());
  Value bits = b.create<arith::BitcastOp>(loc, i32, value);
  Value sixteen = integerConstant(b, loc, i32, 16);
  Value high = b.create<arith::ShRUIOp>(loc, bits, sixteen);
  // Adding 0x7fff plus the lowest kept bit carries into the kept bits exactly when the dropped
  // half is above one half ulp, or equal to it with an odd kept part: round half to even.
  Value lowestKept = b.create<arith::AndIOp>(loc, high, integerConstant(b, loc, i32, 1));
  Value bias = b.create<arith::AddIOp>(loc, lowestKept, integerConstant(b, loc, i32, 0x7fff));
  Value rounded = b.create<arith::ShRUIOp>(loc, b.create<arith::AddIOp>(loc, bits, bias), sixteen);
  // A NaN keeps its sign and top mantissa bits, made quiet (the carry could turn it into inf).
  Value magnitude = b.create<arith::AndIOp>(loc, bits, integerConstant(b, loc, i32, 0x7fffffff));
  Value isNan =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ugt, magnitude, integerConstant(b, loc, i32, 0x7f800000));
  Value quietNan = b.create<arith::OrIOp>(loc, high, integerConstant(b, loc, i32, 0x40));
  Value chosen = b.create<arith::SelectOp>(loc, isNan, quietNan, rounded);
  Value narrow = b.create<arith::TruncIOp>(loc, i16, chosen);
  return b.create<arith::BitcastOp>(loc, withElement(type, element), narrow);
}

Value widenToF32(OpBuilder &b, Location loc, Value value) {
  Type type = value.getType();
  if (getElementTypeOrSelf(type).isF32()) return value;
  return b.create<arith::ExtFOp>(loc, withElement(type, b.getF32Type()), value);
}

Value widenedTile(OpBuilder &b, Location loc, Value tile, bool transposed) {
  RankedTensorType type = rankedType(tile);
  if (type.getElementType().isF32()) return transposed ? transpose(b, loc, tile, {1, 0}) : tile;
  MLIRContext *ctx = b.getContext();
  SmallVector<int64_t> shape(type.getShape());
  AffineMap id = AffineMap::getMultiDimIdentityMap(2, ctx), read = id;
  if (transposed) {
    std::swap(shape[0], shape[1]);
    read = AffineMap::getPermutationMap(ArrayRef<unsigned>{1, 0}, ctx);
  }
  return buildGeneric(b, loc, emptyTensor(b, loc, shape), {tile}, {read}, id,
                      SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
                      [](OpBuilder &nb, Location l, ValueRange a) { return widenToF32(nb, l, a[0]); });
}

Value splitDim(OpBuilder &b, Location loc, Value value, int64_t dim, ArrayRef<int64_t> shape) {
  RankedTensorType type = rankedType(value);
  SmallVector<int64_t> expanded;
  SmallVector<ReassociationIndices> groups;
  for (int64_t i = 0; i < type.getRank(); ++i) {
    ReassociationIndices group;
    for (int64_t size : i == dim ? shape : ArrayRef<int64_t>(type.getShape()[i])) {
      group.push_back(expanded.size());
      expanded.push_back(size);
    }
    groups.push_back(group);
  }
  return b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get(expanded, type.getElementType()), value, groups);
}

Value sliceAt(OpBuilder &b, Location loc, Value value, int64_t dim, int64_t at) {
  RankedTensorType type = rankedType(value);
  SmallVector<int64_t> shape(type.getShape());
  shape.erase(shape.begin() + dim);
  SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0)), sizes,
      strides(type.getRank(), b.getIndexAttr(1));
  offsets[dim] = b.getIndexAttr(at);
  for (int64_t i = 0; i < type.getRank(); ++i) sizes.push_back(b.getIndexAttr(i == dim ? 1 : type.getDimSize(i)));
  return b.create<tensor::ExtractSliceOp>(loc, RankedTensorType::get(shape, type.getElementType()), value, offsets,
                                          sizes, strides);
}

Value i32Constant(OpBuilder &b, Location loc, int64_t value) {
  return b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(static_cast<int32_t>(value)));
}

Value zeros(OpBuilder &b, Location loc, ArrayRef<int64_t> shape, Type element) {
  Value empty = b.create<tensor::EmptyOp>(loc, shape, element);
  Value zero = b.create<arith::ConstantOp>(loc, b.getZeroAttr(element));
  return b.create<linalg::FillOp>(loc, zero, empty).getResult(0);
}

Value buildParallel(OpBuilder &b, Location loc, ArrayRef<int64_t> shape, Type element, ValueRange inputs,
                    ArrayRef<AffineMap> inputMaps, BodyBuilder body) {
  Value init = b.create<tensor::EmptyOp>(loc, shape, element);
  SmallVector<utils::IteratorType> iterators(shape.size(), utils::IteratorType::parallel);
  return buildGeneric(b, loc, init, inputs, inputMaps, b.getMultiDimIdentityMap(shape.size()), iterators, body);
}

} // namespace gpt::conversion
