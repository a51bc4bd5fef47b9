// A compiled program loaded with dlopen (SharedObject.h) and called through its packed entry point.
// The compiler library makes the shared object (cc/compiler/MachineCode.h); loading and calling it
// needs neither MLIR nor LLVM.
#ifndef GPT_CC_RUNTIME_JITFUNCTION_H
#define GPT_CC_RUNTIME_JITFUNCTION_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <memory>
#include <string>

namespace gpt {

class LoadedProgram;

class JitFunction {
public:
  ~JitFunction();

  /// Loads `sharedObject`, which the compiler made in this or an earlier process, with dlopen
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

private:
  JitFunction();
  std::string sharedObject_; // compiled here or loaded: what runs
  std::unique_ptr<LoadedProgram> program;
  void (*packed)(void **) = nullptr;
};

} // namespace gpt

#endif // GPT_CC_RUNTIME_JITFUNCTION_H
