// Target CPUs by name (see TargetCpus.h).
#include "cc/codegen/cpu/TargetCpus.h"

#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"

#include <memory>
#include <mutex>
#include <stdexcept>

namespace gpt::codegen {

void initializeTargetRegistry() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargetMCs();
  });
}

std::map<std::string, bool> cpuFeatures(const std::string &triple, const std::string &cpu) {
  initializeTargetRegistry();
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target) throw std::invalid_argument("no LLVM target for " + triple + ": " + error);
  std::unique_ptr<llvm::MCSubtargetInfo> info(target->createMCSubtargetInfo(triple, cpu, ""));
  if (cpu.empty() || !info || !info->isCPUStringValid(cpu))
    throw std::invalid_argument("'" + cpu + "' is not a CPU LLVM knows for " + triple +
                                " (try 'host', 'haswell', 'znver3', 'alderlake', 'skylake-avx512', 'znver4', "
                                "'sapphirerapids' or 'aarch64:neoverse-v1')");
  std::map<std::string, bool> features;
  for (const llvm::SubtargetFeatureKV &feature : info->getAllProcessorFeatures())
    features[feature.Key] = info->getFeatureBits().test(feature.Value);
  return features;
}

} // namespace gpt::codegen
