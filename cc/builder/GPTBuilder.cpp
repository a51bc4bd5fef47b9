// The GPT forward pass in the transformer dialect (see GPTBuilder.h).
#include "cc/builder/GPTBuilder.h"

#include "cc/builder/LayerRecipe.h"

#include "cc/dialect/TransformerDialect.h"
#include "cc/kernels/Quantization.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

namespace gpt {

// The block the runtime quantizes in is the one the IR's formats are defined with.
static_assert(kernels::kQuantBlock == mlir::transformer::PackedMatmulOp::kBlockSize);

using namespace mlir;
using namespace mlir::transformer;
using namespace gpt::recipe;

namespace {

/// The tensor type a weight argument has: its argument shape, in its format: f16 scales, and
/// i32 for the bf16, q8_0 and q4_0 lane layouts (each 32-bit word 2 bf16, 4 int8 or 8 4-bit
/// weights of one column along K; kernels/WeightFormats.h): the format shows in the shape
/// (ParameterSpec::argumentShape), K / 2, K / 4 or K / 8 rows.
RankedTensorType weightType(OpBuilder &b, const ParameterSpec &spec) {
  Type element = b.getF32Type();
  if (spec.isScales())
    element = b.getF16Type();
  else if (spec.format != WeightFormat::F32)
    element = b.getI32Type();
  return RankedTensorType::get(spec.argumentShape(), element);
}

/// Weight arguments by parameter name, with the format each is stored in (ParameterSpec::format).
struct NamedWeights {
  std::map<std::string, Value> values;
  std::map<std::string, WeightFormat> formats;

  NamedWeights() = default;
  NamedWeights(ArrayRef<ParameterSpec> specs, ValueRange arguments) {
    for (auto [spec, value] : llvm::zip_equal(specs, arguments)) {
      values[spec.name] = value;
      formats[spec.name] = spec.format;
    }
  }
  /// The weight `name`, or null where the model has none.
  Value find(const std::string &name) const {
    auto found = values.find(name);
    return found == values.end() ? Value() : found->second;
  }
  /// The matmul weight `name` (null where the model has none) with its scales and format.
  MatmulWeight matmul(const std::string &name) const {
    auto format = formats.find(name);
    return {find(name), find(name + ".scales"), format == formats.end() ? WeightFormat::F32 : format->second};
  }
};

/// Creates `name` with `argTypes -> resultTypes`: inputs are read-only for bufferization, except
/// the arguments at `updatedInPlace` (KV caches), and public entry points get a C interface for the
/// runtime.
func::FuncOp createFunction(OpBuilder &b, Location loc, StringRef name, ArrayRef<Type> argTypes,
                            ArrayRef<Type> resultTypes, bool entryPoint, ArrayRef<unsigned> updatedInPlace = {}) {
  auto fn = b.create<func::FuncOp>(loc, name, b.getFunctionType(argTypes, resultTypes));
  // Weights and inputs are read-only: bufferization must never write into the caller's arrays.
  // Set in one go: setArgAttr per argument rebuilds the whole argument attribute array each time,
  // quadratic in the argument count (12 per layer).
  auto readOnly =
      b.getDictionaryAttr(b.getNamedAttr(bufferization::BufferizationDialect::kWritableAttrName, b.getBoolAttr(false)));
  SmallVector<DictionaryAttr> argAttrs(argTypes.size(), readOnly);
  for (unsigned i : updatedInPlace) argAttrs[i] = b.getDictionaryAttr({});
  fn.setAllArgAttrs(argAttrs);
  if (entryPoint)
    fn->setAttr("llvm.emit_c_interface", b.getUnitAttr()); // called as _mlir_ciface_<name>
  else
    fn.setPrivate();
  fn.addEntryBlock();
  return fn;
}

/// The signature of a block function besides its weights: the activations it takes and
/// returns, what its attention reads (AttentionInputs, by kind), and the caches it returns.
struct BlockSignature {
  AttentionInputs::Kind kind;
  RankedTensorType activations, cache;
  SmallVector<Type> inputs; ///< AttentionInputs::operands()' types

