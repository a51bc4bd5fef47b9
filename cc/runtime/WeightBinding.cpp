// Binding a model's weights: laying out, quantizing and repacking what the user or a GGUF file
// gives into the compiled model's own storage, and reading it back (see CompiledModel.h).
#include "cc/runtime/CompiledModel.h"

#include "cc/kernels/BlockTranscoding.h"
#include "cc/kernels/GgufRepacking.h"
#include "cc/kernels/PanelPacking.h"
#include "cc/kernels/ParallelFor.h"
#include "cc/kernels/WeightFormats.h"
#include "cc/runtime/CompilerIdentity.h"
#include "cc/runtime/MemRefDescriptor.h"
#include "cc/runtime/PackedWeights.h"
#include "cc/runtime/ReleaseMemory.h"
#include "cc/runtime/WeightArena.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace gpt {

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

/// The arguments one weight is laid out into: its own, and its scales' when its format is
/// block-quantized (bound by the spec after it).
struct LaidOut {
  const void *argument;
  void *scales = nullptr;
};

/// A given weight's parts as rows of their blocks, each part's bytes checked to be whole rows of
/// `rows` weights of its type, and all of them `columns` rows.
std::vector<kernels::BlockRows> blockParts(const std::string &key, const CompiledModel::QuantizedWeight &weight,
                                           int64_t rows, int64_t columns) {
  const std::string format = weightFormatName(weight.format);
  // Each part in its own blocks (a q6_K v beside q4_K q and k): rows of its type's bytes.
  std::vector<kernels::BlockRows> parts;
  int64_t rowsInParts = 0;
  for (const CompiledModel::QuantizedPart &part : weight.parts) {
    const std::string type = part.type.empty() ? format : part.type;
    const kernels::GgufBlockType &block = kernels::ggufBlockType(type);
    if (rows % block.values != 0)
      throw std::invalid_argument(key + ": " + type + " blocks of " + std::to_string(block.values) +
                                  " weights do not divide its rows of " + std::to_string(rows));
    const int64_t rowBytes = rows / block.values * block.bytes;
    if (part.bytes < 0 || part.bytes % rowBytes != 0)
      throw std::invalid_argument(key + ": a part of " + std::to_string(part.bytes) + " bytes of " + type +
                                  " blocks is not whole rows of " + std::to_string(rowBytes) + " bytes");
    const int64_t partRows = part.bytes / rowBytes;
    parts.push_back({part.blocks, partRows, part.type, part.permutedHeads});
    rowsInParts += partRows;
  }
  if (rowsInParts != columns)
    throw std::invalid_argument(key + ": the blocks hold " + std::to_string(rowsInParts) + " rows, expected " +
                                std::to_string(columns));
  return parts;
}

/// A weight given as llama.cpp quantized it, repacked into its format's lanes and scale panels:
/// rows of the [out, in] tensor are the weight's columns (`columns` of them, before padding).
LaidOut repackGiven(const std::string &key, const CompiledModel::QuantizedWeight &weight, const ParameterSpec &spec,
                    int64_t columns, WeightArena &arena, int64_t threads) {
  const WeightFormatTraits &format = weightFormatTraits(weight.format);
  const int64_t rows = spec.shape[0], cols = spec.shape[1];
  const std::vector<kernels::BlockRows> parts = blockParts(key, weight, rows, columns);
  auto *codes = arena.allocateArray<uint32_t>(format.laneWords(rows * cols));
  auto *scales = arena.allocateArray<uint16_t>(rows / format.blockValues * format.scaleRowsPerBlock() * cols);
  try {
    format.repack(parts, rows, cols, spec.panelWidth, codes, scales, threads);
  } catch (const std::invalid_argument &error) {
    throw std::invalid_argument(key + ": " + error.what()); // which weight's blocks
  }
  return {codes, scales};
}

