// JIT compilation through the on-disk object cache (see CachedJit.h).
#include "cc/runtime/CachedJit.h"

#include "cc/runtime/CompileOptions.h"
#include "cc/runtime/CompilerIdentity.h"
#include "cc/runtime/ObjectCache.h"

#include "llvm/Support/SHA256.h"

#include <array>
#include <optional>
#include <stdexcept>

namespace gpt {

namespace {
// Part of every disk-cache key, beside the build's identity: bump when what a key covers changes.
constexpr const char *kKeyVersion = "gpt-jit-5 llvm-19.1.7 shared-object";

std::string keyOf(llvm::ArrayRef<std::string> source, llvm::StringRef name, const JitTarget &target) {
  const std::string host = target.description(); // named: the parts below are views
  llvm::SHA256 hash;
  auto add = [&](llvm::StringRef part) {
    hash.update(part);
    hash.update(llvm::StringRef("\0", 1));
  };
  for (llvm::StringRef part :
       {llvm::StringRef(kKeyVersion), llvm::StringRef(compilerIdentity()), llvm::StringRef(host), name})
    add(part);
  for (const std::string &part : source) add(part);
  std::array<uint8_t, 32> digest = hash.final();
  return std::string(digest.begin(), digest.end());
}

} // namespace

std::unique_ptr<JitFunction> jitThroughDiskCache(llvm::ArrayRef<std::string> source, llvm::StringRef name,
                                                 const JitTarget &target, const DiskCacheSettings &settings,
                                                 llvm::function_ref<std::string()> compile, bool *loaded) {
  *loaded = false;
  target.checkRunsOnHost(); // also before a load: another machine may have written the cache
  auto loadFromMemory = [&](std::string sharedObject) {
    std::string error;
    std::unique_ptr<JitFunction> function = JitFunction::load(std::move(sharedObject), name, -1, &error);
    if (!function) throw std::runtime_error("loading the compiled " + name.str() + " failed: " + error);
    return function;
  };
  // Without an identity for this build, a program of another build could be taken for its own.
  if (settings.directory.empty() || compilerIdentity().empty()) return loadFromMemory(compile());
  const std::string key = keyOf(source, name, target);
  ObjectCache cache(settings.directory, settings.maxBytes);
  try {
    cache.checkDirectory();
  } catch (const std::runtime_error &error) {
    throw CompileError(error.what());
  }
  // The entry's own file is loaded, so that perf and debuggers name the program by it.
  auto loadFromCache = [&]() -> std::unique_ptr<JitFunction> {
    int fd = -1;
    std::optional<std::string> sharedObject = cache.read(key, &fd);
    return sharedObject ? JitFunction::load(std::move(*sharedObject), name, fd) : nullptr;
  };
  if (std::unique_ptr<JitFunction> function = loadFromCache()) {
    *loaded = true;
    return function;
  }
  std::string sharedObject = compile();
  // Best effort: a cache that cannot be written (a full disk) costs speed, never correctness.
  bool stored = false;
  try {
    stored = cache.write(key, sharedObject);
  } catch (const std::exception &) {
  }
  if (stored)
    if (std::unique_ptr<JitFunction> function = loadFromCache()) return function;
  return loadFromMemory(std::move(sharedObject));
}

} // namespace gpt