  BlockSignature(OpBuilder &b, const GPTConfig &config, EntryPoint entry, int64_t tokens, int64_t cacheLen,
                 const BatchShape *batch, KvCacheFormat kvCache) {
    Type i64 = b.getI64Type(), element = kvCacheElementType(b, kvCache);
    auto perToken = RankedTensorType::get({tokens}, i64);
    activations = RankedTensorType::get({tokens, config.nEmbd}, b.getF32Type());
    inputs = {perToken};
    switch (entry) {
    case EntryPoint::Forward:
      kind = AttentionInputs::Kind::None;
      break;
    case EntryPoint::Step:
      kind = AttentionInputs::Kind::Cache;
      cache = RankedTensorType::get({config.kvHeads(), cacheLen, kvCacheRowWidth(kvCache, config.headSize())}, element);
      inputs.append({b.getIndexType(), cache, cache});
      break;
    case EntryPoint::BatchStep:
      kind = AttentionInputs::Kind::Paged;
      cache = RankedTensorType::get(
          {batch->poolBlocks, config.kvHeads(), batch->blockSize, kvCacheRowWidth(kvCache, config.headSize())},
          element);
      inputs.append({perToken, perToken, RankedTensorType::get({batch->batch, batch->tableWidth}, i64), cache, cache});
      break;
    }
  }

  bool cached() const { return kind != AttentionInputs::Kind::None; }
  StringRef name() const {
    return kind == AttentionInputs::Kind::Cache   ? "gpt_block_cached"
           : kind == AttentionInputs::Kind::Paged ? "gpt_block_paged"
                                                  : "gpt_block";
  }
};

/// The block functions of a model's layers. Every layer has the same shapes, but a quantization
/// mix stores some layers' weights in other formats (WeightStorage::formatOverrides: a Q4_K_M file's
/// Q6_K v and down in some layers, Q4_K in the others), and Gemma's layers attend in windows of
/// their own (GPTConfig::layerWindows). Layers with the same window share one block function.
/// Where its layers store a weight in more than one format, the block takes each format's weight
/// as an argument of its own and an index argument that says which one a call reads
/// (GraphBuilder::matmulOfChoice): the regions the layers share are compiled once, in MLIR and in
/// LLVM, instead of once per mix of formats.
struct LayerBlocks {
  struct Block {
    int64_t window = 0; ///< GPTConfig::windowOf its layers
    /// For each of a layer's weight specs (layer 0's names, in parameterSpecs order): the formats
    /// the block's layers store it in, in the order first met. A block argument each.
    std::vector<std::vector<ParameterSpec>> formatsAt;
    /// The spec positions whose weight comes in more than one format, each with an index argument.
    std::vector<size_t> chosen;
    /// For each spec position and format: the first layer that stores it so. A call passes that
    /// layer's tensor for a format its own layer does not have: an argument of the right type that
    /// the call's branches never read.
    std::vector<std::vector<int64_t>> firstLayerOf;
  };
  std::vector<Block> blocks;
  std::vector<size_t> blockOf;               ///< each layer's block
  std::vector<std::vector<size_t>> formatOf; ///< each layer's format index at each spec position

