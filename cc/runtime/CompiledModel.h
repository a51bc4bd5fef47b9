// A GPT compiled for the host CPU: compiles each entry point for a sequence-length bucket once (or
// loads it from the disk cache) and keeps it for the life of the model; binds the weights and calls
// the programs. The compiler library builds and compiles them (ProgramCompiler.h), loaded on the
// first disk-cache miss.
#ifndef GPT_CC_RUNTIME_COMPILEDMODEL_H
#define GPT_CC_RUNTIME_COMPILEDMODEL_H

#include "cc/builder/EntryPoints.h"
#include "cc/builder/GPTConfig.h"
#include "cc/builder/Parameters.h"
#include "cc/codegen/cpu/PipelineLevels.h"
#include "cc/runtime/CompileOptions.h"
#include "cc/runtime/JitTarget.h"
#include "cc/runtime/MemRefDescriptor.h"
#include "cc/runtime/WeightArena.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gpt {

class JitFunction;
class ModelCompiler;
struct EntryRequest;

/// Logits written by compiled code: `rows x cols` floats at `data`, in a 64-byte aligned buffer
/// the runtime allocated for the call; the caller owns it and releases it with free(data).
struct Logits {
  float *data = nullptr;
  int64_t rows = 0, cols = 0;
};

class CompiledModel {
public:
  /// Throws std::invalid_argument when the configuration is unusable.
  CompiledModel(const GPTConfig &config, const CompileOptions &options);
  ~CompiledModel();

  const GPTConfig &config() const { return config_; }
  const CompileOptions &options() const { return options_; }
  /// The weight arguments of the compiled entry points, in order (parameterSpecs()).
  const std::vector<ParameterSpec> &parameters() const { return parameters_; }
  /// The weights a user supplies to setWeights(), in order (suppliedParameters()).
  const std::vector<ParameterSpec> &suppliedParameters() const { return supplied_; }
  /// The tile parameters of the target (options().targetCpu): the panel width the weights are
  /// packed in, the vocabulary's padding, the smallest bucket.
  target::TileParameters tiles() const { return target_.tileParameters(); }

  /// The sequence length `seqLen` tokens are padded to: the smallest power of two >= max(seqLen,
  /// tiles().smallestBucket), at most block_size. A user with many prompt lengths compiles a
  /// handful of buckets, not one program per length; causal attention makes the padding invisible
  /// to the real positions.
  int64_t bucketFor(int64_t seqLen) const;

  /// Binds the weights every entry point reads: dense float32 arrays in `suppliedParameters()`
  /// order, owned by the caller and alive while the model runs. Their descriptors are built once
  /// here, not on every call; the parameters whose layout is not AsGiven (panels, the LM head's
  /// transposed embedding) are laid out here, once, into storage the model owns.
  void setWeights(const std::vector<const float *> &weights);

  /// A matmul weight (or the tied embedding) given as llama.cpp quantized it, in a GGUF file:
  /// its rows in torch's [out, in] layout, each row a run of blocks of its format's GGUF type
  /// (WeightFormatTraits::repack), held in one or more parts of consecutive rows: a fused weight's
  /// parts (q, k and v) as the file stores them, never concatenated into a copy.
  /// A part's `type` names the GGUF type of its blocks when they are not in the weight's format
  /// (empty): any that kernels::convertedTypes names for the format; they are converted a block
  /// at a time as they are repacked, with no copy of the tensor. A nonzero `permutedHeads`: the
  /// part is a q or k weight whose rows llama.cpp's converter permuted within each of that many
  /// heads for its rope (kernels::BlockRows), read back in the model's order as they are repacked.
  struct QuantizedPart {
    const uint8_t *blocks;
    int64_t bytes;
    std::string type = {};
    int64_t permutedHeads = 0;
  };
  struct QuantizedWeight {
    WeightFormat format;
    std::vector<QuantizedPart> parts;
  };
  /// setWeights() where some weights come quantized, by name: such a weight's pointer may be
  /// null. When the model stores it in that very format its codes and scales are repacked as
  /// they are, never widened to f32; otherwise (a q4_0 tied embedding for a model that stores it
  /// in q8_0) its float32 values must be given too.
  void setWeights(const std::vector<const float *> &weights, const std::map<std::string, QuantizedWeight> &quantized);

  /// What this model's laid-out weights are a function of, for a file of them (PackedWeights.h):
  /// `sourceKey` (the caller's name for the source file and the code that converted it), this
  /// build of the compiler, and every parameter's name, format, layout, panel width and shape.
  /// Empty when the build cannot be told apart from others: then nothing is to be cached.
  std::string packedWeightsKey(const std::string &sourceKey) const;
  /// Binds the weights from a file writePackedWeights() made for the same key instead of laying
  /// them out: `weights` as setWeights() takes them, of which only the borrowed ones are read
  /// (the others may be null). False, with the binding unchanged, when the file is absent or
  /// does not hold this key's weights whole.
  bool bindPackedWeights(const std::vector<const float *> &weights, const std::string &path,
                         const std::string &sourceKey);
  /// Writes the bound weights' laid-out bytes to `path` for packedWeightsKey(`sourceKey`); throws
  /// std::runtime_error when the file cannot be written (nothing is left behind).
  void writePackedWeights(const std::string &path, const std::string &sourceKey) const;

