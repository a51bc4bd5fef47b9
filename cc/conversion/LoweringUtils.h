// Builders shared by the transformer-to-linalg patterns: constants, empty and filled tensors,
// indexing maps, linalg.generic shapes (elementwise, row reduction), reshapes and transposes, and
// the rounding and widening of a half-width KV cache's elements.
#ifndef GPT_CC_CONVERSION_LOWERINGUTILS_H
#define GPT_CC_CONVERSION_LOWERINGUTILS_H

#include "mlir/Dialect/Utils/ReshapeOpsUtils.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace gpt::conversion {

/// Builds the body of a linalg.generic: gets the input elements and the current output element
/// and returns the new output element.
using BodyBuilder = llvm::function_ref<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::ValueRange)>;

mlir::RankedTensorType rankedType(mlir::Value v);

mlir::Value f32Constant(mlir::OpBuilder &b, mlir::Location loc, double value);

mlir::Value emptyTensor(mlir::OpBuilder &b, mlir::Location loc, llvm::ArrayRef<int64_t> shape);

/// A new f32 tensor of `shape` filled with `value` (the initial value of a reduction).
mlir::Value filled(mlir::OpBuilder &b, mlir::Location loc, llvm::ArrayRef<int64_t> shape, double value = 0.0);

/// Map from the iteration space of a rank-`rank` result to an operand of shape `shape` under
/// numpy broadcasting: missing leading dims are dropped, size-1 dims read index 0.
mlir::AffineMap broadcastMap(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> resultShape,
                             mlir::MLIRContext *ctx);

/// Map from a rank-`rank` iteration space to its first `rank - 1` dims (one value per row).
mlir::AffineMap rowMap(int64_t rank, mlir::MLIRContext *ctx);

/// Map from a rank-`rank` iteration space to its last dim (a per-feature vector).
mlir::AffineMap featureMap(int64_t rank, mlir::MLIRContext *ctx);

/// A linalg.generic over the iteration space of `init`; `body` gets the input elements and the
/// current output element and returns the new output element.
mlir::Value buildGeneric(mlir::OpBuilder &b, mlir::Location loc, mlir::Value init, mlir::ValueRange inputs,
                         llvm::ArrayRef<mlir::AffineMap> inputMaps, mlir::AffineMap outputMap,
                         llvm::ArrayRef<mlir::utils::IteratorType> iterators, BodyBuilder body);

/// Elementwise generic producing `resultType` from broadcast-compatible `inputs`.
mlir::Value buildElementwise(mlir::OpBuilder &b, mlir::Location loc, mlir::RankedTensorType resultType,
                             mlir::ValueRange inputs, BodyBuilder body);

/// Reduces the last dim of `inputs[0]`'s shape: `inputs` are read through `inputMaps`, the
/// accumulator starts at `initValue`; `body(args)` gets the input elements then the accumulator.
mlir::Value buildRowReduction(mlir::OpBuilder &b, mlir::Location loc, llvm::ArrayRef<int64_t> shape,
                              mlir::ValueRange inputs, llvm::ArrayRef<mlir::AffineMap> inputMaps, double initValue,
                              BodyBuilder body);

/// Reassociation grouping dims [0, n) into one and keeping every later dim of a rank-`rank` tensor.
llvm::SmallVector<mlir::ReassociationIndices> collapseLeading(int64_t n, int64_t rank);

/// `v` with its first `n` dims collapsed into one.
mlir::Value collapse(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v, int64_t n);

/// `input` transposed by `permutation` into a new tensor (a linalg.transpose).
mlir::Value transpose(mlir::OpBuilder &b, mlir::Location loc, mlir::Value input, llvm::ArrayRef<int64_t> permutation);

/// `value` (an f32 scalar or vector) rounded to nearest even in `element`, the element type of a
/// KV cache: itself for f32, an arith.truncf for f16, and for bf16 the integer rounding of
/// kernels::toBf16 (the upper 16 bits after adding 0x7fff plus the lowest kept bit; NaN stays a
/// quiet NaN), which needs no libcall on targets without avx512bf16. Same shape, `element` typed.
mlir::Value roundToElement(mlir::OpBuilder &b, mlir::Location loc, mlir::Value value, mlir::Type element);

/// `value`, a scalar or vector of f32, f16 or bf16, widened to f32 (exactly).
mlir::Value widenToF32(mlir::OpBuilder &b, mlir::Location loc, mlir::Value value);

/// `tile`, a rank-2 tensor of a KV cache's elements, as f32: itself when it is f32, else an
/// elementwise generic widening it; `transposed` also swaps its dims (a linalg.transpose for f32).
mlir::Value widenedTile(mlir::OpBuilder &b, mlir::Location loc, mlir::Value tile, bool transposed = false);

/// `value` [d0, ..., dn] viewed (expand_shape, no copy) with dim `dim` split into `shape`.
mlir::Value splitDim(mlir::OpBuilder &b, mlir::Location loc, mlir::Value value, int64_t dim,
                     llvm::ArrayRef<int64_t> shape);

/// `value` sliced at index `at` of its dim `dim`, which the result drops (a rank-reducing
/// extract_slice with unit strides).
mlir::Value sliceAt(mlir::OpBuilder &b, mlir::Location loc, mlir::Value value, int64_t dim, int64_t at);

mlir::Value i32Constant(mlir::OpBuilder &b, mlir::Location loc, int64_t value);

/// A new tensor of `shape` and `element` type filled with zeros.
mlir::Value zeros(mlir::OpBuilder &b, mlir::Location loc, llvm::ArrayRef<int64_t> shape, mlir::Type element);

/// A rank-`rank` all-parallel generic writing a new `element` tensor of `shape` from `inputs`
/// read through `inputMaps`.
mlir::Value buildParallel(mlir::OpBuilder &b, mlir::Location loc, llvm::ArrayRef<int64_t> shape, mlir::Type element,
                          mlir::ValueRange inputs, llvm::ArrayRef<mlir::AffineMap> inputMaps, BodyBuilder body);

} // namespace gpt::conversion

#endif // GPT_CC_CONVERSION_LOWERINGUTILS_H