  LayerBlocks(const GPTConfig &config, const WeightStorage &storage) {
    const std::vector<ParameterSpec> specs = parameterSpecs(config, storage);
    const std::string first = layerPrefix(config, 0);
    for (int64_t i = 0; i < config.nLayer; ++i) {
      const std::string prefix = layerPrefix(config, i);
      auto asFirstLayer = [&](std::string name) { return name.empty() ? name : first + name.substr(prefix.size()); };
      std::vector<ParameterSpec> layer;
      for (const LayerParameter &p : layerParameters(config))
        for (const ParameterSpec &spec : specs)
          if (spec.name == prefix + p.name || spec.scalesOf == prefix + p.name) {
            ParameterSpec renamed = spec;
            renamed.name = asFirstLayer(spec.name);
            renamed.scalesOf = asFirstLayer(spec.scalesOf);
            renamed.source = asFirstLayer(spec.source);
            layer.push_back(std::move(renamed));
          }
      // A block for each window and list of weights (a weight stored f32 in one layer and
      // block-quantized in another has no scales there: a list of its own).
      const int64_t window = config.windowOf(i);
      auto alike = [&](const Block &block) {
        return block.window == window && std::equal(block.formatsAt.begin(), block.formatsAt.end(), layer.begin(),
                                                    layer.end(), [](const auto &formats, const ParameterSpec &spec) {
                                                      return formats.front().name == spec.name &&
                                                             formats.front().scalesOf == spec.scalesOf;
                                                    });
      };
      size_t found = 0;
      while (found < blocks.size() && !alike(blocks[found])) ++found;
      if (found == blocks.size())
        blocks.push_back({window,
                          std::vector<std::vector<ParameterSpec>>(layer.size()),
                          {},
                          std::vector<std::vector<int64_t>>(layer.size())});
      Block &block = blocks[found];
      std::vector<size_t> formats;
      for (auto [at, spec] : llvm::enumerate(layer)) {
        std::vector<ParameterSpec> &known = block.formatsAt[at];
        size_t format = 0;
        while (format < known.size() && known[format].format != spec.format) ++format;
        if (format == known.size()) {
          known.push_back(spec);
          block.firstLayerOf[at].push_back(i);
          if (format == 1 && !spec.isScales()) block.chosen.push_back(at);
        }
        formats.push_back(format);
      }
      blockOf.push_back(found);
      formatOf.push_back(std::move(formats));
    }
    for (Block &block : blocks) std::sort(block.chosen.begin(), block.chosen.end());
  }

  /// The weights of layer `layer`'s call of its block, in the block's argument order
  /// (Block::formatsAt): its own tensor in its own format, and for each other format the tensor of
  /// the first layer that has it (Block::firstLayerOf).
  SmallVector<Value> weightOperands(const GPTConfig &config, const NamedWeights &weights, int64_t layer) const {
    const Block &block = blocks[blockOf[layer]];
    const size_t prefix = layerPrefix(config, 0).size();
    SmallVector<Value> operands;
    for (auto [at, formats] : llvm::enumerate(block.formatsAt))
      for (auto [format, spec] : llvm::enumerate(formats)) {
        const int64_t from = format == formatOf[layer][at] ? layer : block.firstLayerOf[at][format];
        operands.push_back(weights.values.at(layerPrefix(config, from) + spec.name.substr(prefix)));
      }
    return operands;
  }

  /// The index arguments of layer `layer`'s call: its format at each of Block::chosen.
  SmallVector<Value> choiceOperands(OpBuilder &b, Location loc, int64_t layer) const {
    SmallVector<Value> operands;
    for (size_t at : blocks[blockOf[layer]].chosen)
      operands.push_back(b.create<arith::ConstantIndexOp>(loc, formatOf[layer][at]));
    return operands;
  }

