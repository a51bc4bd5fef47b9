// Building, compiling, caching and calling a GPT's entry points (see CompiledModel.h).
#include "cc/runtime/CompiledModel.h"

#include "cc/TargetParameters.h"
#include "cc/builder/BuildFingerprint.h"
#include "cc/kernels/PanelPacking.h"
#include "cc/runtime/CachedJit.h"
#include "cc/runtime/JitFunction.h"
#include "cc/runtime/MemRefDescriptor.h"
#include "cc/runtime/ObjectCache.h"
#include "cc/runtime/ProgramCompiler.h"
#include "cc/runtime/ReleaseMemory.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <stdexcept>

namespace gpt {

CompiledModel::CompiledModel(const GPTConfig &config, const CompileOptions &options)
    : config_(config), options_(options), target_(resolveTarget(options.targetCpu)) {
  if (std::string problem = config.validate(); !problem.empty()) throw std::invalid_argument(problem);
  const bool lowPrecision = options.weights != WeightFormat::F32 ||
                            std::any_of(options.weightFormats.begin(), options.weightFormats.end(),
                                        [](const auto &entry) { return entry.second != WeightFormat::F32; });
  if (lowPrecision && !packsWeights(options.level))
    throw std::invalid_argument("low-precision weights need a vectorized pipeline (\"vectorized\" or \"default\"): "
                                "lower levels take their matmul weights unpacked, in f32");
  parameters_ = parameterSpecs(config, weightStorage());
  supplied_ = gpt::suppliedParameters(config);
  forwardArguments_ = entryArguments(EntryPoint::Forward, config, parameters_.size());
  stepArguments_ = entryArguments(EntryPoint::Step, config, parameters_.size());
  batchStepArguments_ = entryArguments(EntryPoint::BatchStep, config, parameters_.size());
}

CompiledModel::~CompiledModel() = default;

int64_t CompiledModel::bucketFor(int64_t seqLen) const {
  // Padding rows are keys too: under a mask that lets a query see later keys they would be seen.
  if (config_.attentionLooksAhead) return seqLen;
  int64_t bucket = tiles().smallestBucket;
  while (bucket < seqLen) bucket *= 2;
  return std::min(bucket, std::max(config_.blockSize, seqLen));
}

std::string pipelineKey(const CompileOptions &options) {
  return std::string("level=") + pipelineLevelName(options.level) +
         " threads=" + std::to_string(pipelineThreads(options));
}

std::unique_ptr<ModelCompiler> CompiledModel::takeCompiler() {
  {
    std::lock_guard<std::mutex> lock(compilersMutex);
    if (idleCompiler) return std::move(idleCompiler);
  }
  return programCompiler().compileModel(config_, weightStorage(), options_, target_);
}

void CompiledModel::returnCompiler(std::unique_ptr<ModelCompiler> compiler) {
  std::lock_guard<std::mutex> lock(compilersMutex);
  // A second context (tens of MB of loaded dialects) is not kept for a rare concurrent compile.
  if (!idleCompiler) idleCompiler = std::move(compiler);
}

namespace {
/// A compiler taken from a model for one use, handed back however the use ends.
class CompilerLease {
public:
  CompilerLease(std::function<std::unique_ptr<ModelCompiler>()> take,
                std::function<void(std::unique_ptr<ModelCompiler>)> give)
      : compiler(take()), give(std::move(give)) {}
  ~CompilerLease() { give(std::move(compiler)); }
  CompilerLease(const CompilerLease &) = delete;
  CompilerLease &operator=(const CompilerLease &) = delete;
  ModelCompiler *operator->() { return compiler.get(); }

private:
  std::unique_ptr<ModelCompiler> compiler;
  std::function<void(std::unique_ptr<ModelCompiler>)> give;
};
} // namespace

namespace {
/// The request for forward (cacheLen == 0) or the cached step of `seqLen` tokens.
EntryRequest entryFor(int64_t seqLen, int64_t cacheLen) {
  return cacheLen > 0 ? EntryRequest{"step", seqLen, cacheLen, 1} : EntryRequest{"forward", seqLen, 0, seqLen};
}
} // namespace

std::string CompiledModel::ir(Stage stage, int64_t seqLen, int64_t cacheLen, bool everyRow) {
  EntryRequest request = entryFor(seqLen, cacheLen);
  if (everyRow && cacheLen > 0) request.logitsRows = seqLen;
  CompilerLease compiler([this] { return takeCompiler(); }, [this](auto c) { returnCompiler(std::move(c)); });
  return compiler->ir(request, stage);
}

namespace {
double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
} // namespace

const JitFunction &
CompiledModel::compileOnce(const std::string &slot, const std::function<const JitFunction *()> &find,
                           const EntryRequest &request,
                           const std::function<const JitFunction &(std::unique_ptr<JitFunction>, double)> &keep) {
  std::shared_ptr<std::mutex> compilingSlot;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (const JitFunction *found = find()) return *found;
    std::shared_ptr<std::mutex> &held = compiling[slot];
    if (!held) held = std::make_shared<std::mutex>();
    compilingSlot = held;
  }
  std::lock_guard<std::mutex> slotLock(*compilingSlot);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (const JitFunction *found = find()) return *found; // compiled by the caller we waited for
  }
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<JitFunction> function = compileEntry(request);
  std::lock_guard<std::mutex> lock(mutex);
  compiling.erase(slot); // a later caller finds the program; a waiter holds the slot's mutex itself
  return keep(std::move(function), secondsSince(start));
}

