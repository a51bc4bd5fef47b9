// Target CPUs by name, as LLVM knows them: the features of an x86-64 or AArch64 CPU and the
// `gpt.target` description code generation reads. Shared by the JIT (JitTarget, which also checks
// the host) and --gpt-set-target (which names a CPU in a test or a gpt-opt pipeline).
#ifndef GPT_CC_CODEGEN_CPU_TARGETCPUS_H
#define GPT_CC_CODEGEN_CPU_TARGETCPUS_H

#include "cc/codegen/common/CodegenAttributes.h"

#include <map>
#include <string>
#include <utility>

namespace gpt::codegen {

/// Registers every target the LLVM build has (target infos and MC layers), once per process.
void initializeTargetRegistry();

/// "aarch64:neoverse-v1" -> ("aarch64-unknown-linux-gnu", "neoverse-v1"); a CPU name without an
/// architecture ("znver3") is one of `defaultTriple`'s. Throws std::invalid_argument for an
/// architecture other than x86_64 and aarch64.
std::pair<std::string, std::string> splitTargetName(const std::string &name, const std::string &defaultTriple);

/// Every processor feature LLVM has for `triple`, on where `cpu` has it. Throws
/// std::invalid_argument naming the CPU when LLVM does not know it for that triple.
std::map<std::string, bool> cpuFeatures(const std::string &triple, const std::string &cpu);

/// The target as code generation sees it: the register file code is tiled for (x86: AVX-512's 32
/// zmm, AVX's 16 ymm, else 16 xmm; AArch64: 32 NEON q registers, SVE's length being unknown at
/// compile time) and the features that choose instructions, where `features` has them on.
TargetDescription describeTarget(const std::string &triple, const std::string &cpu,
                                 const std::map<std::string, bool> &features);

} // namespace gpt::codegen

#endif // GPT_CC_CODEGEN_CPU_TARGETCPUS_H