/// A block-quantized weight from its [K, N] f32 matrix: quantized along K, the codes packed into
/// lanes (WeightFormats.h) and the scales into panels. The unpacked codes are a transient byte per
/// weight, freed before the next weight. The scales are [K / blockValues * scaleRows, N] (each
/// block's scale rows: its scale, and a min beside it, or a K-quant's sub-block scales and d),
/// packed like any matrix into [N/P, K / blockValues * scaleRows, P].
LaidOut quantizeAndPack(const WeightFormatTraits &format, const float *data, int64_t rows, int64_t cols, int64_t width,
                        WeightArena &arena, int64_t threads) {
  const int64_t scaleRows = rows / format.blockValues * format.scaleRowsPerBlock();
  auto scales = kernels::allocateAlignedArray<uint16_t>(scaleRows * cols);
  auto codes = kernels::allocateAlignedArray<uint8_t>(rows * cols);
  format.quantize(data, rows, cols, codes.get(), scales.get(), threads);
  auto *lanes = arena.allocateArray<uint32_t>(format.laneWords(rows * cols));
  format.pack(codes.get(), rows, cols, width, lanes, threads);
  auto *packedScales = arena.allocateArray<uint16_t>(scaleRows * cols);
  kernels::packPanels(scales.get(), scaleRows, cols, width, packedScales, threads);
  return {lanes, packedScales};
}

/// A weight laid out from its f32 values (`vocab`: the rows of a [V, D] table a transposed
/// layout reads).
LaidOut layOutFloats(const ParameterSpec &spec, const float *data, int64_t vocab, WeightArena &arena, int64_t threads) {
  const int64_t rows = spec.shape[0], cols = spec.shape.size() > 1 ? spec.shape[1] : 1, width = spec.panelWidth;
  const WeightFormatTraits &format = weightFormatTraits(spec.format);
  const bool transposed =
      spec.layout == WeightLayout::TransposedPadded || spec.layout == WeightLayout::TransposedPaddedPanels;
  if (spec.layout == WeightLayout::TransposedPaddedPanels && spec.format == WeightFormat::Q8_0) {
    // The LM head from the [V, D] table: each of its rows is a column of the head, its blocks
    // run along the row, so it is quantized row by row into llama.cpp's q8_0 blocks and repacked
    // as a GGUF file's would be, a few panels at a time: the bits the row's quantize and pack give
    // the transposed [D, V'] matrix (padding columns included), without that float32 copy.
    auto *codes = arena.allocateArray<uint32_t>(format.laneWords(rows * cols));
    auto *scales = arena.allocateArray<uint16_t>(rows / format.blockValues * cols);
    kernels::quantizeRowsToQ8_0Lanes(data, vocab, rows, cols, width, codes, scales, threads);
    return {codes, scales};
  }
  const bool panels = spec.layout == WeightLayout::Panels || spec.layout == WeightLayout::TransposedPaddedPanels;
  kernels::AlignedFloats temporary; // the transpose, unless it is the argument itself
  if (transposed) {
    // The source is the [V, D] embedding; the parameter its [D, V'] transpose.
    float *out = nullptr;
    if (spec.format == WeightFormat::F32 && !panels) {
      out = arena.allocateArray<float>(rows * cols);
    } else {
      temporary = kernels::allocateAligned(rows * cols);
      out = temporary.get();
    }
    kernels::transposePadded(data, vocab, rows, cols, out, threads);
    data = out;
  }
  if (format.blockQuantized()) return quantizeAndPack(format, data, rows, cols, width, arena, threads);
  if (format.packFloats) {
    // Rounded and packed into lanes in one pass, straight from the [K, N] matrix.
    auto *lanes = arena.allocateArray<uint32_t>(format.laneWords(rows * cols));
    format.packFloats(data, rows, cols, width, lanes, threads);
    return {lanes};
  }
  if (!panels) return {data};
  float *packed = arena.allocateArray<float>(rows * cols);
  kernels::packPanels(data, rows, cols, width, packed, threads);
  return {packed};
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
      throw std::invalid_argument("'" + name + "' is no weight that can be given quantized (" + blockFormatNames() +
                                  ")");
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
    LaidOut laidOut{nullptr};
    if (auto given = quantized.find(key);
        given != quantized.end() && spec.panelWidth && given->second.format == spec.format) {
      const int64_t columns = spec.derived() ? config_.vocabSize : spec.shape[1];
      laidOut = repackGiven(key, given->second, spec, columns, *arena, threads);
      repacked.insert(key);
    } else {
      const float *data = byName.at(key);
      if (!data)
        throw std::invalid_argument(key + " is given quantized, but the model stores it in " +
                                    weightFormatName(spec.format) + ": give its float32 values too");
      laidOut = layOutFloats(spec, data, config_.vocabSize, *arena, threads);
    }
    descriptors.push_back(MemRefDescriptor::view(laidOut.argument, spec.argumentShape()));
    data_.push_back(laidOut.argument);
    pendingScales = laidOut.scales;
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

std::string CompiledModel::packedWeightsKey(const std::string &sourceKey) const {
  const std::string &compiler = compilerIdentity();
  if (compiler.empty()) return "";
  std::string key = "source " + sourceKey + "\ncompiler " + compiler + "\n";
  for (const ParameterSpec &spec : parameters_) {
    key += spec.name + " " + weightFormatName(spec.format) + " layout " +
           std::to_string(static_cast<int>(spec.layout)) + " panel " + std::to_string(spec.panelWidth) +
           (readsInPlace(spec) ? " in-place" : "") + " shape";
    for (int64_t extent : spec.argumentShape()) key += " " + std::to_string(extent);
    key += "\n";
  }
  return key;
}

bool CompiledModel::bindPackedWeights(const std::vector<const float *> &weights, const std::string &path,
                                      const std::string &sourceKey) {
  if (weights.size() != supplied_.size())
    throw std::invalid_argument("expected " + std::to_string(supplied_.size()) + " weights, got " +
                                std::to_string(weights.size()));
  const std::string key = packedWeightsKey(sourceKey);
  if (key.empty()) return false;
  std::map<std::string, const float *> byName;
  for (size_t i = 0; i < supplied_.size(); ++i) byName[supplied_[i].name] = weights[i];
  auto arena = std::make_unique<WeightArena>(laidOutBytes(parameters_));
  std::vector<MemRefDescriptor> descriptors;
  std::vector<const void *> data_;
  std::vector<PackedRegion> regions;
  for (const ParameterSpec &spec : parameters_) {
    void *address = nullptr;
    if (readsInPlace(spec)) {
      address = const_cast<float *>(byName.at(spec.name));
      if (!address) throw std::invalid_argument(spec.name + " is read in place: give its float32 values");
    } else {
      const size_t bytes = argumentBytes(spec);
      address = arena->allocate(bytes);
      regions.push_back({spec.name, address, bytes});
    }
    descriptors.push_back(MemRefDescriptor::view(address, spec.argumentShape()));
    data_.push_back(address);
  }
  if (!readPackedWeights(path, key, regions, kernels::loadThreads(options_.threads))) return false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    weightDescriptors = std::move(descriptors);
    weightData = std::move(data_);
    weightArena = std::move(arena);
  }
  releaseFreedMemory(); // any weights bound before these
  return true;
}

