// What code generation knows of the target CPU: its register file and the features it chooses
// instructions by. Plain data with no MLIR, so that the runtime can describe the host (and key its
// disk cache by it) without loading the compiler; the IR carries it as the `gpt.target`
// attribute (CodegenAttributes.h).
#ifndef GPT_CC_CODEGEN_COMMON_TARGETDESCRIPTION_H
#define GPT_CC_CODEGEN_COMMON_TARGETDESCRIPTION_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace gpt::codegen {

struct TargetDescription {
  std::string cpu;
  std::string triple;
  int64_t vectorBits = 512;
  int64_t vectorRegisters = 32;
  llvm::SmallVector<std::string> features; // the enabled features code generation chooses by
  bool has(llvm::StringRef feature) const;
  bool isX86() const;
};

/// How far ahead (bytes) a decode step's block-quantized matmuls prefetch their weight lanes
/// (--gpt-prefetch-decode-lanes), 0 for none. A decode step streams every weight once, one matrix
/// row pair after another, and on the Intel server cores LLVM names sapphirerapids and
/// emeraldrapids a core keeps too few misses in flight for its hardware prefetchers to reach the
/// memory's rate: a software prefetch 1 KiB ahead made decode steps 5-23% faster on an Emerald
/// Rapids VM (family 6 model 207, which LLVM's host detection names sapphirerapids; docs/JOURNAL.md).
/// A CPU with AMX (int8 or bf16) is one of those server cores whatever its name: AMX is on Intel's
/// Xeons from Sapphire Rapids on and nowhere else, and a VM may report another model (family 6
/// model 167, which LLVM names rocketlake, a client core without AMX): there 1 KiB made decode
/// steps 10-14% faster (q4_0, q8_0, Q4_K_M at SmolLM2-1.7B). On AMD's Zen 4 the same prefetch in a
/// C model of the loop gained nothing consistent, so other CPUs keep none until measured.
int64_t decodeLanePrefetchBytes(const TargetDescription &target);

/// "aarch64:neoverse-v1" -> ("aarch64-unknown-linux-gnu", "neoverse-v1"); a CPU name without an
/// architecture ("znver3") is one of `defaultTriple`'s. Throws std::invalid_argument for an
/// architecture other than x86_64 and aarch64.
std::pair<std::string, std::string> splitTargetName(const std::string &name, const std::string &defaultTriple);

/// The target as code generation sees it: the register file code is tiled for (x86: AVX-512's 32
/// zmm, AVX's 16 ymm, else 16 xmm; AArch64: 32 NEON q registers, SVE's length being unknown at
/// compile time) and the features that choose instructions, where `features` has them on.
TargetDescription describeTarget(const std::string &triple, const std::string &cpu,
                                 const std::map<std::string, bool> &features);

} // namespace gpt::codegen

#endif // GPT_CC_CODEGEN_COMMON_TARGETDESCRIPTION_H
