// The conversion of the `transformer` dialect to linalg on tensors: the pass and its patterns.
#ifndef GPT_CC_CONVERSION_PASSES_H
#define GPT_CC_CONVERSION_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace gpt::conversion {

#define GEN_PASS_DECL
#include "cc/conversion/Passes.h.inc"

/// Patterns rewriting every transformer op into linalg/tensor/arith/math on static-shaped tensors.
void populateTransformerToLinalgPatterns(mlir::RewritePatternSet &patterns);

#define GEN_PASS_REGISTRATION
#include "cc/conversion/Passes.h.inc"

} // namespace gpt::conversion

#endif // GPT_CC_CONVERSION_PASSES_H
