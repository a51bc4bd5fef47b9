// Building, compiling, caching and calling a GPT's entry points (see CompiledModel.h).
#include "cc/runtime/CompiledModel.h"

#include "cc/TargetParameters.h"
#include "cc/builder/BuildFingerprint.h"
#include "cc/kernels/GgufRepacking.h"
#include "cc/kernels/LanePacking.h"
#include "cc/kernels/PanelPacking.h"
#include "cc/kernels/ParallelFor.h"
#include "cc/kernels/Quantization.h"
#include "cc/runtime/CachedJit.h"
#include "cc/runtime/JitFunction.h"
#include "cc/runtime/MemRefDescriptor.h"
#include "cc/runtime/ObjectCache.h"
#include "cc/runtime/ProgramCompiler.h"
#include "cc/runtime/ReleaseMemory.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <set>
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

ModelCompiler &CompiledModel::compiler() {
  if (!compiler_) compiler_ = programCompiler().compileModel(config_, weightStorage(), options_, target_);
  return *compiler_;
}

namespace {
/// The request for forward (cacheLen == 0) or the cached step of `seqLen` tokens.
EntryRequest entryFor(int64_t seqLen, int64_t cacheLen) {
  return cacheLen > 0 ? EntryRequest{"step", seqLen, cacheLen, 1} : EntryRequest{"forward", seqLen, 0, seqLen};
}
} // namespace

std::string CompiledModel::ir(Stage stage, int64_t seqLen, int64_t cacheLen, bool everyRow) {
  EntryRequest request = entryFor(seqLen, cacheLen);
  if (everyRow && cacheLen > 0) request.logitsRows = seqLen;
  std::lock_guard<std::mutex> lock(mutex);
  return compiler().ir(request, stage);
}

namespace {
double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
} // namespace

const JitFunction &CompiledModel::forwardFor(int64_t bucket) {
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = forwardCache.find(bucket); it != forwardCache.end()) return *it->second;
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<JitFunction> function = compileEntry(entryFor(bucket, 0));
  compileSeconds[bucket] = secondsSince(start);
  return *(forwardCache[bucket] = std::move(function));
}

const JitFunction &CompiledModel::stepFor(int64_t seqLen, int64_t cacheLen, bool everyRow) {
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(seqLen, cacheLen);
  auto &cache = everyRow ? everyRowStepCache : stepCache;
  if (auto it = cache.find(key); it != cache.end()) return *it->second;
  auto start = std::chrono::steady_clock::now();
  EntryRequest request = entryFor(seqLen, cacheLen);
  if (everyRow) request.logitsRows = seqLen;
  std::unique_ptr<JitFunction> function = compileEntry(request);
  (everyRow ? everyRowStepCompileSeconds : stepCompileSeconds)[key] = secondsSince(start);
  return *(cache[key] = std::move(function));
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
      [&] { return compiler().compile(entry); }, &loaded);
  if (loaded) ++diskHits;
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

namespace {
/// True when compiled code reads `spec`'s array as the user supplied it.
bool readsInPlace(const ParameterSpec &spec) {
  return !spec.derived() && spec.layout == WeightLayout::AsGiven && spec.format == WeightFormat::F32;
}

/// The bytes of a laid-out argument: its argument shape of f32 values or 32-bit lane words, or
/// of f16 scales.
size_t argumentBytes(const ParameterSpec &spec) {
  size_t bytes = spec.isScales() ? sizeof(uint16_t) : sizeof(uint32_t);
  for (int64_t extent : spec.argumentShape()) bytes *= static_cast<size_t>(extent);
  return bytes;
}

/// The bytes of the model's own copies of its weights (every argument not read in place), as the
/// arena hands them out.
size_t laidOutBytes(const std::vector<ParameterSpec> &parameters) {
  size_t total = 0;
  for (const ParameterSpec &spec : parameters)
    if (!readsInPlace(spec)) total += WeightArena::footprint(argumentBytes(spec));
  return total;
}
} // namespace

void CompiledModel::setWeights(const std::vector<const float *> &weights) { setWeights(weights, {}); }

