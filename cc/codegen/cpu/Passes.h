// CPU code generation passes (Passes.td): the target CPU, register tiles and the Transform-dialect
// schedule that applies them, AMX tiles, dot-product instructions, vector math, prefetches,
// stack allocation.
#ifndef GPT_CC_CODEGEN_CPU_PASSES_H
#define GPT_CC_CODEGEN_CPU_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace gpt::codegen {

#define GEN_PASS_DECL
#include "cc/codegen/cpu/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "cc/codegen/cpu/Passes.h.inc"

/// True for the block partial sums of a q8_0 packed matmul: a `gpt.block_partials` generic of one
/// input of activation lanes and the weight lanes, whose body is `lane_dot_u8i8(acc, w xor
/// 0x80808080, x)`, i.e. signed weight codes times signed activation codes, which AMX's tdpbssd
/// multiplies as they lie in memory. --gpt-select-register-tiles marks the matmul that reads them
/// for AMX on that condition, and --gpt-lower-amx-matmuls lowers the two ops together.
bool isSignedInt8BlockPartials(mlir::Operation *op);

} // namespace gpt::codegen

#endif // GPT_CC_CODEGEN_CPU_PASSES_H
