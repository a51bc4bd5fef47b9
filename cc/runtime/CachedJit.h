// JIT compilation through the on-disk object cache: shared by every compiled program (the
// builder's entry points and imported functions), so that all of them use one cache key.
#ifndef GPT_CC_RUNTIME_CACHEDJIT_H
#define GPT_CC_RUNTIME_CACHEDJIT_H

#include "cc/runtime/JitFunction.h"
#include "cc/runtime/JitTarget.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
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

/// Compiles entry point `name` for `target`, or loads it from the disk cache.
///
/// The key is computed before anything is lowered, as ccache's direct mode hashes a compiler's
/// inputs: the SHA-256 of this compiler build (compilerIdentity()), the target's description,
/// `name` and `source`, the rest of what determines the program (the pipeline's options and the
/// builder's inputs, or the text of the module the pipeline starts from). A hit loads the shared
/// object without loading the compiler; a miss calls `compile()` for the shared object (the
/// compiler library's work, ProgramCompiler.h) and stores it (best effort). Sets `*loaded` to
/// whether the program came from the cache. Throws CompileError (CompiledModel.h) for an unusable cache directory,
/// std::runtime_error when the JIT fails.
std::unique_ptr<JitFunction> jitThroughDiskCache(llvm::ArrayRef<std::string> source, llvm::StringRef name,
                                                 const JitTarget &target, const DiskCacheSettings &cache,
                                                 llvm::function_ref<std::string()> compile, bool *loaded);

} // namespace gpt

#endif // GPT_CC_RUNTIME_CACHEDJIT_H