void CompiledModel::setWeights(const std::vector<const float *> &weights,
                               const std::map<std::string, QuantizedWeight> &quantized) {
  if (weights.size() != supplied_.size())
    throw std::invalid_argument("expected " + std::to_string(supplied_.size()) + " weights, got " +
                                std::to_string(weights.size()));
  std::map<std::string, const float *> byName;
  for (size_t i = 0; i < supplied_.size(); ++i) byName[supplied_[i].name] = weights[i];
  for (const auto &[name, weight] : quantized)
    if (!byName.count(name) || !isBlockQuantized(weight.format))
      throw std::invalid_argument("'" + name + "' is no weight that can be given quantized (q8_0, q4_0 or q4_1)");
  std::set<std::string> repacked;
  // Built aside and swapped in at the end: a failure (out of memory) leaves the old binding intact.
  std::vector<MemRefDescriptor> descriptors;
  std::vector<const void *> data_;
  // The laid-out copies go into one block of memory (WeightArena.h); the steps before the last
  // layout of a weight write temporaries.
  auto arena = std::make_unique<WeightArena>(laidOutBytes(parameters_));
  // The layout kernels split each weight over the model's threads: a 1.7B model's load is
  // mostly this work and the first touch of the arena's pages, which the kernel zeroes.
  const int64_t threads = kernels::loadThreads(options_.threads);
  // A block-quantized weight's scales are made with its codes and bound by the spec after it.
  void *pendingScales = nullptr;
  for (const ParameterSpec &spec : parameters_) {
    if (spec.isScales()) {
      descriptors.push_back(MemRefDescriptor::view(pendingScales, spec.argumentShape()));
      data_.push_back(pendingScales);
      continue;
    }
    const std::string &key = spec.derived() ? spec.source : spec.name;
    const int64_t rows = spec.shape[0], cols = spec.shape.size() > 1 ? spec.shape[1] : 1;
    if (auto given = quantized.find(key);
        given != quantized.end() && spec.panelWidth && given->second.format == spec.format) {
      // Repacked as llama.cpp quantized it: rows of the [out, in] tensor are the weight's columns.
      const QuantizedWeight &weight = given->second;
      const int64_t blocks = rows / kernels::kQuantBlock, width = spec.panelWidth;
      const int64_t columns = spec.derived() ? config_.vocabSize : cols;
      const bool q8 = weight.format == WeightFormat::Q8_0, withMins = weight.format == WeightFormat::Q4_1;
      const int64_t blockBytes = q8         ? kernels::kQ8_0BlockBytes
                                 : withMins ? kernels::kQ4_1BlockBytes
                                            : kernels::kQ4_0BlockBytes;
      if (weight.q4_K && (weight.format != WeightFormat::Q4_1 || rows % kernels::kSuperBlock != 0))
        throw std::invalid_argument(key + ": q4_K blocks are repacked as q4_1 weights whose K is a multiple of " +
                                    std::to_string(kernels::kSuperBlock));
      const int64_t rowBytes =
          weight.q4_K ? rows / kernels::kSuperBlock * kernels::kQ4_KBlockBytes : blocks * blockBytes;
      std::vector<kernels::BlockRows> parts;
      int64_t bytes = 0;
      for (const QuantizedPart &part : weight.parts) {
        if (part.bytes < 0 || part.bytes % rowBytes != 0)
          throw std::invalid_argument(key + ": a part of " + std::to_string(part.bytes) + " bytes of " +
                                      (weight.q4_K ? "q4_K" : weightFormatName(weight.format)) +
                                      " blocks is not whole rows of " + std::to_string(rowBytes) + " bytes");
        parts.push_back({part.blocks, part.bytes / rowBytes});
        bytes += part.bytes;
      }
      if (bytes != columns * rowBytes)
        throw std::invalid_argument(key + ": " + std::to_string(bytes) + " bytes of " +
                                    (weight.q4_K ? "q4_K" : weightFormatName(weight.format)) + " blocks, expected " +
                                    std::to_string(columns * rowBytes));
      // The lanes are 32-bit words of 4 (q8_0) or 8 (q4_0, q4_1) rows of one column; q4_1 has
      // a min beside each scale.
      auto *codes =
          arena->allocateArray<uint32_t>(rows * cols / (q8 ? kernels::kQ8_0RowsPerWord : kernels::kQ4_0RowsPerWord));
      auto *scales = arena->allocateArray<uint16_t>(blocks * cols * (withMins ? 2 : 1));
      if (q8)
        kernels::repackQ8_0Rows(parts, rows, cols, width, codes, scales, threads);
      else if (weight.q4_K)
        try {
          kernels::repackQ4_KRowsAsQ4_1(parts, rows, cols, width, codes, scales, threads);
        } catch (const std::invalid_argument &error) {
          throw std::invalid_argument(key + ": " + error.what()); // which weight's blocks
        }
      else if (withMins)
        kernels::repackQ4_1Rows(parts, rows, cols, width, codes, scales, threads);
      else
        kernels::repackQ4_0Rows(parts, rows, cols, width, codes, scales, threads);
      descriptors.push_back(MemRefDescriptor::view(codes, spec.argumentShape()));
      data_.push_back(codes);
      pendingScales = scales;
      repacked.insert(key);
      continue;
    }
    const float *data = byName.at(key);
    if (!data)
      throw std::invalid_argument(key + " is given quantized, but the model stores it in " +
                                  weightFormatName(spec.format) + ": give its float32 values too");
    if (spec.layout == WeightLayout::TransposedPaddedPanels && spec.format == WeightFormat::Q8_0) {
      // The LM head from the [V, D] table: each of its rows is a column of the head, its blocks
      // run along the row, so it is quantized row by row into llama.cpp's q8_0 blocks and repacked
      // as a GGUF file's would be, a few panels at a time: the bits quantizeQ8_0 gives the
      // transposed [D, V'] matrix (padding columns included), without that float32 copy.
      auto *codes = arena->allocateArray<uint32_t>(rows * cols / kernels::kQ8_0RowsPerWord);
      auto *scales = arena->allocateArray<uint16_t>(rows / kernels::kQuantBlock * cols);
      kernels::quantizeRowsToQ8_0Lanes(data, config_.vocabSize, rows, cols, spec.panelWidth, codes, scales, threads);
      descriptors.push_back(MemRefDescriptor::view(codes, spec.argumentShape()));
      data_.push_back(codes);
      pendingScales = scales;
      continue;
    }
    const bool panels = spec.layout == WeightLayout::Panels || spec.layout == WeightLayout::TransposedPaddedPanels;
    const bool f32 = spec.format == WeightFormat::F32;
    kernels::AlignedFloats transposed; // a temporary, unless it is the argument itself
    if (spec.layout == WeightLayout::TransposedPadded || spec.layout == WeightLayout::TransposedPaddedPanels) {
      // The source is the [V, D] embedding; the parameter its [D, V'] transpose.
      float *out = nullptr;
      if (f32 && !panels) {
        out = arena->allocateArray<float>(rows * cols);
      } else {
        transposed = kernels::allocateAligned(rows * cols);
        out = transposed.get();
      }
      kernels::transposePadded(data, config_.vocabSize, rows, cols, out, threads);
      data = out;
    }
    const void *argument = data;
    if (isBlockQuantized(spec.format)) {
      // Quantized on the [K, N] matrix (blocks run along K), then the codes packed into lanes
      // (LanePacking.h) and the scales into panels. The unpacked codes are a transient byte per
      // weight, freed before the next weight.
      // q4_1's scales are [K/32, 2, N] (a scale row and a min row per block), packed like a
      // matrix of twice the blocks into [N/P, K/32, 2, P].
      const int64_t width = spec.panelWidth;
      const int64_t scaleRows = rows / kernels::kQuantBlock * (spec.format == WeightFormat::Q4_1 ? 2 : 1);
      auto scales = kernels::allocateAlignedArray<uint16_t>(scaleRows * cols);
      uint32_t *lanes = nullptr;
      if (spec.format == WeightFormat::Q8_0) {
        auto codes = kernels::allocateAlignedArray<int8_t>(rows * cols);
        kernels::quantizeQ8_0(data, rows, cols, codes.get(), scales.get(), threads);
        lanes = arena->allocateArray<uint32_t>(rows * cols / kernels::kQ8_0RowsPerWord);
        kernels::packQ8_0Lanes(codes.get(), rows, cols, width, lanes, threads);
      } else {
        auto codes = kernels::allocateAlignedArray<uint8_t>(rows * cols);
        if (spec.format == WeightFormat::Q4_1)
          kernels::quantizeQ4_1(data, rows, cols, codes.get(), scales.get(), threads);
        else
          kernels::quantizeQ4_0(data, rows, cols, codes.get(), scales.get(), threads);
        lanes = arena->allocateArray<uint32_t>(rows * cols / kernels::kQ4_0RowsPerWord);
        kernels::packQ4_0Lanes(codes.get(), rows, cols, width, lanes, threads);
      }
      argument = lanes;
      auto *packedScales = arena->allocateArray<uint16_t>(scaleRows * cols);
      kernels::packPanels(scales.get(), scaleRows, cols, width, packedScales, threads);
      pendingScales = packedScales;
    } else if (spec.format == WeightFormat::BF16) {
      // Rounded and packed into bf16 lanes in one pass, straight from the [K, N] matrix.
      auto *lanes = arena->allocateArray<uint32_t>(rows * cols / kernels::kBf16RowsPerWord);
      kernels::packBf16Lanes(data, rows, cols, spec.panelWidth, lanes, threads);
      argument = lanes;
    } else if (panels) {
      float *packed = arena->allocateArray<float>(rows * cols);
      kernels::packPanels(data, rows, cols, spec.panelWidth, packed, threads);
      argument = packed;
    }
    descriptors.push_back(MemRefDescriptor::view(argument, spec.argumentShape()));
    data_.push_back(argument);
  }
  for (const auto &[name, weight] : quantized)
    if (!repacked.count(name) && !byName.at(name))
      throw std::invalid_argument(name + " is given quantized in " + std::string(weightFormatName(weight.format)) +
                                  ", which this model does not store it in: give its float32 values");
  {
    std::lock_guard<std::mutex> lock(mutex);
    weightDescriptors = std::move(descriptors);
    weightData = std::move(data_);
    weightArena = std::move(arena);
  }
  releaseFreedMemory(); // the layout temporaries, and any weights bound before these
}