  /// The supplied parameters compiled code reads in place (f32, as given): the caller keeps these
  /// arrays alive, and only these; every other one was laid out (or quantized) into storage of
  /// the model's own when the weights were bound.
  std::vector<std::string> borrowedParameters() const;

  /// The values the model computes with for the supplied parameter `name`, in its supplied shape,
  /// read back from the model's storage: unpacked, and dequantized (exactly: each weight is
  /// code * scale, rounded once to f32) for a low-precision format. For a parameter that is not
  /// borrowed, after setWeights(); throws std::invalid_argument otherwise.
  std::vector<float> storedWeight(const std::string &name) const;

  /// Where the model's own storage lies, after setWeights(): each argument that is not read in
  /// place (by argument name: packed weights, their scales, the LM head) as its address and bytes,
  /// and the blocks of memory they were laid out in (WeightArena::blocks()).
  struct StoredArgument {
    std::string name;
    const void *address;
    size_t bytes;
  };
  std::vector<StoredArgument> storedArguments() const;
  std::vector<std::pair<const void *, size_t>> weightBlocks() const;

  /// Logits [bucket, padded vocab] of `ids` (1 <= count <= block_size) padded to its bucket.
  /// Compiles on the first call per bucket.
  Logits forward(const int64_t *ids, int64_t count);

  /// One cached step (prefill or decode): `count` tokens at positions offset .. offset+count-1,
  /// their keys/values written into the per-layer caches `keys[l]`, `values[l]` (dense
  /// [n_kv_head, cacheLen, head_size] arrays of options().kvCache's elements, updated in place),
  /// attention over the cache.
  /// Returns the logits [1, padded vocab] of the last of the `count` tokens. Tokens are padded to
  /// their bucket when the padded rows still fit in the cache (else compiled for exactly `count`).
  /// Throws std::invalid_argument, before touching the caches, when they would overflow.
  /// With `everyRow` (speculative verification) the `count` tokens are not padded and the logits
  /// are [count, padded vocab], one row per token, from one pass over the weights; such a step
  /// never rolls a windowed cache (its tokens must fit unwrapped).
  Logits step(const int64_t *ids, int64_t count, int64_t offset, int64_t cacheLen, const std::vector<void *> &keys,
              const std::vector<void *> &values, bool everyRow = false);

  /// One batched step over paged KV pools (GPTBuilder.h, buildBatchStep): the arrays are already
  /// padded to `shape` (ids, positions, sequences, slots: [tokens]; tables: [batch, tableWidth];
  /// last: [batch]; keys[l], values[l]: [poolBlocks, n_kv_head, blockSize, head_size] of
  /// options().kvCache's elements, updated in place). The caller has checked every index. Returns the logits [batch,
  /// padded vocab]. Compiles on the first call per shape.
  struct BatchStepCall {
    BatchShape shape;
    const int64_t *ids, *positions, *sequences, *slots, *tables, *last;
    const std::vector<void *> &keys, &values;
  };
  Logits batchStep(const BatchStepCall &call);
  /// The batched step's program for `shape` after `stage`, as text.
  std::string batchStepIr(Stage stage, const BatchShape &shape);
  /// Batched-step programs compiled so far: {(tokens, batch, table width, pool blocks, block size): seconds}.
  std::map<std::vector<int64_t>, double> compiledBatchSteps() const;

  /// Whether the program that forward(`count` tokens) (cacheLen == 0) or step(`count` tokens at
  /// `offset`, `cacheLen`) runs is compiled already; compileFor() compiles it now if not. The
  /// Python layer compiles on a thread of its own through these, so that Ctrl-C is not held up
  /// by a compile. Both throw std::invalid_argument for arguments the call itself would refuse.
  bool isCompiledFor(int64_t count, int64_t offset, int64_t cacheLen, bool everyRow = false) const;
  void compileFor(int64_t count, int64_t offset, int64_t cacheLen, bool everyRow = false);

  /// The program of an entry point after `stage`, as text: forward for `seqLen` tokens, or
  /// (cacheLen > 0) the cached step for `seqLen` tokens against a cache of `cacheLen` positions.
  /// `everyRow`: the step that returns every token's logits (speculative verification).
  std::string ir(Stage stage, int64_t seqLen, int64_t cacheLen = 0, bool everyRow = false);

  /// Writes the machine code of the forward program for `seqLen` tokens (compiling it if needed)
  /// to `path`, an ELF object file: what the JIT runs, for inspection with objdump.
  void dumpForwardObject(int64_t seqLen, const std::string &path);

