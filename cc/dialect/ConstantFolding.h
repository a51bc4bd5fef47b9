// Helpers that the DRR canonicalization patterns call to test and fold `transformer.constant` data.
#ifndef GPT_CC_DIALECT_CONSTANTFOLDING_H
#define GPT_CC_DIALECT_CONSTANTFOLDING_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace mlir::transformer {

/// True when every element of the f32 elements attribute `attr` equals `value`. A splat is
/// checked once, not once per element (a splat may stand for 10^14 of them).
bool isSplatOf(Attribute attr, float value);

/// The most elements a fold may compute: folding a non-splat result allocates and fills all of
/// them, so a small constant broadcast against a huge splat would take the compiler's memory.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 20;

/// Whether folding constant operands into a constant shaped like `result` is cheap: every operand
/// is a splat (the result is a splat too), or the result has at most kMaxFoldedElements elements.
bool isCheapToFold(Value result, Attribute operand);
bool isCheapToFold(Value result, Attribute lhs, Attribute rhs);

/// `fn(lhs, rhs)` elementwise with numpy broadcasting, shaped like `result` (which must be static).
DenseElementsAttr foldBinaryConstants(Value result, DenseElementsAttr lhs, DenseElementsAttr rhs,
                                      llvm::function_ref<float(float, float)> fn);
/// `-input`, shaped like `result`.
DenseElementsAttr foldNegConstant(Value result, DenseElementsAttr input);
/// `input` with its last two dimensions swapped, shaped like `result`.
DenseElementsAttr foldTransposeConstant(Value result, DenseElementsAttr input);

} // namespace mlir::transformer

#endif // GPT_CC_DIALECT_CONSTANTFOLDING_H
