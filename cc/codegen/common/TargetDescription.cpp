// The target CPU as code generation sees it (see TargetDescription.h).
#include "cc/codegen/common/TargetDescription.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/TargetParser/Triple.h"

#include <stdexcept>

namespace gpt::codegen {

bool TargetDescription::has(llvm::StringRef feature) const { return llvm::is_contained(features, feature); }

bool TargetDescription::isX86() const { return llvm::StringRef(triple).starts_with("x86_64"); }

int64_t decodeLanePrefetchBytes(const TargetDescription &target) {
  static const char *const kStreamBoundServerCores[] = {"sapphirerapids", "emeraldrapids"};
  if (!target.isX86()) return 0;
  const bool serverCore = llvm::is_contained(kStreamBoundServerCores, llvm::StringRef(target.cpu)) ||
                          target.has("amx-int8") || target.has("amx-bf16");
  return serverCore ? 1024 : 0;
}

std::pair<std::string, std::string> splitTargetName(const std::string &name, const std::string &defaultTriple) {
  const size_t colon = name.find(':');
  if (colon == std::string::npos) return {defaultTriple, name};
  const std::string arch = name.substr(0, colon);
  if (arch == "aarch64" || arch == "arm64") return {"aarch64-unknown-linux-gnu", name.substr(colon + 1)};
  if (arch == "x86_64" || arch == "x86-64") return {"x86_64-pc-linux-gnu", name.substr(colon + 1)};
  throw std::invalid_argument("target '" + name + "': unknown architecture '" + arch +
                              "' (expected 'x86_64:<cpu>', 'aarch64:<cpu>' or a CPU name)");
}

TargetDescription describeTarget(const std::string &triple, const std::string &cpu,
                                 const std::map<std::string, bool> &features) {
  // The features code generation chooses instructions by, where this target has them.
  static const char *const kChosenBy[] = {"avx2",       "fma",     "avx512f",  "avx512bw", "avx512vl", "avx512vnni",
                                          "avx512bf16", "avxvnni", "amx-bf16", "amx-int8", "gfni",     "neon",
                                          "dotprod",    "bf16",    "i8mm",     "sve"};
  auto has = [&](const char *feature) {
    auto found = features.find(feature);
    return found != features.end() && found->second;
  };
  TargetDescription target;
  target.cpu = cpu;
  target.triple = triple;
  const bool x86 = llvm::Triple(triple).isX86();
  target.vectorBits = !x86 ? 128 : has("avx512f") ? 512 : has("avx") ? 256 : 128;
  target.vectorRegisters = !x86 || has("avx512f") ? 32 : 16;
  for (const char *feature : kChosenBy)
    if (has(feature)) target.features.push_back(feature);
  return target;
}

} // namespace gpt::codegen
