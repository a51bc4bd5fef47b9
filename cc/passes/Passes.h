// Passes of the gpt compiler: declarations, registration and reusable pattern sets.
#ifndef GPT_CC_PASSES_PASSES_H
#define GPT_CC_PASSES_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;

namespace transformer {

#define GEN_PASS_DECL
#include "cc/passes/Passes.h.inc"

/// Patterns rewriting every transformer op into linalg/tensor/arith/math on static-shaped tensors.
void populateTransformerToLinalgPatterns(RewritePatternSet &patterns);

#define GEN_PASS_REGISTRATION
#include "cc/passes/Passes.h.inc"

} // namespace transformer
} // namespace mlir

#endif // GPT_CC_PASSES_PASSES_H
