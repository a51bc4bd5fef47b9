// A GPT compiled for the host CPU: builds each entry point for a sequence-length bucket, runs the
// pass pipeline, JIT-compiles it once and caches it for the life of the model.
#ifndef GPT_CC_RUNTIME_COMPILEDMODEL_H
#define GPT_CC_RUNTIME_COMPILEDMODEL_H

#include "cc/builder/GPTBuilder.h"
#include "cc/passes/Pipelines.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace gpt {

class JitFunction;

/// Thrown when a pipeline or the JIT fails; carries MLIR's diagnostics.
struct CompileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CompileOptions {
  PipelineLevel level = PipelineLevel::Default;
  int threads = 0;  ///< 0: all cores
};

/// Logits returned by compiled code: `rows x cols` floats at `data`, in a buffer that compiled
/// code allocated with malloc; the caller owns it and releases it with free(allocated).
struct Logits {
  float *data = nullptr;
  void *allocated = nullptr;
  int64_t rows = 0, cols = 0;
};

class CompiledModel {
public:
  /// Throws std::invalid_argument when the configuration is unusable.
  CompiledModel(const GPTConfig &config, const CompileOptions &options);
  ~CompiledModel();

  const GPTConfig &config() const { return config_; }
  const CompileOptions &options() const { return options_; }
  const std::vector<ParameterSpec> &parameters() const { return parameters_; }

  /// The sequence length `seqLen` tokens are padded to: the smallest power of two >= max(seqLen, 8),
  /// at most block_size. A user with many prompt lengths compiles a handful of buckets, not one
  /// program per length; causal attention makes the padding invisible to the real positions.
  int64_t bucketFor(int64_t seqLen) const;

  /// Logits [bucket, padded vocab] of `ids` (1 <= count <= block_size) padded to its bucket; `weights`
  /// point at dense float32 arrays in `parameters()` order. Compiles on the first call per bucket.
  Logits forward(const int64_t *ids, int64_t count, const std::vector<const float *> &weights);

  /// The forward program for `seqLen` tokens after `stage`, as text.
  std::string ir(Stage stage, int64_t seqLen);

  /// Buckets compiled so far, and the wall time spent compiling each.
  std::map<int64_t, double> compiledBuckets() const;

private:
  const JitFunction &forwardFor(int64_t bucket);

  GPTConfig config_;
  CompileOptions options_;
  std::vector<ParameterSpec> parameters_;
  std::unique_ptr<mlir::MLIRContext> context;
  mutable std::mutex mutex;  // guards the context and the caches
  std::map<int64_t, std::unique_ptr<JitFunction>> forwardCache;
  std::map<int64_t, double> compileSeconds;
};

} // namespace gpt

#endif // GPT_CC_RUNTIME_COMPILEDMODEL_H
