// CPU code generation passes: register tiles, the Transform-dialect schedules that apply them,
// fusion, vector math, stack allocation and out-parameters.
#ifndef GPT_CC_CODEGEN_PASSES_H
#define GPT_CC_CODEGEN_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace gpt::codegen {

#define GEN_PASS_DECL
#include "cc/codegen/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "cc/codegen/Passes.h.inc"

} // namespace gpt::codegen

#endif // GPT_CC_CODEGEN_PASSES_H
