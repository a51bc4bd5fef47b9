// The small rules ShapeFunctions.cpp and PackedWeightShapes.cpp share: the f32 result types they
// build, dims that may be dynamic, and the errors for rank and overflow. Internal to this directory.
#ifndef GPT_CC_DIALECT_SHAPERULES_H
#define GPT_CC_DIALECT_SHAPERULES_H

#include "cc/dialect/ShapeFunctions.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::transformer::shape_rules {

inline Type f32(MLIRContext *ctx) { return Float32Type::get(ctx); }

inline TensorType unranked(Type like) { return UnrankedTensorType::get(f32(like.getContext())); }

inline TensorType ranked(ArrayRef<int64_t> shape, Type like) {
  return RankedTensorType::get(shape, f32(like.getContext()));
}

inline bool dimsCompatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

inline LogicalResult checkRank(RankedTensorType type, int64_t minRank, StringRef what, EmitErrorFn emitError) {
  if (type.getRank() >= minRank) return success();
  return emitError() << what << " must have rank >= " << minRank << ", got " << type;
}

/// a * b for dims, dynamic if either is; failure where the product overflows int64 (a type such
/// as tensor<4611686018427387904x2x4xf32> is legal MLIR, and an overflow would wrap to a bogus
/// static size).
inline FailureOr<int64_t> multiplyDims(int64_t a, int64_t b) {
  if (ShapedType::isDynamic(a) || ShapedType::isDynamic(b)) return ShapedType::kDynamic;
  int64_t product;
  if (llvm::MulOverflow(a, b, product)) return failure();
  return product;
}

/// The error for a dimension product that does not fit in int64.
inline InFlightDiagnostic overflowError(EmitErrorFn emitError, int64_t a, int64_t b, Type type) {
  return emitError() << "dimension " << a << " * " << b << " of " << type << " overflows a 64-bit size";
}

} // namespace mlir::transformer::shape_rules

#endif // GPT_CC_DIALECT_SHAPERULES_H
