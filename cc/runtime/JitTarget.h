// The CPU code is compiled for: the host, or a named CPU (x86-64 or AArch64) with that CPU's own
// features, whatever the host has. Code for a target the host can run is JIT-compiled and run;
// code for any other target is compile-only (its IR, its object file), and running it is refused
// with an error naming what the host lacks. Plain data over LLVM's host detection, which the
// runtime links statically: describing the host loads no compiler (ProgramCompiler.h resolves
// named CPUs, whose features only LLVM's target registry knows).
#ifndef GPT_CC_RUNTIME_JITTARGET_H
#define GPT_CC_RUNTIME_JITTARGET_H

#include "cc/TargetParameters.h"
#include "cc/codegen/common/TargetDescription.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gpt {

class JitTarget {
public:
  /// The host CPU, with the features it reports.
  static JitTarget host();
  /// A target of `triple` and `cpu` with `features` (every feature LLVM knows for the triple, on
  /// or off), checked against the host.
  JitTarget(std::string triple, std::string cpu, std::map<std::string, bool> features);
  /// The features the host CPU reports, as LLVM names them.
  static std::map<std::string, bool> hostFeatures();
  /// The triple of this process.
  static std::string processTriple();

  /// Whether code for this target may use `feature` (an LLVM feature name, e.g. "avx512vnni").
  bool has(llvm::StringRef feature) const;
  /// The vector register file code for this target is tiled for: bits per register (AVX-512:
  /// 512, AVX2: 256, SSE and NEON: 128) and how many registers (AVX-512 and AArch64: 32, else 16).
  int64_t vectorBits() const { return codegen_.vectorBits; }
  int64_t vectorRegisters() const { return codegen_.vectorRegisters; }
  /// The register tile, panel width and vocabulary padding code for this target is built with.
  target::TileParameters tileParameters() const { return target::tileParameters(vectorBits(), vectorRegisters()); }
  /// The target as code generation sees it (the module's `gpt.target` attribute).
  const codegen::TargetDescription &codegenTarget() const { return codegen_; }
  /// Whether this is an x86-64 target (else AArch64).
  bool isX86() const;
  /// The target triple, e.g. "x86_64-pc-linux-gnu" or "aarch64-unknown-linux-gnu".
  const std::string &triple() const { return triple_; }
  const std::string &cpu() const { return cpu_; }
  /// Whether the host can run this target's code: the same architecture and every instruction set
  /// feature the code may use.
  bool runsOnHost() const { return unavailable_.empty(); }
  /// Throws std::invalid_argument naming the features the host lacks, unless runsOnHost().
  void checkRunsOnHost() const;
  /// The triple, CPU and enabled features: part of every on-disk cache key, since the code is
  /// specialised for them.
  std::string description() const;
  /// Every feature LLVM knows for the triple, on or off.
  const std::map<std::string, bool> &features() const { return features_; }

private:
  std::string triple_;
  std::string cpu_;
  std::map<std::string, bool> features_; // every feature LLVM knows for the target, on or off
  // What keeps the host from running the code: a different architecture, or features it lacks.
  std::vector<std::string> unavailable_;
  codegen::TargetDescription codegen_; // codegen::describeTarget of the above
};

} // namespace gpt

#endif // GPT_CC_RUNTIME_JITTARGET_H
