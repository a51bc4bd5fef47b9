// A function compiled from an LLVM-dialect module for the host CPU: LLVM compiles it to an object,
// lld links that into a shared object, and the process loads it with dlopen (SharedObject.h).
#ifndef GPT_CC_RUNTIME_JITFUNCTION_H
#define GPT_CC_RUNTIME_JITFUNCTION_H

#include "cc/runtime/JitTarget.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <memory>
#include <string>

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace gpt {

class LoadedProgram;

class JitFunction {
public:
  ~JitFunction();

  /// Compiles `module` (already in the LLVM dialect) for `target` (the host CPU and its
  /// features, unless a test names another CPU), with LLVM IR optimization level 2 and codegen
  /// level Aggressive, and links it into a shared object whose one exported function is `name`'s
  /// packed entry point. Returns the shared object's bytes; loads nothing.
  static std::string compile(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target);

  /// Loads `sharedObject`, which compile() returned in this or an earlier process, with dlopen
  /// (no MLIR, no LLVM): from the open file `fd` when it is not -1 (the function takes it, and
  /// perf then names the program by that file), else from memory. Returns nullptr, with the
  /// reason in `*error` when it is given, when it cannot be loaded.
  static std::unique_ptr<JitFunction> load(std::string sharedObject, llvm::StringRef name, int fd = -1,
                                           std::string *error = nullptr);

  /// Calls `_mlir_ciface_<name>(args...)` of a function that returns nothing: one pointer per
  /// argument, each to a memref descriptor, except at the positions listed in
  /// `scalarArguments`, where the pointer is to an int64_t passed by value (an index argument).
  void call(llvm::ArrayRef<void *> arguments, llvm::ArrayRef<size_t> scalarArguments = {}) const;

  /// The machine code that runs: the shared object's bytes (an ELF file `llvm-objdump -d` reads).
  const std::string &sharedObject() const { return sharedObject_; }

  /// Writes sharedObject() to `path`; throws std::runtime_error naming the path and the reason
  /// when it cannot (a missing directory, a full disk).
  void dumpObject(const std::string &path) const;

  /// Compiles `module` for `target` into a relocatable object file at `path`, neither linked nor
  /// loaded: how code for a target the host cannot run (JitTarget::runsOnHost) is inspected.
  static void writeObject(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target,
                          const std::string &path);

private:
  JitFunction();
  std::string sharedObject_; // compiled here or loaded: what runs
  std::unique_ptr<LoadedProgram> program;
  void (*packed)(void **) = nullptr;
};

} // namespace gpt

#endif // GPT_CC_RUNTIME_JITFUNCTION_H
