// JIT compilation through the on-disk object cache: shared by every compiled program (the
// builder's entry points and imported functions), so that all of them use one cache key.
#ifndef GPT_CC_RUNTIME_CACHEDJIT_H
#define GPT_CC_RUNTIME_CACHEDJIT_H

#include "cc/runtime/JitFunction.h"
#include "cc/runtime/JitTarget.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <memory>
#include <string>

namespace gpt {

/// Where compiled objects are cached: no disk cache when `directory` is empty.
struct DiskCacheSettings {
  std::string directory;
  uint64_t maxBytes;
};

/// JIT-compiles `name` of `module` (in the LLVM dialect) for `target`, or loads its object from
/// the disk cache, keyed by the SHA-256 of the compiler version, the target, the name and the
/// module's text; a compiled object is stored there (best effort). Sets `*loaded` to whether the
/// object came from the cache. Throws CompileError (CompiledModel.h) for an unusable cache
/// directory, std::runtime_error when the JIT fails.
std::unique_ptr<JitFunction> jitThroughDiskCache(mlir::ModuleOp module, llvm::StringRef name, const JitTarget &target,
                                                 const DiskCacheSettings &cache, bool *loaded);

} // namespace gpt

#endif // GPT_CC_RUNTIME_CACHEDJIT_H
