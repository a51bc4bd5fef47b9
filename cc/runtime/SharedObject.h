// Compiled programs as shared objects, loaded with dlopen as TVM's and IREE's system-library
// outputs are (the compiler links them: cc/compiler/ProgramLinker.h). Loading one needs neither
// LLVM nor MLIR: a program from the disk cache costs a dlopen, and perf reads its symbols from the
// file it was mapped from.
#ifndef GPT_CC_RUNTIME_SHAREDOBJECT_H
#define GPT_CC_RUNTIME_SHAREDOBJECT_H

#include <memory>
#include <string>
#include <string_view>

namespace gpt {

/// A shared object loaded with dlopen (RTLD_NOW, RTLD_LOCAL), unloaded with dlclose when this dies.
class LoadedProgram {
public:
  /// Loads the shared object of the open file `fd`, which stays open while the program is loaded
  /// (the dynamic loader knows it by the name /proc/self/fd/<fd>, unique while the descriptor
  /// lives). Returns nullptr, with the loader's reason in `*error`, when it cannot.
  static std::unique_ptr<LoadedProgram> fromFile(int fd, std::string *error);
  /// Loads the shared object `bytes` from an anonymous memory file named `name`.
  static std::unique_ptr<LoadedProgram> fromBytes(std::string_view bytes, const std::string &name, std::string *error);
  ~LoadedProgram();
  LoadedProgram(const LoadedProgram &) = delete;
  LoadedProgram &operator=(const LoadedProgram &) = delete;

  /// The address of the exported symbol `name`; nullptr when there is none.
  void *symbol(const std::string &name) const;

private:
  explicit LoadedProgram(void *handle) : handle(handle) {}
  void *handle;
};

} // namespace gpt

#endif // GPT_CC_RUNTIME_SHAREDOBJECT_H
