// Helpers that the DRR canonicalization patterns call to test and fold `transformer.constant` data.
#ifndef GPT_CC_DIALECT_CONSTANTFOLDING_H
#define GPT_CC_DIALECT_CONSTANTFOLDING_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace mlir::transformer {

/// True when every element of the f32 elements attribute `attr` equals `value`.
bool isSplatOf(Attribute attr, float value);

/// `fn(lhs, rhs)` elementwise with numpy broadcasting, shaped like `result` (which must be static).
DenseElementsAttr foldBinaryConstants(Value result, DenseElementsAttr lhs, DenseElementsAttr rhs,
                                      llvm::function_ref<float(float, float)> fn);
/// `-input`, shaped like `result`.
DenseElementsAttr foldNegConstant(Value result, DenseElementsAttr input);
/// `input` with its last two dimensions swapped, shaped like `result`.
DenseElementsAttr foldTransposeConstant(Value result, DenseElementsAttr input);

} // namespace mlir::transformer

#endif // GPT_CC_DIALECT_CONSTANTFOLDING_H
