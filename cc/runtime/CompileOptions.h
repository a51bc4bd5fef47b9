// How a model or function is compiled (pipeline level, threads, disk cache, weight and KV cache
// formats, target CPU) and the error compiling reports: shared by the runtime and the compiler library.
#ifndef GPT_CC_RUNTIME_COMPILEOPTIONS_H
#define GPT_CC_RUNTIME_COMPILEOPTIONS_H

#include "cc/builder/Parameters.h"
#include "cc/codegen/cpu/PipelineLevels.h"

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

namespace gpt {

/// The cap of a cache whose user did not choose one: room for about a hundred GPT-2 small
/// programs (a few MB of machine code each).
constexpr uint64_t kDefaultCacheMaxBytes = uint64_t(512) << 20;

/// Thrown when a pipeline or the JIT fails; carries MLIR's diagnostics.
struct CompileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CompileOptions {
  PipelineLevel level = PipelineLevel::Vectorized;
  int threads = 0; ///< 0: all cores
  /// Directory of the on-disk object cache shared by processes; empty: no disk cache. Entries are
  /// keyed by the SHA-256 of this compiler build, the target CPU and features, the pipeline's
  /// options and the builder's inputs (the configuration, shapes and weight layouts,
  /// BuildFingerprint.h): see CachedJit.h.
  std::string cacheDir;
  /// The disk cache's size cap: least recently used entries are evicted beyond it.
  uint64_t cacheMaxBytes = kDefaultCacheMaxBytes;
  /// The format matmul weights are stored and streamed in (packed weights of vectorized levels).
  WeightFormat weights = WeightFormat::F32;
  /// Layer matmul weights stored in another format than `weights`, by parameter name
  /// (WeightStorage::formatOverrides): a GGUF file's mix of formats, each tensor in its own.
  std::map<std::string, WeightFormat> weightFormats;
  /// The format the KV caches of the cached entry points (step, batch step) store keys and values
  /// in: the type of their cache arguments (Parameters.h).
  KvCacheFormat kvCache = KvCacheFormat::F32;
  /// The CPU compiled code targets: "host" (its CPU and features), or a named CPU with that CPU's
  /// own features, compile-only where the host lacks one (resolveTarget, ProgramCompiler.h).
  std::string targetCpu = "host";
};

/// The threads the pipeline compiles for: options.threads, at least 1.
inline int64_t pipelineThreads(const CompileOptions &options) { return options.threads > 1 ? options.threads : 1; }

/// What of `options` the pass pipeline reads (its level and threads), as text: part of each
/// program's disk-cache key (CachedJit.h).
std::string pipelineKey(const CompileOptions &options);

} // namespace gpt

#endif // GPT_CC_RUNTIME_COMPILEOPTIONS_H