const JitFunction &CompiledModel::forwardFor(int64_t bucket) {
  return compileOnce(
      "forward " + std::to_string(bucket),
      [&]() -> const JitFunction * {
        auto it = forwardCache.find(bucket);
        return it == forwardCache.end() ? nullptr : it->second.get();
      },
      entryFor(bucket, 0),
      [&](std::unique_ptr<JitFunction> function, double seconds) -> const JitFunction & {
        compileSeconds[bucket] = seconds;
        return *(forwardCache[bucket] = std::move(function));
      });
}

const JitFunction &CompiledModel::stepFor(int64_t seqLen, int64_t cacheLen, bool everyRow) {
  auto key = std::make_pair(seqLen, cacheLen);
  auto &cache = everyRow ? everyRowStepCache : stepCache;
  EntryRequest request = entryFor(seqLen, cacheLen);
  if (everyRow) request.logitsRows = seqLen;
  return compileOnce((everyRow ? "every-row step " : "step ") + std::to_string(seqLen) + " " + std::to_string(cacheLen),
                     [&]() -> const JitFunction * {
                       auto it = cache.find(key);
                       return it == cache.end() ? nullptr : it->second.get();
                     },
                     request,
                     [&](std::unique_ptr<JitFunction> function, double seconds) -> const JitFunction & {
                       (everyRow ? everyRowStepCompileSeconds : stepCompileSeconds)[key] = seconds;
                       return *(cache[key] = std::move(function));
                     });
}

std::unique_ptr<JitFunction> CompiledModel::compileEntry(const EntryRequest &entry) {
  target_.checkRunsOnHost(); // before minutes of compiling code that could not run
  // The builder's inputs key the disk cache: a hit loads no compiler, builds no module and runs no
  // pipeline.
  const std::vector<std::string> source = {
      pipelineKey(options_), "logits rows " + std::to_string(entry.logitsRows),
      buildFingerprint(config_, weightStorage(), entry.seqLen, entry.cacheLen, entry.batch)};
  bool loaded = false;
  std::unique_ptr<JitFunction> function = jitThroughDiskCache(
      source, entry.name, target_, {options_.cacheDir, options_.cacheMaxBytes},
      [&] {
        CompilerLease compiler([this] { return takeCompiler(); }, [this](auto c) { returnCompiler(std::move(c)); });
        return compiler->compile(entry);
      },
      &loaded);
  if (loaded) {
    std::lock_guard<std::mutex> lock(mutex);
    ++diskHits;
  }
  releaseFreedMemory(); // the modules of every stage, and LLVM's, are freed by now
  return function;
}