  /// The block functions' name suffixes: none for block 0 (every layer's, without windows).
  static std::string suffix(size_t block) { return block ? "_" + std::to_string(block) : ""; }
};

/// A block function's weights by what they are, from its arguments: the index arguments from
/// `firstChoice` on, one per Block::chosen, and the weights from `firstWeight` on, each spec
/// position's formats in turn (Block::formatsAt).
LayerWeights blockWeights(const GPTConfig &config, const LayerBlocks::Block &block, func::FuncOp fn,
                          int64_t firstChoice, int64_t firstWeight) {
  // Each spec position's arguments, by format.
  std::map<std::string, std::vector<std::pair<const ParameterSpec *, Value>>> weights, scales;
  int64_t argument = firstWeight;
  std::map<std::string, Value> choices;
  for (auto [at, formats] : llvm::enumerate(block.formatsAt)) {
    for (const ParameterSpec &spec : formats) {
      auto &named = spec.isScales() ? scales[spec.scalesOf] : weights[spec.name];
      named.push_back({&spec, fn.getArgument(argument++)});
    }
    if (auto chosen = llvm::find(block.chosen, at); chosen != block.chosen.end())
      choices[formats.front().name] = fn.getArgument(firstChoice + (chosen - block.chosen.begin()));
  }
  auto matmulWeight = [&](const std::string &name, const ParameterSpec &spec, Value weight) {
    MatmulWeight w{weight, Value(), spec.format};
    if (auto found = scales.find(name); found != scales.end())
      for (auto [scalesSpec, value] : found->second)
        if (scalesSpec->format == spec.format) w.scales = value;
    return w;
  };
  LayerWeights w;
  for (const LayerParameter &p : layerParameters(config)) {
    auto found = weights.find(layerPrefix(config, 0) + p.name);
    if (found == weights.end()) continue;
    auto [spec, value] = found->second.front();
    MatmulWeight weight = matmulWeight(found->first, *spec, value);
    if (found->second.size() > 1) {
      for (auto [other, otherValue] : found->second)
        weight.formats.push_back(matmulWeight(found->first, *other, otherValue));
      weight.choice = choices.at(found->first);
    }
    w.weights[p.weight] = weight;
  }
  return w;
}

/// One transformer layer as a private function (transformerLayer): `@gpt_block(x: [T, D],
/// positions: [T], layer weights) -> [T, D]`; with a cache `@gpt_block_cached(x, positions,
/// offset: index, k, v: [H, cacheLen, d], weights) -> (x, k, v)`; with paged pools
/// `@gpt_block_paged(x, positions, sequences, slots: [T], tables: [B, M], k, v: [N, H, S, d],
/// weights) -> (x, k, v)`, the caches updated in place. The weights are `block`'s: a format index
/// for each weight its layers store in several formats, then every weight in each of its formats
/// (LayerBlocks). Every layer has the same shapes, so the model calls one compiled copy n_layer
/// times instead of unrolling n_layer copies: compile time does not grow with depth.
func::FuncOp buildBlock(OpBuilder &b, Location loc, const GPTConfig &config, const BlockSignature &signature,
                        const LayerBlocks::Block &block, StringRef suffix) {
  SmallVector<Type> argTypes = {signature.activations};
  argTypes.append(signature.inputs);
  SmallVector<Type> resultTypes = {signature.activations};
  SmallVector<unsigned> caches; // updated in place: the last two inputs
  if (signature.cached()) {
    resultTypes.append({signature.cache, signature.cache});
    caches = {unsigned(argTypes.size() - 2), unsigned(argTypes.size() - 1)};
  }
  const int64_t firstChoice = argTypes.size();
  argTypes.append(block.chosen.size(), b.getIndexType());
  const int64_t firstWeight = argTypes.size();
  for (const std::vector<ParameterSpec> &formats : block.formatsAt)
    for (const ParameterSpec &spec : formats) argTypes.push_back(weightType(b, spec));
  func::FuncOp fn = createFunction(b, loc, (signature.name() + suffix).str(), argTypes, resultTypes,
                                   /*entryPoint=*/false, caches);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&fn.front());
  const int64_t rows = signature.activations.getDimSize(0);
  GraphBuilder g(b, loc, config, LayerAttention::of(config, block.window), rows);
  AttentionInputs in =
      AttentionInputs::fromArguments(signature.kind, rows, fn.getArguments().slice(1, signature.inputs.size()));
  Value x = transformerLayer(g, fn.getArgument(0), blockWeights(config, block, fn, firstChoice, firstWeight), in);
  SmallVector<Value> results = {g.castTo(x, signature.activations)};
  if (signature.cached()) results.append({g.castTo(in.key, signature.cache), g.castTo(in.value, signature.cache)});
  b.create<func::ReturnOp>(loc, results);
  return fn;
}

/// The arguments of `entry` as function arguments, typed: every one but the Logits result.
struct EntryFunctionArguments {
  SmallVector<Type> types;
  SmallVector<EntryArgument> arguments;
};

EntryFunctionArguments entryFunctionArguments(OpBuilder &b, EntryPoint entry, const GPTConfig &config,
                                              ArrayRef<ParameterSpec> specs, int64_t seqLen, int64_t cacheLen,
                                              KvCacheFormat kvCache, const BatchShape *batch = nullptr,
                                              int64_t stepLogitsRows = 1) {
  Type i64 = b.getI64Type(), element = kvCacheElementType(b, kvCache);
  auto cacheType =
      batch ? RankedTensorType::get(
                  {batch->poolBlocks, config.kvHeads(), batch->blockSize, kvCacheRowWidth(kvCache, config.headSize())},
                  element)
            : RankedTensorType::get({config.kvHeads(), cacheLen, kvCacheRowWidth(kvCache, config.headSize())}, element);
  EntryFunctionArguments result;
  for (const EntryArgument &argument : entryArguments(entry, config, specs.size())) {
    Type type;
    switch (argument.kind) {
    case ArgumentKind::TokenIds:
    case ArgumentKind::Positions:
    case ArgumentKind::Sequences:
    case ArgumentKind::CacheSlots:
      type = RankedTensorType::get({seqLen}, i64);
      break;
    case ArgumentKind::LastRow:
      type = RankedTensorType::get({batch ? batch->batch : stepLogitsRows}, i64);
      break;
    case ArgumentKind::BlockTables:
      type = RankedTensorType::get({batch->batch, batch->tableWidth}, i64);
      break;
    case ArgumentKind::CacheOffset:
      type = b.getIndexType();
      break;
    case ArgumentKind::KeyCache:
    case ArgumentKind::ValueCache:
      type = cacheType;
      break;
    case ArgumentKind::Weight:
      type = weightType(b, specs[argument.index]);
      break;
    case ArgumentKind::Logits:
      continue; // the function's result
    }
    result.types.push_back(type);
    result.arguments.push_back(argument);
  }
  return result;
}

/// The entry function's argument values by kind (EntrySlots), and the weights by name.
struct EntryValues : EntrySlots<Value> {
  NamedWeights byName;

