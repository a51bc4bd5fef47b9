// Target-independent code generation passes (Passes.td): elementwise fusion on linalg tensors
// and the entry points' out-parameters.
#ifndef GPT_CC_CODEGEN_COMMON_PASSES_H
#define GPT_CC_CODEGEN_COMMON_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace gpt::codegen {

#define GEN_PASS_DECL
#include "cc/codegen/common/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "cc/codegen/common/Passes.h.inc"

} // namespace gpt::codegen

#endif // GPT_CC_CODEGEN_COMMON_PASSES_H