  /// Forward buckets compiled so far, and the wall time spent compiling each.
  std::map<int64_t, double> compiledBuckets() const;
  /// Cached-step programs compiled so far: {(tokens, cache length): seconds}.
  std::map<std::pair<int64_t, int64_t>, double> compiledSteps() const;
  /// Programs loaded from the on-disk cache instead of being compiled.
  int64_t diskCacheHits() const;
  /// Seconds spent compiling (or loading) every program so far.
  double totalCompileSeconds() const;

private:
  /// A compiler of this model's entry points, the caller's alone until it hands it back with
  /// returnCompiler(): an idle one, or a new one (loading the compiler library on first use). Each
  /// has an MLIRContext of its own, so that programs of different shapes compile at the same time
  /// (the prefill and the decode step of a first token, on two threads).
  std::unique_ptr<ModelCompiler> takeCompiler();
  void returnCompiler(std::unique_ptr<ModelCompiler> compiler);
  /// The program `find()` finds (called under `mutex`), else compiled (or loaded) from `request`
  /// outside `mutex` and handed to `keep()` (under `mutex`) with its seconds. One caller compiles
  /// a `slot` at a time; another caller of the slot waits for it and finds its program, while
  /// callers of other slots compile theirs meanwhile.
  const JitFunction &compileOnce(const std::string &slot, const std::function<const JitFunction *()> &find,
                                 const EntryRequest &request,
                                 const std::function<const JitFunction &(std::unique_ptr<JitFunction>, double)> &keep);
  WeightStorage weightStorage() const {
    return {packsWeights(options_.level), options_.weights, tiles(), options_.kvCache, options_.weightFormats};
  }
  /// Throw std::invalid_argument for a call forward() or step() refuses.
  void checkForward(int64_t count) const;
  void checkStep(int64_t count, int64_t offset, int64_t cacheLen, bool everyRow = false) const;
  /// The rows the step program for `count` tokens at `offset` is compiled for: 1 for decode, else
  /// the bucket when its padded rows fit in the cache, else `count`.
  int64_t stepRows(int64_t count, int64_t offset, int64_t cacheLen) const;
  const JitFunction &forwardFor(int64_t bucket);
  const JitFunction &stepFor(int64_t seqLen, int64_t cacheLen, bool everyRow = false);
  /// Compiles entry point `entry` or loads it from the disk cache (CachedJit.h); the caller does
  /// not hold `mutex`.
  std::unique_ptr<JitFunction> compileEntry(const EntryRequest &entry);
  /// The per-call arguments of an entry point (see EntryPoints.h); forward leaves the step's empty.
  struct CallArguments {
    const int64_t *ids, *positions;
    int64_t rows;
    const int64_t *last;
    int64_t offset, cacheLen;
    const std::vector<void *> &keys, &values;
    int64_t logitsRows;
    const BatchStepCall *batch = nullptr; ///< the batched step's own arguments
  };
  /// Runs `function`, the compiled `entry`, with its arguments in entryArguments() order: the
  /// call's, the bound weights and a new [logitsRows, padded vocab] logits buffer, returned.
  Logits run(const JitFunction &function, EntryPoint entry, const CallArguments &call);

  GPTConfig config_;
  CompileOptions options_;
  JitTarget target_; // options_.targetCpu, resolved and checked against the host
  std::vector<ParameterSpec> parameters_, supplied_;
  std::vector<EntryArgument> forwardArguments_, stepArguments_, batchStepArguments_; // entryArguments(), made once
  std::vector<MemRefDescriptor> weightDescriptors;                                   // set once by setWeights
  std::vector<const void *> weightData;                         // each one's data, for storedWeight
  std::unique_ptr<WeightArena> weightArena;                     // the laid-out copies they point into
  std::mutex compilersMutex;                                    // guards idleCompiler
  std::unique_ptr<ModelCompiler> idleCompiler;                  // one kept for the next compile; any other is freed
  mutable std::mutex mutex;                                     // guards the caches and `compiling`
  std::map<std::string, std::shared_ptr<std::mutex>> compiling; // compileOnce()'s slots, held while compiling
  std::map<int64_t, std::unique_ptr<JitFunction>> forwardCache;
  std::map<int64_t, double> compileSeconds;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<JitFunction>> stepCache;
  std::map<std::pair<int64_t, int64_t>, double> stepCompileSeconds;
  // The every-row steps of speculative verification, by (tokens, cache length).
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<JitFunction>> everyRowStepCache;
  std::map<std::pair<int64_t, int64_t>, double> everyRowStepCompileSeconds;
  std::map<std::vector<int64_t>, std::unique_ptr<JitFunction>> batchStepCache; // by batchKey()
  std::map<std::vector<int64_t>, double> batchStepCompileSeconds;
  int64_t diskHits = 0;
};

} // namespace gpt

#endif // GPT_CC_RUNTIME_COMPILEDMODEL_H