std::vector<CompiledModel::StoredArgument> CompiledModel::storedArguments() const {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<StoredArgument> stored;
  for (size_t i = 0; i < weightData.size(); ++i)
    if (!readsInPlace(parameters_[i]))
      stored.push_back({parameters_[i].name, weightData[i], argumentBytes(parameters_[i])});
  return stored;
}

std::vector<std::pair<const void *, size_t>> CompiledModel::weightBlocks() const {
  std::lock_guard<std::mutex> lock(mutex);
  return weightArena ? weightArena->blocks() : std::vector<std::pair<const void *, size_t>>{};
}

std::vector<std::string> CompiledModel::borrowedParameters() const {
  std::vector<std::string> names;
  for (const ParameterSpec &spec : parameters_)
    if (readsInPlace(spec)) names.push_back(spec.name);
  return names;
}

std::vector<float> CompiledModel::storedWeight(const std::string &name) const {
  std::lock_guard<std::mutex> lock(mutex);
  if (weightData.empty()) throw std::invalid_argument("storedWeight: setWeights() was never called");
  // The parameter laid out from `name`: its own packed copy, or (the tied embedding of a
  // block-quantized model, which has no argument of its own) the LM head made from it.
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const ParameterSpec &spec = parameters_[i];
    if (spec.isScales() || readsInPlace(spec) || (spec.derived() ? spec.source : spec.name) != name) continue;
    const int64_t rows = spec.shape[0], cols = spec.shape[1], width = spec.panelWidth;
    std::vector<float> matrix(rows * cols);
    const void *data = weightData[i];
    switch (spec.format) {
    case WeightFormat::F32:
      if (width)
        kernels::unpackPanels(static_cast<const float *>(data), rows, cols, width, matrix.data());
      else
        std::copy_n(static_cast<const float *>(data), rows * cols, matrix.data());
      break;
    case WeightFormat::BF16:
      kernels::dequantizeBf16Lanes(static_cast<const uint32_t *>(data), rows, cols, width, matrix.data());
      break;
    case WeightFormat::Q8_0:
      kernels::dequantizeQ8_0Lanes(static_cast<const uint32_t *>(data),
                                   static_cast<const uint16_t *>(weightData[i + 1]), rows, cols, width, matrix.data());
      break;
    case WeightFormat::Q4_0:
      kernels::dequantizeQ4_0Lanes(static_cast<const uint32_t *>(data),
                                   static_cast<const uint16_t *>(weightData[i + 1]), rows, cols, width, matrix.data());
      break;
    case WeightFormat::Q4_1:
      kernels::dequantizeQ4_1Lanes(static_cast<const uint32_t *>(data),
                                   static_cast<const uint16_t *>(weightData[i + 1]), rows, cols, width, matrix.data());
      break;
    }
    if (!spec.derived()) return matrix;
    // The LM head is the [V, D] embedding transposed to [D, V'] with zero columns past V.
    std::vector<float> table(config_.vocabSize * rows);
    for (int64_t v = 0; v < config_.vocabSize; ++v)
      for (int64_t d = 0; d < rows; ++d) table[v * rows + d] = matrix[d * cols + v];
    return table;
  }
  throw std::invalid_argument("storedWeight: '" + name + "' is read in place or is no parameter");
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
  const std::vector<int64_t> cacheShape =
      batch
          ? std::vector<int64_t>{batch->shape.poolBlocks, config_.kvHeads(), batch->shape.blockSize, config_.headSize()}
          : std::vector<int64_t>{config_.kvHeads(), call.cacheLen, config_.headSize()};
  for (int64_t layer = 0; layer < static_cast<int64_t>(call.keys.size()); ++layer) {
    caches.push_back(MemRefDescriptor::view(call.keys[layer], cacheShape));
    caches.push_back(MemRefDescriptor::view(call.values[layer], cacheShape));
  }
  int64_t offset = call.offset; // an index argument is passed by value
  std::vector<void *> arguments;
  std::vector<size_t> scalarArguments;
  // Compiled code only reads argument descriptors, so concurrent calls can share the weights'.
  const std::vector<EntryArgument> &entryArgs = entry == EntryPoint::Step        ? stepArguments_
                                                : entry == EntryPoint::BatchStep ? batchStepArguments_
                                                                                 : forwardArguments_;
  for (const EntryArgument &argument : entryArgs) {
    switch (argument.kind) {
    case ArgumentKind::TokenIds:
      arguments.push_back(descriptors[0].pointer());
      break;
    case ArgumentKind::Positions:
      arguments.push_back(descriptors[1].pointer());
      break;
    case ArgumentKind::LastRow:
      arguments.push_back(descriptors[2].pointer());
      break;
    case ArgumentKind::CacheOffset:
      scalarArguments.push_back(arguments.size());
      arguments.push_back(&offset);
      break;
    case ArgumentKind::Sequences:
      arguments.push_back(descriptors[3].pointer());
      break;
    case ArgumentKind::CacheSlots:
      arguments.push_back(descriptors[4].pointer());
      break;
    case ArgumentKind::BlockTables:
      arguments.push_back(descriptors[5].pointer());
      break;
    case ArgumentKind::KeyCache:
      arguments.push_back(caches[2 * argument.index].pointer());
      break;
    case ArgumentKind::ValueCache:
      arguments.push_back(caches[2 * argument.index + 1].pointer());
      break;
    case ArgumentKind::Weight:
      arguments.push_back(weightDescriptors[argument.index].pointer());
      break;
    case ArgumentKind::Logits:
      arguments.push_back(out.pointer());
      break;
    }
  }
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
  const JitFunction *function;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = batchStepCache.find(batchKey(shape));
    if (it == batchStepCache.end()) {
      auto start = std::chrono::steady_clock::now();
      std::unique_ptr<JitFunction> compiled =
          compileEntry(EntryRequest{"batch_step", shape.tokens, 0, shape.batch, &shape});
      batchStepCompileSeconds[batchKey(shape)] = secondsSince(start);
      it = batchStepCache.emplace(batchKey(shape), std::move(compiled)).first;
    }
    function = it->second.get();
  }
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
  std::lock_guard<std::mutex> lock(mutex);
  return compiler().ir(EntryRequest{"batch_step", shape.tokens, 0, shape.batch, &shape}, stage);
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
    std::lock_guard<std::mutex> lock(mutex);
    compiler().writeObject(entryFor(bucketFor(seqLen), 0), path);
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
