// The JIT's target CPU (see JitTarget.h).
#include "cc/runtime/JitTarget.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"

#include <mutex>
#include <stdexcept>

namespace gpt {

void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

namespace {

std::map<std::string, bool> hostFeatures() {
  std::map<std::string, bool> features;
  for (const auto &[feature, enabled] : llvm::sys::getHostCPUFeatures()) features[feature.str()] = enabled;
  return features;
}

} // namespace

JitTarget JitTarget::host() { return JitTarget(llvm::sys::getHostCPUName().str(), hostFeatures()); }

JitTarget JitTarget::named(const std::string &name) {
  if (name == "host") return host();
  initializeNativeTarget();
  const std::string triple = llvm::sys::getProcessTriple();
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target) throw std::invalid_argument("no LLVM target for " + triple + ": " + error);
  std::unique_ptr<llvm::MCSubtargetInfo> info(target->createMCSubtargetInfo(triple, name, ""));
  if (!info || !info->isCPUStringValid(name))
    throw std::invalid_argument("'" + name + "' is not a CPU LLVM knows for " + triple +
                                " (try 'host', 'skylake-avx512', 'cascadelake', 'sapphirerapids' or 'znver4')");
  // The named CPU's features that the host has too (over the names the host query reports): code
  // for them runs here, whatever else the named CPU has (a virtual machine hides some, like pku).
  std::map<std::string, bool> features = hostFeatures();
  for (auto &[feature, enabled] : features) enabled = enabled && info->checkFeatures("+" + feature);
  return JitTarget(name, std::move(features));
}

bool JitTarget::has(llvm::StringRef feature) const {
  auto found = features.find(feature.str());
  return found != features.end() && found->second;
}

std::string JitTarget::description() const {
  std::string text = llvm::sys::getProcessTriple() + " " + cpu;
  for (const auto &[feature, enabled] : features) text += (enabled ? " +" : " -") + feature; // sorted: a map
  return text;
}

std::unique_ptr<llvm::TargetMachine> JitTarget::createTargetMachine() const {
  initializeNativeTarget();
  llvm::orc::JITTargetMachineBuilder builder{llvm::Triple(llvm::sys::getProcessTriple())};
  builder.setCPU(cpu);
  llvm::SubtargetFeatures subtarget;
  for (const auto &[feature, enabled] : features) subtarget.AddFeature(feature, enabled);
  builder.addFeatures(subtarget.getFeatures());
  builder.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  auto machine = builder.createTargetMachine();
  if (!machine)
    throw std::runtime_error("cannot create a TargetMachine for " + cpu + ": " + llvm::toString(machine.takeError()));
  return std::move(*machine);
}

} // namespace gpt