void CompiledModel::writePackedWeights(const std::string &path, const std::string &sourceKey) const {
  const std::string key = packedWeightsKey(sourceKey);
  if (key.empty()) throw std::logic_error("writePackedWeights: this build of the compiler has no identity");
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (weightData.empty()) throw std::logic_error("writePackedWeights: setWeights() was never called");
  }
  std::vector<PackedRegion> regions;
  for (const StoredArgument &argument : storedArguments())
    regions.push_back({argument.name, const_cast<void *>(argument.address), argument.bytes});
  gpt::writePackedWeights(path, key, regions);
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
    const WeightFormatTraits &format = weightFormatTraits(spec.format);
    if (format.dequantize) // lanes, and the block formats' scales (the next argument)
      format.dequantize(static_cast<const uint32_t *>(data),
                        format.blockQuantized() ? static_cast<const uint16_t *>(weightData[i + 1]) : nullptr, rows,
                        cols, width, matrix.data());
    else if (width)
      kernels::unpackPanels(static_cast<const float *>(data), rows, cols, width, matrix.data());
    else
      std::copy_n(static_cast<const float *>(data), rows * cols, matrix.data());
    if (!spec.derived()) return matrix;
    // The LM head is the [V, D] embedding transposed to [D, V'] with zero columns past V.
    std::vector<float> table(config_.vocabSize * rows);
    for (int64_t v = 0; v < config_.vocabSize; ++v)
      for (int64_t d = 0; d < rows; ++d) table[v * rows + d] = matrix[d * cols + v];
    return table;
  }
  throw std::invalid_argument("storedWeight: '" + name + "' is read in place or is no parameter");
}

} // namespace gpt
