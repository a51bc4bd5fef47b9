// JIT compilation through the on-disk object cache (see CachedJit.h).
#include "cc/runtime/CachedJit.h"

#include "cc/runtime/CompiledModel.h"
#include "cc/runtime/ObjectCache.h"

#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <optional>
#include <stdexcept>

namespace gpt {

namespace {
// Part of every disk-cache key: bump when the runtime's calling convention changes.
constexpr const char *kCompilerVersion = "gpt-jit-2 llvm-19.1.7";
} // namespace

std::unique_ptr<JitFunction> jitThroughDiskCache(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target,
                                                 const DiskCacheSettings &settings, bool *loaded) {
  *loaded = false;
  target.checkRunsOnHost(); // also before a load: another machine may have written the cache
  if (settings.directory.empty()) return std::make_unique<JitFunction>(module, name, target);
  std::string ir;
  llvm::raw_string_ostream os(ir);
  module.print(os);
  const std::string host = target.description(); // named: the parts below are views
  llvm::SHA256 hash;
  for (llvm::StringRef part : {llvm::StringRef(kCompilerVersion), llvm::StringRef(host), name, llvm::StringRef(ir)}) {
    hash.update(part);
    hash.update(llvm::StringRef("\0", 1));
  }
  std::array<uint8_t, 32> digest = hash.final();
  const std::string key(digest.begin(), digest.end());
  ObjectCache cache(settings.directory, settings.maxBytes);
  try {
    cache.checkDirectory();
  } catch (const std::runtime_error &error) {
    throw CompileError(error.what());
  }
  if (std::optional<std::string> object = cache.read(key))
    if (std::unique_ptr<JitFunction> function = JitFunction::load(*object, name)) {
      *loaded = true;
      return function;
    }
  auto function = std::make_unique<JitFunction>(module, name, target);
  // Best effort: a cache that cannot be written (a full disk) costs speed, never correctness.
  try {
    cache.write(key, function->objectBytes());
  } catch (const std::exception &) {
  }
  return function;
}

} // namespace gpt