double CompiledModel::totalCompileSeconds() const {
  std::lock_guard<std::mutex> lock(mutex);
  double total = 0;
  for (const auto &[bucket, seconds] : compileSeconds) total += seconds;
  for (const auto &[key, seconds] : stepCompileSeconds) total += seconds;
  for (const auto &[key, seconds] : everyRowStepCompileSeconds) total += seconds;
  for (const auto &[key, seconds] : batchStepCompileSeconds) total += seconds;
  return total;
}

int64_t CompiledModel::diskCacheHits() const {
  std::lock_guard<std::mutex> lock(mutex);
  return diskHits;
}

Logits CompiledModel::run(const JitFunction &function, EntryPoint entry, const CallArguments &call) {
  if (weightDescriptors.empty()) throw std::logic_error("CompiledModel: setWeights() was never called");
  const int64_t cols = config_.paddedVocabSize(tiles());
  kernels::AlignedFloats logits = kernels::allocateAligned(call.logitsRows * cols);
  MemRefDescriptor out = MemRefDescriptor::view(logits.get(), {call.logitsRows, cols});
  // Built before any pointer into them is taken: the vectors must not reallocate afterwards.
  const BatchStepCall *batch = call.batch;
  const int64_t lastRows = batch ? batch->shape.batch : entry == EntryPoint::Step ? call.logitsRows : 1;
  std::vector<MemRefDescriptor> descriptors = {MemRefDescriptor::view(call.ids, {call.rows}),
                                               MemRefDescriptor::view(call.positions, {call.rows}),
                                               MemRefDescriptor::view(call.last, {lastRows})};
  if (batch) {
    descriptors.push_back(MemRefDescriptor::view(batch->sequences, {call.rows}));
    descriptors.push_back(MemRefDescriptor::view(batch->slots, {call.rows}));
    descriptors.push_back(MemRefDescriptor::view(batch->tables, {batch->shape.batch, batch->shape.tableWidth}));
  }
  std::vector<MemRefDescriptor> caches;
  const int64_t rowWidth = kvCacheRowWidth(options_.kvCache, config_.headSize());
  const std::vector<int64_t> cacheShape =
      batch ? std::vector<int64_t>{batch->shape.poolBlocks, config_.kvHeads(), batch->shape.blockSize, rowWidth}
            : std::vector<int64_t>{config_.kvHeads(), call.cacheLen, rowWidth};
  for (int64_t layer = 0; layer < static_cast<int64_t>(call.keys.size()); ++layer) {
    caches.push_back(MemRefDescriptor::view(call.keys[layer], cacheShape));
    caches.push_back(MemRefDescriptor::view(call.values[layer], cacheShape));
  }
  int64_t offset = call.offset; // an index argument is passed by value
  EntrySlots<void *> slots;
  slots.ids = descriptors[0].pointer();
  slots.positions = descriptors[1].pointer();
  slots.last = descriptors[2].pointer();
  slots.offset = &offset;
  if (batch) {
    slots.sequences = descriptors[3].pointer();
    slots.slots = descriptors[4].pointer();
    slots.tables = descriptors[5].pointer();
  }
  for (size_t layer = 0; layer < call.keys.size(); ++layer) {
    slots.keys.push_back(caches[2 * layer].pointer());
    slots.values.push_back(caches[2 * layer + 1].pointer());
  }
  // Compiled code only reads argument descriptors, so concurrent calls can share the weights'.
  for (MemRefDescriptor &weight : weightDescriptors) slots.weights.push_back(weight.pointer());
  slots.logits = out.pointer();
  const std::vector<EntryArgument> &entryArgs = entry == EntryPoint::Step        ? stepArguments_
                                                : entry == EntryPoint::BatchStep ? batchStepArguments_
                                                                                 : forwardArguments_;
  std::vector<void *> arguments = slots.inOrder(entryArgs);
  std::vector<size_t> scalarArguments;
  for (size_t i = 0; i < entryArgs.size(); ++i)
    if (entryArgs[i].kind == ArgumentKind::CacheOffset) scalarArguments.push_back(i);
  function.call(arguments, scalarArguments);
  return Logits{logits.release(), call.logitsRows, cols};
}