  /// The model-level weights; the token table is absent from a block-quantized model, whose
  /// lookup reads a packed copy (its own, or the tied LM head's).
  ModelWeights modelWeights(const GPTConfig &config) const {
    const ModelParameterNames names = modelParameterNames(config);
    ModelWeights w{byName.find(names.tokenEmbedding),
                   Value(),
                   byName.values.at(names.finalNormWeight),
                   byName.find(names.finalNormBias),
                   byName.matmul(kHeadTable),
                   byName.matmul(names.tokenEmbedding + "_t")};
    if (!config.rope) w.positionEmbedding = byName.values.at(names.positionEmbedding);
    return w;
  }

  /// Layer `layer`'s AttentionInputs of `kind`.
  AttentionInputs attentionInputs(AttentionInputs::Kind kind, int64_t tokens, int64_t layer) const {
    AttentionInputs in{kind, tokens, positions, offset, sequences, slots, tables};
    if (kind != AttentionInputs::Kind::None) std::tie(in.key, in.value) = std::make_pair(keys[layer], values[layer]);
    return in;
  }

  EntryValues(func::FuncOp fn, ArrayRef<EntryArgument> arguments, ArrayRef<ParameterSpec> specs) {
    bind(arguments, fn.getArguments());
    byName = NamedWeights(specs, weights);
  }
};

/// What one entry point's module is built for.
struct EntryShape {
  EntryPoint entry;
  int64_t tokens;         ///< T, the new tokens of a call
  int64_t cacheLen = 0;   ///< the step's cache length
  int64_t logitsRows = 0; ///< the rows of logits returned
  const BatchShape *batch = nullptr;
};

/// The module of one entry point: a block function per layer variant, and the public entry,
/// which embeds the tokens (embed), calls the layers' blocks in order, and computes the logits
/// of the rows it returns (head): every row for forward; with caches, the rows `last` names, and
/// every layer's updated key and value caches after the logits.
OwningOpRef<ModuleOp> buildEntryModule(MLIRContext &ctx, const GPTConfig &config, const WeightStorage &storage,
                                       const EntryShape &shape) {
  ctx.loadDialect<TransformerDialect, arith::ArithDialect, func::FuncDialect, bufferization::BufferizationDialect,
                  scf::SCFDialect, tensor::TensorDialect>();
  const char *name = shape.entry == EntryPoint::Forward ? "forward"
                     : shape.entry == EntryPoint::Step  ? "step"
                                                        : "batch_step";
  OpBuilder b(&ctx);
  Location loc = NameLoc::get(b.getStringAttr(std::string("gpt.") + name));
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());

