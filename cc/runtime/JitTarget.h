// The CPU the JIT compiles for: the host, or a named CPU whose code the host can run (to
// exercise another CPU's code paths, such as the fallbacks of a CPU without avx512bf16).
#ifndef GPT_CC_RUNTIME_JITTARGET_H
#define GPT_CC_RUNTIME_JITTARGET_H

#include "llvm/ADT/StringRef.h"

#include <map>
#include <memory>
#include <string>

namespace llvm {
class TargetMachine;
} // namespace llvm

namespace gpt {

/// Initializes LLVM's native target once per process.
void initializeNativeTarget();

class JitTarget {
public:
  /// The host CPU, with the features it reports.
  static JitTarget host();
  /// "host", or an LLVM CPU name ("skylake-avx512", "znver4", ...) with those of that CPU's
  /// features the host has too, so that its code runs here (without the host's extra features:
  /// how a test runs the code paths of a CPU without avx512bf16 or avx512vnni). Throws
  /// std::invalid_argument when LLVM does not know the name.
  static JitTarget named(const std::string &name);

  /// Whether code for this target may use `feature` (an LLVM feature name, e.g. "avx512vnni").
  bool has(llvm::StringRef feature) const;
  /// The triple, CPU and enabled features: part of every on-disk cache key, since the code is
  /// specialised for them.
  std::string description() const;
  /// A TargetMachine that compiles for this target (optimization level Aggressive).
  std::unique_ptr<llvm::TargetMachine> createTargetMachine() const;

private:
  JitTarget(std::string cpu, std::map<std::string, bool> features)
      : cpu(std::move(cpu)), features(std::move(features)) {}
  std::string cpu;
  std::map<std::string, bool> features; // every feature LLVM's host query reports, on or off
};

} // namespace gpt

#endif // GPT_CC_RUNTIME_JITTARGET_H
