// Target CPUs by name, as LLVM's target registry knows them: the features of an x86-64 or AArch64
// CPU. Used by the compiler (for CompileOptions(target_cpu=...)) and --gpt-set-target (which names
// a CPU in a test or a gpt-opt pipeline); TargetDescription.h turns them into what codegen reads.
#ifndef GPT_CC_CODEGEN_CPU_TARGETCPUS_H
#define GPT_CC_CODEGEN_CPU_TARGETCPUS_H

#include "cc/codegen/common/TargetDescription.h"

#include <map>
#include <string>

namespace gpt::codegen {

/// Registers every target the LLVM build has (target infos and MC layers), once per process.
void initializeTargetRegistry();

/// Every processor feature LLVM has for `triple`, on where `cpu` has it. Throws
/// std::invalid_argument naming the CPU when LLVM does not know it for that triple.
std::map<std::string, bool> cpuFeatures(const std::string &triple, const std::string &cpu);

} // namespace gpt::codegen

#endif // GPT_CC_CODEGEN_CPU_TARGETCPUS_H
