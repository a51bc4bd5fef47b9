// Links a compiled program into a shared object with LLVM's linker (ld.lld, run as a process):
// what the runtime then loads with dlopen (cc/runtime/SharedObject.h).
#ifndef GPT_CC_COMPILER_PROGRAMLINKER_H
#define GPT_CC_COMPILER_PROGRAMLINKER_H

#include <string>
#include <vector>

namespace gpt {

/// Links `objects`, ELF relocatable objects compiled position-independent (MachineCode.h): the
/// parts of one program, which together define it, into a shared object whose dependencies are what compiled code
/// calls: the OpenMP runtime and libm; memrefCopy it leaves undefined, for the runtime's program support library
/// (cc/runtime/support) to provide. Returns its bytes. Throws std::runtime_error with the
/// linker's messages when linking fails, and naming the linker when it is missing (tools/setup.sh
/// installs it).
std::string linkSharedObject(const std::vector<std::string> &objects);

} // namespace gpt

#endif // GPT_CC_COMPILER_PROGRAMLINKER_H
