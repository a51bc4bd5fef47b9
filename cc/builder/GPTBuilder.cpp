// The GPT forward pass in the transformer dialect (see GPTBuilder.h).
#include "cc/builder/GPTBuilder.h"

#include "cc/builder/LayerRecipe.h"

#include "cc/dialect/TransformerDialect.h"
#include "cc/kernels/Quantization.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
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

/// Layer `layer`'s weights from the weights by name (with their ".scales").
LayerWeights layerWeights(const GPTConfig &config, const NamedWeights &weights, int64_t layer) {
  LayerWeights w;
  for (const LayerParameter &p : layerParameters(config))
    w.weights[p.weight] = weights.matmul(layerPrefix(config, layer) + p.name);
  return w;
}

/// Layer `layer`'s weights in the order of the block's weight arguments (layer 0's specs).
SmallVector<Value> layerOperands(const GPTConfig &config, const NamedWeights &weights,
                                 ArrayRef<ParameterSpec> layerSpecs, int64_t layer) {
  SmallVector<Value> operands;
  const size_t prefix = layerPrefix(config, 0).size();
  for (const ParameterSpec &spec : layerSpecs)
    operands.push_back(weights.values.at(layerPrefix(config, layer) + spec.name.substr(prefix)));
  return operands;
}

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

/// One transformer layer as a private function (transformerLayer): `@gpt_block(x: [T, D],
/// positions: [T], layer weights) -> [T, D]`; with a cache `@gpt_block_cached(x, positions,
/// offset: index, k, v: [H, cacheLen, d], weights) -> (x, k, v)`; with paged pools
/// `@gpt_block_paged(x, positions, sequences, slots: [T], tables: [B, M], k, v: [N, H, S, d],
/// weights) -> (x, k, v)`, the caches updated in place. Every layer has the same shapes, so the
/// model calls one compiled copy n_layer times instead of unrolling n_layer copies: compile time
/// does not grow with depth.
func::FuncOp buildBlock(OpBuilder &b, Location loc, const GPTConfig &config, const BlockSignature &signature,
                        ArrayRef<ParameterSpec> layerSpecs, int64_t window, StringRef suffix) {
  SmallVector<Type> argTypes = {signature.activations};
  argTypes.append(signature.inputs);
  SmallVector<Type> resultTypes = {signature.activations};
  SmallVector<unsigned> caches; // updated in place: the last two inputs
  if (signature.cached()) {
    resultTypes.append({signature.cache, signature.cache});
    caches = {unsigned(argTypes.size() - 2), unsigned(argTypes.size() - 1)};
  }
  const int64_t firstWeight = argTypes.size();
  for (const ParameterSpec &spec : layerSpecs) argTypes.push_back(weightType(b, spec));
  func::FuncOp fn = createFunction(b, loc, (signature.name() + suffix).str(), argTypes, resultTypes,
                                   /*entryPoint=*/false, caches);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&fn.front());
  GraphBuilder g(b, loc, config, LayerAttention::of(config, window));
  const NamedWeights byName(layerSpecs, fn.getArguments().drop_front(firstWeight));
  AttentionInputs in = AttentionInputs::fromArguments(signature.kind, signature.activations.getDimSize(0),
                                                      fn.getArguments().slice(1, signature.inputs.size()));
  Value x = transformerLayer(g, fn.getArgument(0), layerWeights(config, byName, 0), in);
  SmallVector<Value> results = {g.castTo(x, signature.activations)};
  if (signature.cached()) results.append({g.castTo(in.key, signature.cache), g.castTo(in.value, signature.cache)});
  b.create<func::ReturnOp>(loc, results);
  return fn;
}

/// The layers' weight specs, named as layer 0's (the block function's arguments): every layer has
/// the same shapes and layouts, but a quantization mix stores some layers' weights in other
/// formats (WeightStorage::formatOverrides), and Gemma's layers attend in windows of their own
/// (GPTConfig::layerWindows). Layers alike share one block function; each distinct list of
/// formats and window is a variant with a block of its own.
struct LayerVariants {
  std::vector<std::vector<ParameterSpec>> variants; ///< variant 0 is layer 0's
  std::vector<int64_t> windows;                     ///< each variant's window (GPTConfig::windowOf)
  std::vector<size_t> ofLayer;                      ///< each layer's variant

  LayerVariants(const GPTConfig &config, const WeightStorage &storage) {
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
      const int64_t window = config.windowOf(i);
      auto alike = [&](size_t v) {
        return windows[v] == window &&
               std::equal(variants[v].begin(), variants[v].end(), layer.begin(), layer.end(),
                          [](const ParameterSpec &a, const ParameterSpec &b) { return a.format == b.format; });
      };
      size_t found = 0;
      while (found < variants.size() && !alike(found)) ++found;
      ofLayer.push_back(found);
      if (found == variants.size()) {
        variants.push_back(std::move(layer));
        windows.push_back(window);
      }
    }
  }

  /// The block functions' name suffixes: none for variant 0 (every layer's, without a mix).
  static std::string suffix(size_t variant) { return variant ? "_" + std::to_string(variant) : ""; }
};

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
                  tensor::TensorDialect>();
  const char *name = shape.entry == EntryPoint::Forward ? "forward"
                     : shape.entry == EntryPoint::Step  ? "step"
                                                        : "batch_step";
  OpBuilder b(&ctx);
  Location loc = NameLoc::get(b.getStringAttr(std::string("gpt.") + name));
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());

  std::vector<ParameterSpec> specs = parameterSpecs(config, storage);
  const LayerVariants layers(config, storage);
  const BlockSignature signature(b, config, shape.entry, shape.tokens, shape.cacheLen, shape.batch, storage.kvCache);
  SmallVector<func::FuncOp> blocks;
  for (auto [variant, layerSpecs] : llvm::enumerate(layers.variants))
    blocks.push_back(
        buildBlock(b, loc, config, signature, layerSpecs, layers.windows[variant], LayerVariants::suffix(variant)));
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
    const size_t variant = layers.ofLayer[layer];
    SmallVector<Value> operands = {x};
    operands.append(in.attentionInputs(signature.kind, shape.tokens, layer).operands());
    operands.append(layerOperands(config, in.byName, layers.variants[variant], layer));
    auto call = b.create<func::CallOp>(loc, blocks[variant], operands);
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
