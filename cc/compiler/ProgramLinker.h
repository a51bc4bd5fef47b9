// Links a compiled program into a shared object with LLVM's linker (lld, through the clang driver):
// what the runtime then loads with dlopen (cc/runtime/SharedObject.h).
#ifndef GPT_CC_COMPILER_PROGRAMLINKER_H
#define GPT_CC_COMPILER_PROGRAMLINKER_H

#include <string>
#include <string_view>

namespace gpt {

/// Links `object`, an ELF relocatable object compiled position-independent (MachineCode.h), into a
/// shared object whose dependencies are what compiled code calls: the OpenMP runtime and libm;
/// memrefCopy it leaves undefined, for the runtime's program support library
/// (cc/runtime/support) to provide. Returns its bytes. Throws std::runtime_error with the
/// linker's messages when linking fails, and naming the linker when it is missing (tools/setup.sh
/// installs it).
std::string linkSharedObject(std::string_view object);

} // namespace gpt

#endif // GPT_CC_COMPILER_PROGRAMLINKER_H
