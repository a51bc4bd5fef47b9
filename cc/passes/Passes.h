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

/// The fewest loop iterations (multiply-adds, for a matmul) an op needs before it is split across
/// threads: an OpenMP fork and join costs microseconds, which only pays off on more work than
/// this. Small models' ops (nano's decode step) stay on one thread.
constexpr int64_t kMinParallelWork = int64_t(1) << 18;

/// Patterns rewriting every transformer op into linalg/tensor/arith/math on static-shaped tensors.
void populateTransformerToLinalgPatterns(RewritePatternSet &patterns);

#define GEN_PASS_REGISTRATION
#include "cc/passes/Passes.h.inc"

} // namespace transformer
} // namespace mlir

#endif // GPT_CC_PASSES_PASSES_H