void CompiledModel::checkStep(int64_t count, int64_t offset, int64_t cacheLen, bool everyRow) const {
  if (cacheLen < 1 || cacheLen > config_.blockSize)
    throw std::invalid_argument("cache length " + std::to_string(cacheLen) + " is outside [1, block_size]");
  // A windowed model's cache of exactly W slots rolls (position p at slot p % W, GPTBuilder.cpp):
  // past its end it takes one token at a time, which overwrites the one position that just left
  // the window; learned positions still end at block_size.
  bool rolls = !everyRow && config_.attentionWindow > 0 && cacheLen == config_.attentionWindow && count == 1 &&
               (config_.rope || offset < config_.blockSize);
  if (count < 1 || offset < 0 || (offset + count > cacheLen && !rolls))
    throw std::invalid_argument(std::to_string(count) + " tokens at position " + std::to_string(offset) +
                                " do not fit in a cache of " + std::to_string(cacheLen) + " positions");
}

int64_t CompiledModel::stepRows(int64_t count, int64_t offset, int64_t cacheLen) const {
  // Decode (one token) never pads; prefill pads to its bucket when the padded rows fit.
  int64_t rows = count == 1 ? 1 : bucketFor(count);
  return offset + rows > cacheLen ? count : rows;
}

void CompiledModel::checkForward(int64_t count) const {
  if (count < 1 || count > config_.blockSize)
    throw std::invalid_argument("sequence length " + std::to_string(count) +
                                " is outside [1, block_size=" + std::to_string(config_.blockSize) + "]");
}

bool CompiledModel::isCompiledFor(int64_t count, int64_t offset, int64_t cacheLen, bool everyRow) const {
  if (cacheLen == 0)
    checkForward(count);
  else
    checkStep(count, offset, cacheLen, everyRow);
  std::lock_guard<std::mutex> lock(mutex);
  if (everyRow && cacheLen > 0) return everyRowStepCache.count({count, cacheLen}) > 0;
  return cacheLen == 0 ? forwardCache.count(bucketFor(count)) > 0
                       : stepCache.count({stepRows(count, offset, cacheLen), cacheLen}) > 0;
}

void CompiledModel::compileFor(int64_t count, int64_t offset, int64_t cacheLen, bool everyRow) {
  if (cacheLen == 0) {
    checkForward(count);
    forwardFor(bucketFor(count));
  } else {
    checkStep(count, offset, cacheLen, everyRow);
    stepFor(everyRow ? count : stepRows(count, offset, cacheLen), cacheLen, everyRow);
  }
}

Logits CompiledModel::step(const int64_t *ids, int64_t count, int64_t offset, int64_t cacheLen,
                           const std::vector<void *> &keys, const std::vector<void *> &values, bool everyRow) {
  if (keys.size() != static_cast<size_t>(config_.nLayer) || values.size() != keys.size())
    throw std::invalid_argument("expected one key and one value cache per layer");
  checkStep(count, offset, cacheLen, everyRow);
  // Every row's logits: the tokens are not padded, so that each row is one of theirs.
  const int64_t rows = everyRow ? count : stepRows(count, offset, cacheLen);
  const JitFunction &function = stepFor(rows, cacheLen, everyRow);

  std::vector<int64_t> paddedIds(rows, 0), positions(rows), last = {count - 1};
  if (everyRow) {
    last.resize(rows);
    std::iota(last.begin(), last.end(), 0);
  }
  std::copy(ids, ids + count, paddedIds.begin());
  // Rotary positions have no table to stay inside: a rolling cache's positions pass block_size.
  for (int64_t i = 0; i < rows; ++i)
    positions[i] = config_.rope ? offset + i : std::min(offset + i, config_.blockSize - 1);
  CallArguments call{paddedIds.data(),
                     positions.data(),
                     rows,
                     last.data(),
                     offset,
                     cacheLen,
                     keys,
                     values,
                     /*logitsRows=*/everyRow ? rows : 1};
  return run(function, EntryPoint::Step, call);
}

