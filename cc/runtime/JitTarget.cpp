// The CPU code is compiled for (see JitTarget.h).
#include "cc/runtime/JitTarget.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <cstdlib>
#include <mutex>
#include <stdexcept>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace gpt {

namespace {

/// Features of a named CPU that no code this project generates uses (system and privileged
/// instructions): a virtual machine often hides them (pku, for one), and their absence must not
/// stop the CPU's code from running on the host. They are turned off in code that runs here.
bool isSystemFeature(llvm::StringRef feature) {
  static const llvm::StringSet<> kSystem = {
      "cldemote",  "clflushopt", "clwb",    "enqcmd",    "fsgsbase",  "hreset",   "invpcid",    "kl",
      "movdir64b", "movdiri",    "pconfig", "pku",       "prefetchi", "ptwrite",  "rdpid",      "rdpru",
      "rdrnd",     "rdseed",     "rtm",     "serialize", "sgx",       "shstk",    "tsxldtrk",   "uintr",
      "waitpkg",   "wbnoinvd",   "widekl",  "xsave",     "xsavec",    "xsaveopt", "xsaves",     "mwaitx",
      "clzero",    "lwp",        "sahf",    "usermsr",   "cmpccxadd", "raoint",   "prefetchwt1"};
  return kSystem.contains(feature);
}

/// Whether this process may use AMX tile data. Linux (5.16 and later) hands the tile registers
/// state to a process only on request, arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); a tile
/// instruction before it raises SIGILL. Asked once per process (the permission covers every
/// thread). GPT_NO_AMX (set and not empty) answers no without asking: the same CPU's code
/// without AMX, to compare with.
bool amxPermitted() {
  static const bool permitted = [] {
    if (const char *off = std::getenv("GPT_NO_AMX"); off && *off) return false;
#if defined(__linux__) && defined(__x86_64__)
    constexpr long kRequestPermission = 0x1023; // ARCH_REQ_XCOMP_PERM
    constexpr long kTileData = 18;              // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
#else
    return false;
#endif
  }();
  return permitted;
}

} // namespace

std::map<std::string, bool> JitTarget::hostFeatures() {
  std::map<std::string, bool> features;
  for (const auto &[feature, enabled] : llvm::sys::getHostCPUFeatures()) features[feature.str()] = enabled;
  return features;
}

std::string JitTarget::processTriple() { return llvm::sys::getProcessTriple(); }

JitTarget::JitTarget(std::string triple, std::string cpu, std::map<std::string, bool> features)
    : triple_(std::move(triple)), cpu_(std::move(cpu)), features_(std::move(features)) {
  const llvm::Triple target(triple_), process(llvm::sys::getProcessTriple());
  if (target.getArch() != process.getArch()) {
    unavailable_.push_back("the " + target.getArchName().str() + " architecture");
  } else {
    const std::map<std::string, bool> host = hostFeatures();
    for (const auto &[feature, enabled] : features_) {
      auto found = host.find(feature);
      // Only instruction-set features the host reports are compared (tuning flags are not).
      if (enabled && found != host.end() && !found->second && !isSystemFeature(feature))
        unavailable_.push_back(feature);
    }
    // Code that runs here uses AMX only with the process's permission; without it, the CPU's code
    // without AMX (compile-only code keeps it: it never runs here).
    if (unavailable_.empty() && has("amx-tile") && !amxPermitted())
      for (auto &[feature, enabled] : features_)
        if (llvm::StringRef(feature).starts_with("amx-")) enabled = false;
  }
  // Described once: the runtime asks for the tile parameters on every call.
  codegen_ = codegen::describeTarget(triple_, cpu_, features_);
}

JitTarget JitTarget::host() {
  return JitTarget(llvm::sys::getProcessTriple(), llvm::sys::getHostCPUName().str(), hostFeatures());
}

bool JitTarget::has(llvm::StringRef feature) const {
  auto found = features_.find(feature.str());
  return found != features_.end() && found->second;
}

bool JitTarget::isX86() const { return llvm::Triple(triple_).isX86(); }

void JitTarget::checkRunsOnHost() const {
  if (runsOnHost()) return;
  std::string lacking;
  for (const std::string &feature : unavailable_) lacking += (lacking.empty() ? "" : ", ") + feature;
  throw std::invalid_argument("code compiled for target_cpu '" + cpu_ + "' (" + triple_ + ") cannot run on this CPU (" +
                              llvm::sys::getHostCPUName().str() + "), which lacks " + lacking +
                              "; it is compile-only here: model.ir(...) and model.save_object(...) show it");
}

std::string JitTarget::description() const {
  std::string text = triple_ + " " + cpu_;
  for (const auto &[feature, enabled] : features_) text += (enabled ? " +" : " -") + feature; // sorted: a map
  return text;
}

} // namespace gpt
