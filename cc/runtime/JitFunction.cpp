// A compiled program loaded and called (see JitFunction.h).
#include "cc/runtime/JitFunction.h"

#include "cc/runtime/Files.h"
#include "cc/runtime/ProgramCompiler.h"
#include "cc/runtime/SharedObject.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace gpt {

JitFunction::JitFunction() = default;
JitFunction::~JitFunction() = default;

std::unique_ptr<JitFunction> JitFunction::load(std::string sharedObject, llvm::StringRef name, int fd,
                                               std::string *error) {
  std::string reason;
  std::unique_ptr<JitFunction> function(new JitFunction());
  function->sharedObject_ = std::move(sharedObject);
  function->program = fd >= 0 ? LoadedProgram::fromFile(fd, &reason)
                              : LoadedProgram::fromBytes(function->sharedObject_, "gpt-" + name.str(), &reason);
  if (function->program) {
    function->packed = reinterpret_cast<void (*)(void **)>(function->program->symbol(packedEntryName(name.str())));
    if (!function->packed) reason = "it exports no " + packedEntryName(name.str());
  }
  if (function->packed) return function;
  if (error) *error = reason;
  return nullptr;
}

void JitFunction::dumpObject(const std::string &path) const { writeFileChecked(path, sharedObject_); }

void JitFunction::call(llvm::ArrayRef<void *> arguments, llvm::ArrayRef<size_t> scalarArguments) const {
  // The packed wrapper takes a pointer to each argument's value. A memref argument's value is a
  // pointer to its descriptor; a scalar's value is the scalar itself, which `arguments` already
  // points to.
  std::vector<void *> values(arguments.begin(), arguments.end());
  std::vector<void *> packedArgs;
  packedArgs.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bool scalar = std::find(scalarArguments.begin(), scalarArguments.end(), i) != scalarArguments.end();
    packedArgs.push_back(scalar ? values[i] : static_cast<void *>(&values[i]));
  }
  packed(packedArgs.data());
}

} // namespace gpt
