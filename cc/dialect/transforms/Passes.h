// Passes that transform the `transformer` dialect within itself (shape inference, attention layout).
#ifndef GPT_CC_DIALECT_TRANSFORMS_PASSES_H
#define GPT_CC_DIALECT_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::transformer {

#define GEN_PASS_DECL
#include "cc/dialect/transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "cc/dialect/transforms/Passes.h.inc"

} // namespace mlir::transformer

#endif // GPT_CC_DIALECT_TRANSFORMS_PASSES_H
