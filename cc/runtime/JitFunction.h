// A function compiled from an LLVM-dialect module for the host CPU and linked by ORC.
#ifndef GPT_CC_RUNTIME_JITFUNCTION_H
#define GPT_CC_RUNTIME_JITFUNCTION_H

#include "cc/runtime/JitTarget.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>

namespace llvm::orc {
class LLJIT;
} // namespace llvm::orc

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace gpt {

class JitFunction {
public:
  /// JIT-compiles `module` (already in the LLVM dialect) for `target` (the host CPU and its
  /// features, unless a test names another CPU), with LLVM IR optimization level 2 and codegen
  /// level Aggressive, and resolves `name`'s C interface wrapper `_mlir_ciface_<name>`. Throws
  /// std::runtime_error with LLVM's message on failure.
  JitFunction(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target = JitTarget::host());
  ~JitFunction();

  /// Loads object code that objectBytes() returned, in this or an earlier process, with plain ORC
  /// (no MLIR, no LLVM optimization or codegen). Returns nullptr when it cannot be loaded.
  static std::unique_ptr<JitFunction> load(const std::string &object, llvm::StringRef name);

  /// Calls `_mlir_ciface_<name>(args...)` of a function that returns nothing: one pointer per
  /// argument, each to a memref descriptor, except at the positions listed in
  /// `scalarArguments`, where the pointer is to an int64_t passed by value (an index argument).
  void call(llvm::ArrayRef<void *> arguments, llvm::ArrayRef<size_t> scalarArguments = {}) const;

  /// The machine code compiled (or loaded), as an ELF relocatable object file's bytes.
  std::string objectBytes() const;

  /// Writes objectBytes() to `path`; throws std::runtime_error naming the path and the reason
  /// when it cannot (a missing directory, a full disk).
  void dumpObject(const std::string &path) const;

  /// Compiles `module` for `target` into an object file at `path` without linking it: how code for
  /// a target the host cannot run (JitTarget::runsOnHost) is inspected.
  static void writeObject(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target,
                          const std::string &path);

private:
  JitFunction();
  /// Links `object` into a JIT of its own and resolves `name`'s packed entry point.
  llvm::Error link(llvm::StringRef name);
  std::string object; // compiled here or loaded: what runs
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  void (*packed)(void **) = nullptr;
};

} // namespace gpt

#endif // GPT_CC_RUNTIME_JITFUNCTION_H
