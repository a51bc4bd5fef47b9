// Loading the compiler library on first use (see ProgramCompiler.h).
#include "cc/runtime/ProgramCompiler.h"

#include "cc/runtime/Files.h"

#include <atomic>
#include <cstdlib>
#include <dlfcn.h>
#include <mutex>

namespace gpt {

namespace {

std::atomic<ProgramCompiler *> loaded{nullptr};

} // namespace

std::string programCompilerPath() {
  return fileBesideBinaryOf(reinterpret_cast<const void *>(&programCompilerPath), "_gpt_compiler.so");
}

ProgramCompiler &programCompiler() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string path = programCompilerPath();
    // RTLD_NODELETE: its code stays for the life of the process, as the compilers it hands out do.
    void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!handle) {
      const char *reason = ::dlerror();
      throw CompileError("cannot load the compiler library " + path + ": " + (reason ? reason : "unknown reason"));
    }
    using Entry = ProgramCompiler *(*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(handle, kProgramCompilerSymbol));
    if (!entry) throw CompileError("the compiler library " + path + " exports no " + kProgramCompilerSymbol);
    loaded = entry();
  });
  return *loaded.load();
}

bool programCompilerLoaded() { return loaded.load() != nullptr; }

JitTarget resolveTarget(const std::string &name) {
  const char *standIn = std::getenv("GPT_TARGET_CPU");
  const bool host = name == "host" && (!standIn || !*standIn || std::string(standIn) == "host");
  if (host) return JitTarget::host();
  const std::string named = name == "host" ? standIn : name;
  const auto [triple, cpu] = codegen::splitTargetName(named, JitTarget::processTriple());
  return JitTarget(triple, cpu, programCompiler().cpuFeatures(triple, cpu));
}

} // namespace gpt