namespace {
std::vector<int64_t> batchKey(const BatchShape &shape) {
  return {shape.tokens, shape.batch, shape.tableWidth, shape.poolBlocks, shape.blockSize};
}
} // namespace

Logits CompiledModel::batchStep(const BatchStepCall &call) {
  const BatchShape &shape = call.shape;
  if (shape.tokens < 1 || shape.batch < 1 || shape.tableWidth < 1 || shape.poolBlocks < 1 || shape.blockSize < 1)
    throw std::invalid_argument("a batched step needs at least one token, sequence, table entry, block and slot");
  if (call.keys.size() != static_cast<size_t>(config_.nLayer) || call.values.size() != call.keys.size())
    throw std::invalid_argument("expected one key and one value pool per layer");
  const std::vector<int64_t> key = batchKey(shape);
  std::string slot = "batch step";
  for (int64_t part : key) slot += " " + std::to_string(part);
  const JitFunction *function = &compileOnce(
      slot,
      [&]() -> const JitFunction * {
        auto it = batchStepCache.find(key);
        return it == batchStepCache.end() ? nullptr : it->second.get();
      },
      EntryRequest{"batch_step", shape.tokens, 0, shape.batch, &shape},
      [&](std::unique_ptr<JitFunction> compiled, double seconds) -> const JitFunction & {
        batchStepCompileSeconds[key] = seconds;
        return *(batchStepCache[key] = std::move(compiled));
      });
  CallArguments arguments{call.ids,
                          call.positions,
                          shape.tokens,
                          call.last,
                          0,
                          0,
                          call.keys,
                          call.values,
                          /*logitsRows=*/shape.batch,
                          &call};
  return run(*function, EntryPoint::BatchStep, arguments);
}

std::string CompiledModel::batchStepIr(Stage stage, const BatchShape &shape) {
  CompilerLease compiler([this] { return takeCompiler(); }, [this](auto c) { returnCompiler(std::move(c)); });
  return compiler->ir(EntryRequest{"batch_step", shape.tokens, 0, shape.batch, &shape}, stage);
}

std::map<std::vector<int64_t>, double> CompiledModel::compiledBatchSteps() const {
  std::lock_guard<std::mutex> lock(mutex);
  return batchStepCompileSeconds;
}

Logits CompiledModel::forward(const int64_t *ids, int64_t count) {
  checkForward(count);
  int64_t bucket = bucketFor(count);
  const JitFunction &function = forwardFor(bucket);

  // Padding tokens (id 0) sit after the real ones, so causal attention keeps them out of every
  // real position's result.
  std::vector<int64_t> paddedIds(bucket, 0), positions(bucket), last = {count - 1};
  std::copy(ids, ids + count, paddedIds.begin());
  for (int64_t i = 0; i < bucket; ++i) positions[i] = i;
  static const std::vector<void *> kNoCaches;
  CallArguments call{paddedIds.data(),     positions.data(), bucket, last.data(), 0, 0, kNoCaches, kNoCaches,
                     /*logitsRows=*/bucket};
  return run(function, EntryPoint::Forward, call);
}

void CompiledModel::dumpForwardObject(int64_t seqLen, const std::string &path) {
  if (seqLen < 1 || seqLen > config_.blockSize) throw std::invalid_argument("sequence length outside [1, block_size]");
  if (!target_.runsOnHost()) { // compile-only: the object is written, never linked or run
    CompilerLease compiler([this] { return takeCompiler(); }, [this](auto c) { returnCompiler(std::move(c)); });
    compiler->writeObject(entryFor(bucketFor(seqLen), 0), path);
    return;
  }
  const JitFunction &function = forwardFor(bucketFor(seqLen));
  std::lock_guard<std::mutex> lock(mutex);
  function.dumpObject(path);
}

std::map<int64_t, double> CompiledModel::compiledBuckets() const {
  std::lock_guard<std::mutex> lock(mutex);
  return compileSeconds;
}

std::map<std::pair<int64_t, int64_t>, double> CompiledModel::compiledSteps() const {
  std::lock_guard<std::mutex> lock(mutex);
  return stepCompileSeconds;
}

} // namespace gpt
