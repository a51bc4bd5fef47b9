// JIT compilation through the on-disk object cache (see CachedJit.h).
#include "cc/runtime/CachedJit.h"

#include "cc/runtime/CompiledModel.h"
#include "cc/runtime/CompilerIdentity.h"
#include "cc/runtime/ObjectCache.h"

#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <limits>
#include <optional>
#include <stdexcept>

namespace gpt {

namespace {
// Part of every disk-cache key, beside the build's identity: bump when what a key covers changes.
constexpr const char *kKeyVersion = "gpt-jit-3 llvm-19.1.7";

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

std::unique_ptr<JitFunction> compile(llvm::StringRef name, const JitTarget &target,
                                     llvm::function_ref<mlir::OwningOpRef<mlir::ModuleOp>()> lowerToLLVM) {
  mlir::OwningOpRef<mlir::ModuleOp> module = lowerToLLVM();
  return std::make_unique<JitFunction>(*module, name, target);
}
} // namespace

std::string sourceText(mlir::ModuleOp module) {
  // Every constant printed whole, whatever printing options a tool set: a key that elided a mask's
  // data would give two masks one entry.
  mlir::OpPrintingFlags flags;
  flags.elideLargeElementsAttrs(std::numeric_limits<int64_t>::max());
  flags.elideLargeResourceString(std::numeric_limits<int64_t>::max());
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os, flags);
  return text;
}

std::unique_ptr<JitFunction> jitThroughDiskCache(llvm::ArrayRef<std::string> source, llvm::StringRef name,
                                                 const JitTarget &target, const DiskCacheSettings &settings,
                                                 llvm::function_ref<mlir::OwningOpRef<mlir::ModuleOp>()> lowerToLLVM,
                                                 bool *loaded) {
  *loaded = false;
  target.checkRunsOnHost(); // also before a load: another machine may have written the cache
  // Without an identity for this build, a program of another build could be taken for its own.
  if (settings.directory.empty() || compilerIdentity().empty()) return compile(name, target, lowerToLLVM);
  const std::string key = keyOf(source, name, target);
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
  std::unique_ptr<JitFunction> function = compile(name, target, lowerToLLVM);
  // Best effort: a cache that cannot be written (a full disk) costs speed, never correctness.
  try {
    cache.write(key, function->objectBytes());
  } catch (const std::exception &) {
  }
  return function;
}

} // namespace gpt