  std::vector<ParameterSpec> specs = parameterSpecs(config, storage);
  const LayerBlocks layers(config, storage);
  const BlockSignature signature(b, config, shape.entry, shape.tokens, shape.cacheLen, shape.batch, storage.kvCache);
  SmallVector<func::FuncOp> blocks;
  for (auto [index, block] : llvm::enumerate(layers.blocks))
    blocks.push_back(buildBlock(b, loc, config, signature, block, LayerBlocks::suffix(index)));
  EntryFunctionArguments arguments = entryFunctionArguments(b, shape.entry, config, specs, shape.tokens, shape.cacheLen,
                                                            storage.kvCache, shape.batch, shape.logitsRows);
  auto logitsType = RankedTensorType::get({shape.logitsRows, config.paddedVocabSize(storage.tiles)}, b.getF32Type());
  SmallVector<Type> resultTypes = {logitsType};
  if (signature.cached()) resultTypes.append(2 * config.nLayer, signature.cache);
  SmallVector<unsigned> caches; // updated in place
  for (auto [i, argument] : llvm::enumerate(arguments.arguments))
    if (argument.kind == ArgumentKind::KeyCache || argument.kind == ArgumentKind::ValueCache) caches.push_back(i);
  func::FuncOp fn = createFunction(b, loc, name, arguments.types, resultTypes, /*entryPoint=*/true, caches);
  b.setInsertionPointToStart(&fn.front());
  EntryValues in(fn, arguments.arguments, specs);

  GraphBuilder g(b, loc, config);
  const ModelWeights weights = in.modelWeights(config);
  Value x = g.castTo(g.embed(weights, in.ids, in.positions), signature.activations);
  SmallVector<Value> updatedCaches;
  for (int64_t layer = 0; layer < config.nLayer; ++layer) {
    SmallVector<Value> operands = {x};
    operands.append(in.attentionInputs(signature.kind, shape.tokens, layer).operands());
    operands.append(layers.choiceOperands(b, loc, layer));
    operands.append(layers.weightOperands(config, in.byName, layer));
    auto call = b.create<func::CallOp>(loc, blocks[layers.blockOf[layer]], operands);
    x = call.getResult(0);
    updatedCaches.append(call.getResults().begin() + 1, call.getResults().end());
  }
  // With caches, only the rows `last` names go through the final norm and the LM head: prefill
  // and decode need the last real token's; speculative verification every drafted position's;
  // the batch step each sequence's last new token's.
  SmallVector<Value> results = {g.castTo(g.head(weights, x, in.last), logitsType)};
  results.append(updatedCaches);
  b.create<func::ReturnOp>(loc, results);
  return module;
}

} // namespace

OwningOpRef<ModuleOp> buildForward(MLIRContext &ctx, const GPTConfig &config, int64_t seqLen,
                                   const WeightStorage &storage) {
  return buildEntryModule(ctx, config, storage, {EntryPoint::Forward, seqLen, 0, seqLen});
}

OwningOpRef<ModuleOp> buildStep(MLIRContext &ctx, const GPTConfig &config, int64_t seqLen, int64_t cacheLen,
                                const WeightStorage &storage, int64_t logitsRows) {
  if (logitsRows < 1 || logitsRows > seqLen)
    throw std::invalid_argument("a step of " + std::to_string(seqLen) + " tokens returns between 1 and " +
                                std::to_string(seqLen) + " rows of logits, not " + std::to_string(logitsRows));
  return buildEntryModule(ctx, config, storage, {EntryPoint::Step, seqLen, cacheLen, logitsRows});
}

OwningOpRef<ModuleOp> buildBatchStep(MLIRContext &ctx, const GPTConfig &config, const BatchShape &shape,
                                     const WeightStorage &storage) {
  return buildEntryModule(ctx, config, storage, {EntryPoint::BatchStep, shape.tokens, 0, shape.batch, &shape});
}

} // namespace gpt
