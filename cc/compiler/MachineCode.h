// Machine code for a target: an LLVM-dialect module translated to LLVM IR, optimized and compiled
// to an ELF object in memory, then linked into the shared object the runtime loads
// (cc/runtime/JitFunction.h). MLIR's ExecutionEngine is not used: it can only hand out its object
// through a file, and opening one registers LLVM's signal handlers (and an alternate signal stack)
// on whichever thread compiles.
#ifndef GPT_CC_COMPILER_MACHINECODE_H
#define GPT_CC_COMPILER_MACHINECODE_H

#include "cc/runtime/JitTarget.h"

#include "llvm/ADT/StringRef.h"

#include <memory>
#include <string>

namespace llvm {
class TargetMachine;
} // namespace llvm

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace gpt {

/// Initializes LLVM's native target once per process (and, for cross-compiling, every target the
/// LLVM build has).
void initializeNativeTarget();

/// A TargetMachine that compiles for `target` (optimization level Aggressive), position
/// independent for a shared object.
std::unique_ptr<llvm::TargetMachine> createTargetMachine(const JitTarget &target);

/// Compiles `module` (already in the LLVM dialect) for `target` with LLVM IR optimization level 2
/// and codegen level Aggressive into a relocatable object whose one exported function is
/// `name`'s packed entry point (packedEntryName). With `vectorBits` (x86 only), no instruction
/// uses registers wider than that many bits: wider vector operations are split, as LLVM splits
/// them for a function with "prefer-vector-width" and "min-legal-vector-width" of that width.
/// The program must use no intrinsic of a wider register (the lane dots' vdpbf16ps and vpdpbusd
/// on zmm cannot be split: LLVM then scalarizes without bound).
std::string compileToObject(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target,
                            int64_t vectorBits = 0);

/// compileToObject()'s program linked into a shared object (ProgramLinker.h): its bytes. A large
/// program is optimized and compiled in two parts on two threads (MachineCode.cpp's partsFor), each
/// part's functions as in the whole; a small one, or any on a single core, on this thread.
std::string compileToSharedObject(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target,
                                  int64_t vectorBits = 0);

} // namespace gpt

#endif // GPT_CC_COMPILER_MACHINECODE_H
