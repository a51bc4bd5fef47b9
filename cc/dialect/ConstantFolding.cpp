// Constant folding of transformer ops whose operands are all `transformer.constant`.
#include "cc/dialect/ConstantFolding.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::transformer {
namespace {

/// Row-major strides of `shape`, with stride 0 for broadcast (size-1) dims and for the
/// leading dims `shape` lacks relative to a result of rank `resultRank`.
SmallVector<int64_t> broadcastStrides(ArrayRef<int64_t> shape, int64_t resultRank) {
  SmallVector<int64_t> strides(resultRank, 0);
  int64_t stride = 1;
  for (int64_t i = shape.size() - 1; i >= 0; --i) {
    if (shape[i] != 1) strides[resultRank - shape.size() + i] = stride;
    stride *= shape[i];
  }
  return strides;
}

/// Calls `body(linearIndex, multiIndex)` for every element of a static `shape`, in row-major order.
void forEachIndex(ArrayRef<int64_t> shape, llvm::function_ref<void(int64_t, ArrayRef<int64_t>)> body) {
  SmallVector<int64_t> index(shape.size(), 0);
  int64_t count = ShapedType::getNumElements(shape);
  for (int64_t linear = 0; linear < count; ++linear) {
    body(linear, index);
    for (int64_t d = shape.size() - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

int64_t dot(ArrayRef<int64_t> index, ArrayRef<int64_t> strides) {
  int64_t offset = 0;
  for (auto [i, s] : llvm::zip(index, strides)) offset += i * s;
  return offset;
}

} // namespace

bool isSplatOf(Attribute attr, float value) {
  auto elements = dyn_cast_or_null<DenseFPElementsAttr>(attr);
  if (!elements || !elements.getElementType().isF32()) return false;
  if (elements.isSplat()) return elements.getSplatValue<float>() == value;
  return llvm::all_of(elements.getValues<float>(), [&](float v) { return v == value; });
}

namespace {
bool isSplat(Attribute attr) {
  auto elements = dyn_cast_or_null<DenseElementsAttr>(attr);
  return elements && elements.isSplat();
}

/// Whether a static `type` has at most kMaxFoldedElements elements (no overflow on the way).
bool isSmall(Type type) {
  auto shaped = dyn_cast<RankedTensorType>(type);
  if (!shaped || !shaped.hasStaticShape()) return false;
  int64_t count = 1;
  for (int64_t d : shaped.getShape())
    if (llvm::MulOverflow(count, d, count) || count > kMaxFoldedElements) return false;
  return true;
}
} // namespace

bool isCheapToFold(Value result, Attribute operand) { return isSplat(operand) || isSmall(result.getType()); }

bool isCheapToFold(Value result, Attribute lhs, Attribute rhs) {
  return (isSplat(lhs) && isSplat(rhs)) || isSmall(result.getType());
}

DenseElementsAttr foldBinaryConstants(Value result, DenseElementsAttr lhs, DenseElementsAttr rhs,
                                      llvm::function_ref<float(float, float)> fn) {
  auto type = cast<RankedTensorType>(result.getType());
  if (lhs.isSplat() && rhs.isSplat())
    return DenseElementsAttr::get(type, fn(lhs.getSplatValue<float>(), rhs.getSplatValue<float>()));
  SmallVector<float> a(lhs.getValues<float>()), b(rhs.getValues<float>());
  SmallVector<int64_t> aStrides = broadcastStrides(cast<ShapedType>(lhs.getType()).getShape(), type.getRank());
  SmallVector<int64_t> bStrides = broadcastStrides(cast<ShapedType>(rhs.getType()).getShape(), type.getRank());
  SmallVector<float> out(type.getNumElements());
  forEachIndex(type.getShape(), [&](int64_t linear, ArrayRef<int64_t> index) {
    out[linear] = fn(a[dot(index, aStrides)], b[dot(index, bStrides)]);
  });
  return DenseElementsAttr::get(type, ArrayRef<float>(out));
}

DenseElementsAttr foldNegConstant(Value result, DenseElementsAttr input) {
  auto type = cast<RankedTensorType>(result.getType());
  if (input.isSplat()) return DenseElementsAttr::get(type, -input.getSplatValue<float>());
  SmallVector<float> out;
  for (float v : input.getValues<float>()) out.push_back(-v);
  return DenseElementsAttr::get(type, ArrayRef<float>(out));
}

DenseElementsAttr foldTransposeConstant(Value result, DenseElementsAttr input) {
  auto type = cast<RankedTensorType>(result.getType());
  if (input.isSplat()) return DenseElementsAttr::get(type, input.getSplatValue<float>());
  SmallVector<float> in(input.getValues<float>());
  ArrayRef<int64_t> inShape = cast<ShapedType>(input.getType()).getShape();
  // Strides of the input, read with the last two result indices exchanged.
  SmallVector<int64_t> strides(inShape.size());
  int64_t stride = 1;
  for (int64_t i = inShape.size() - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= inShape[i];
  }
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  SmallVector<float> out(type.getNumElements());
  forEachIndex(type.getShape(),
               [&](int64_t linear, ArrayRef<int64_t> index) { out[linear] = in[dot(index, strides)]; });
  return DenseElementsAttr::get(type, ArrayRef<float>(out));
}

} // namespace mlir::transformer
