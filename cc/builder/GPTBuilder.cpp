// The GPT forward pass in the transformer dialect (see GPTBuilder.h).
#include "cc/builder/GPTBuilder.h"

#include "cc/builder/MaskExpression.h"

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

namespace gpt {

// The block the runtime quantizes in is the one the IR's formats are defined with.
static_assert(kernels::kQuantBlock == mlir::transformer::PackedMatmulOp::kBlockSize);

using namespace mlir;
using namespace mlir::transformer;

namespace {

using W = LayerWeight;

/// The element type of a KV cache of `format`: what its tensors hold, and what the runtime's
/// arrays hold (bf16 as uint16 bits).
Type kvCacheElementType(OpBuilder &b, KvCacheFormat format) {
  switch (format) {
  case KvCacheFormat::BF16:
    return b.getBF16Type();
  case KvCacheFormat::F16:
    return b.getF16Type();
  case KvCacheFormat::F32:
    break;
  }
  return b.getF32Type();
}

/// An unranked tensor of `like`'s element type: a cache write's result before shape inference.
Type unrankedLike(Value like) { return UnrankedTensorType::get(cast<TensorType>(like.getType()).getElementType()); }

/// A matmul weight and, for a block-quantized one, its scales (null otherwise).
struct MatmulWeight {
  Value weight, scales;
};

/// One layer's weights by what they are; null for the ones the architecture does not have.
struct LayerWeights {
  std::map<LayerWeight, MatmulWeight> weights;
  Value operator[](LayerWeight weight) const {
    auto it = weights.find(weight);
    return it == weights.end() ? Value() : it->second.weight;
  }
  MatmulWeight matmul(LayerWeight weight) const { return weights.at(weight); }
};

/// Emits transformer ops with unranked results; shape inference gives them their types.
class GraphBuilder {
public:
  GraphBuilder(OpBuilder &b, Location loc, const GPTConfig &config) : b(b), loc(loc), config(config) {}

  Type unranked() { return UnrankedTensorType::get(b.getF32Type()); }

  Value add(Value x, Value y) { return b.create<AddOp>(loc, unranked(), x, y); }
  /// x times a weight, plain [K, N] or packed in panels [N/P, K, P] (with its scales).
  Value matmul(Value x, MatmulWeight w) {
    if (cast<RankedTensorType>(w.weight.getType()).getRank() == 3)
      return b.create<PackedMatmulOp>(loc, unranked(), x, w.weight, w.scales);
    return b.create<MatmulOp>(loc, unranked(), x, w.weight);
  }
  /// x w + bias, or x w where the architecture has no bias (null).
  Value linear(Value x, MatmulWeight w, Value bias) {
    Value product = matmul(x, w);
    return bias ? add(product, bias) : product;
  }
  /// The architecture's norm: LayerNorm (with a bias) or RMSNorm (the bias is null).
  Value norm(Value x, Value w, Value bias) {
    FloatAttr eps = b.getF32FloatAttr(config.layerNormEps);
    if (config.norm == NormKind::Rms) return b.create<RmsNormOp>(loc, unranked(), x, w, eps);
    return b.create<LayerNormOp>(loc, unranked(), x, w, bias, eps);
  }
  /// `heads` heads of the fused projection's columns [offset, offset + heads * head_size).
  Value heads(Value qkv, int64_t offset, int64_t heads) {
    Value slice = b.create<SliceOp>(loc, unranked(), qkv, b.getI64IntegerAttr(offset),
                                    b.getI64IntegerAttr(heads * config.headSize()));
    return b.create<SplitHeadsOp>(loc, unranked(), slice, b.getI64IntegerAttr(heads));
  }
  /// Rotary embedding of q or k, as the config says (base, layout, Llama 3 scaling).
  Value rope(Value x, Value positions) {
    DenseF32ArrayAttr scaling;
    if (config.ropeScaling.factor != 0.0f) {
      const RopeScaling &s = config.ropeScaling;
      scaling = b.getDenseF32ArrayAttr(
          {s.factor, s.lowFreqFactor, s.highFreqFactor, static_cast<float>(s.originalMaxPositions)});
    }
    UnitAttr interleaved = config.ropeLayout == RopeLayout::Interleaved ? b.getUnitAttr() : nullptr;
    return b.create<RopeOp>(loc, unranked(), x, positions, b.getF32FloatAttr(config.ropeBase), interleaved, scaling);
  }

  /// Pre-LayerNorm causal self-attention: the residual branch, not yet added to x. With a KV
  /// cache (`cache` set), the new keys and values are written at `offset` and the queries attend
  /// over the cache; `cache->key`/`value` are replaced by the updated caches.
  struct Cache {
    Value key, value, offset;
  };
  /// A layer's paged KV pools and how the batch's tokens reach them (EntryPoints.h).
  struct PagedCache {
    Value key, value, tables, sequences, slots;
  };
  Value attention(Value x, const LayerWeights &w, Value positions, Cache *cache = nullptr,
                  PagedCache *paged = nullptr) {
    Value qkv = linear(norm(x, w[W::AttnNormWeight], w[W::AttnNormBias]), w.matmul(W::QkvWeight), w[W::QkvBias]);
    // q, then k and v of n_kv_head heads each (grouped-query attention: fewer than q's).
    const int64_t d = config.nEmbd, kv = config.kvSize();
    Value q = heads(qkv, 0, config.nHead), k = heads(qkv, d, config.kvHeads()),
          v = heads(qkv, d + kv, config.kvHeads());
    if (config.rope) {
      q = rope(q, positions);
      k = rope(k, positions);
    }
    float scale = 1.0f / std::sqrt(static_cast<float>(config.nEmbd / config.nHead));
    if (paged) {
      // The pools keep their element type (the KV cache's format): the write rounds to it.
      paged->key = b.create<PagedCacheWriteOp>(loc, unrankedLike(paged->key), k, paged->key, paged->slots);
      paged->value = b.create<PagedCacheWriteOp>(loc, unrankedLike(paged->value), v, paged->value, paged->slots);
      IntegerAttr window = config.attentionWindow > 0 ? b.getI64IntegerAttr(config.attentionWindow) : nullptr;
      Value a = b.create<PagedAttentionOp>(loc, unranked(), q, paged->key, paged->value, paged->tables,
                                           paged->sequences, positions, b.getF32FloatAttr(scale), window);
      return linear(b.create<MergeHeadsOp>(loc, unranked(), a), w.matmul(W::AttnOutWeight), w[W::AttnOutBias]);
    }
    Value offset;
    int64_t slots = cache ? cast<RankedTensorType>(cache->key.getType()).getDimSize(1) : 0;
    if (cache && config.attentionWindow == 1 && slots == 1) {
      // A window of 1: each query sees its own key alone, and no step reads the cache (which
      // stays as it is: a whole-cache update at the constant slot 0 would fold to a new tensor
      // that no longer aliases the caller's buffer).
      offset = b.create<arith::ConstantIndexOp>(loc, 0);
    } else if (cache) {
      Value slot = offset = cache->offset;
      if (config.attentionWindow > 0) {
        // A rolling cache of C <= W slots: position p lives at slot p % C. The caller writes
        // either T tokens that fit unwrapped (offset + T <= C: slots are positions) or one token
        // past C, whose query then sees every slot: each holds one of the W - 1 positions before
        // it (softmax does not care in what order). Query offset min(offset, C - T) says both.
        int64_t rows = cast<RankedTensorType>(x.getType()).getDimSize(0);
        slot = b.create<arith::RemUIOp>(loc, offset, b.create<arith::ConstantIndexOp>(loc, slots));
        offset = b.create<arith::MinUIOp>(loc, offset, b.create<arith::ConstantIndexOp>(loc, slots - rows));
      }
      // The caches keep their element type (the KV cache's format): the update rounds to it, and
      // attention reads the rounded keys and values back, the new tokens' own among them.
      cache->key = k = b.create<CacheUpdateOp>(loc, unrankedLike(cache->key), k, cache->key, slot);
      cache->value = v = b.create<CacheUpdateOp>(loc, unrankedLike(cache->value), v, cache->value, slot);
    }
    auto attention = b.create<CausalAttentionOp>(loc, unranked(), q, k, v, offset, b.getF32FloatAttr(scale));
    if (config.attentionWindow > 0) attention.setWindowAttr(b.getI64IntegerAttr(config.attentionWindow));
    if (!config.attentionMask.empty()) {
      if (cache) throw std::invalid_argument("a model with an attention_mask compiles forward only, no cached step");
      attention.getMaskMutable().assign(maskConstant(cast<RankedTensorType>(x.getType()).getDimSize(0)));
    }
    if (!config.attentionMaskExpression.empty())
      buildMaskExpression(b, loc, attention.getMaskExpression(), config.attentionMaskExpression);
    Value a = attention;
    return linear(b.create<MergeHeadsOp>(loc, unranked(), a), w.matmul(W::AttnOutWeight), w[W::AttnOutBias]);
  }

  /// The top-left [tokens, tokens] corner of config.attentionMask, as an i1 constant.
  Value maskConstant(int64_t tokens) {
    SmallVector<bool> bits;
    bits.reserve(tokens * tokens);
    for (int64_t i = 0; i < tokens; ++i)
      for (int64_t j = 0; j < tokens; ++j) bits.push_back(config.attentionMask[i * config.blockSize + j] != 0);
    auto type = RankedTensorType::get({tokens, tokens}, b.getI1Type());
    return b.create<arith::ConstantOp>(loc, DenseElementsAttr::get(type, ArrayRef<bool>(bits)));
  }

  /// The MLP residual branch: down(gelu(up(norm(x)))) (GPT-2's c_fc, c_proj), or
  /// down(swiglu(gate(h), up(h))) with h = norm(x), gate and up one fused matmul [d, 2 ff].
  Value mlp(Value x, const LayerWeights &w) {
    Value h = linear(norm(x, w[W::MlpNormWeight], w[W::MlpNormBias]), w.matmul(W::MlpUpWeight), w[W::MlpUpBias]);
    if (config.mlp == MlpKind::SwiGlu) {
      const int64_t ff = config.ffSize();
      Value gate = b.create<SliceOp>(loc, unranked(), h, b.getI64IntegerAttr(0), b.getI64IntegerAttr(ff));
      Value up = b.create<SliceOp>(loc, unranked(), h, b.getI64IntegerAttr(ff), b.getI64IntegerAttr(ff));
      h = b.create<SwigluOp>(loc, unranked(), gate, up);
    } else {
      h = b.create<GeluOp>(loc, unranked(), h);
    }
    return linear(h, w.matmul(W::MlpDownWeight), w[W::MlpDownBias]);
  }

private:
  OpBuilder &b;
  Location loc;
  const GPTConfig &config;
};

} // namespace

namespace {

/// The tensor type a weight argument has: its argument shape, in its format: f16 scales, and
/// i32 for the bf16, q8_0 and q4_0 lane layouts (each 32-bit word 2 bf16, 4 int8 or 8 4-bit
/// weights of one column along K; kernels/LanePacking.h): the format shows in the shape
/// (ParameterSpec::argumentShape), K / 2, K / 4 or K / 8 rows.
RankedTensorType weightType(OpBuilder &b, const ParameterSpec &spec) {
  Type element = b.getF32Type();
  if (spec.isScales())
    element = b.getF16Type();
  else if (spec.format != WeightFormat::F32)
    element = b.getI32Type();
  return RankedTensorType::get(spec.argumentShape(), element);
}

/// Layer `layer`'s weights from the weights by name (with their ".scales").
LayerWeights layerWeights(const GPTConfig &config, const std::map<std::string, Value> &weights, int64_t layer) {
  LayerWeights w;
  for (const LayerParameter &p : layerParameters(config)) {
    std::string name = layerPrefix(config, layer) + p.name;
    auto scales = weights.find(name + ".scales");
    w.weights[p.weight] = {weights.at(name), scales == weights.end() ? Value() : scales->second};
  }
  return w;
}

/// Layer `layer`'s weights in the order of the block's weight arguments (layer 0's specs).
SmallVector<Value> layerOperands(const GPTConfig &config, const std::map<std::string, Value> &weights,
                                 ArrayRef<ParameterSpec> layerSpecs, int64_t layer) {
  SmallVector<Value> operands;
  const size_t prefix = layerPrefix(config, 0).size();
  for (const ParameterSpec &spec : layerSpecs)
    operands.push_back(weights.at(layerPrefix(config, layer) + spec.name.substr(prefix)));
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

/// `@gpt_block(x: [T, D], positions: [T], 12 layer weights) -> [T, D]`: one transformer layer.
/// Every layer has the same shapes, so the model calls one compiled copy n_layer times instead of
/// unrolling n_layer copies: compile time does not grow with depth.
///
/// With `cacheLen` > 0 the block also takes `offset: index` and this layer's key and value caches
/// `[H, cacheLen, d]` of `kvCache`'s elements, and returns them updated:
/// `(x, positions, offset, k, v, weights) -> (x, k, v)`.
func::FuncOp buildBlock(OpBuilder &b, Location loc, const GPTConfig &config, int64_t seqLen,
                        ArrayRef<ParameterSpec> layerSpecs, StringRef suffix, int64_t cacheLen = 0,
                        KvCacheFormat kvCache = KvCacheFormat::F32) {
  Type f32 = b.getF32Type();
  auto activations = RankedTensorType::get({seqLen, config.nEmbd}, f32);
  auto cacheType =
      RankedTensorType::get({config.kvHeads(), cacheLen, config.headSize()}, kvCacheElementType(b, kvCache));
  bool cached = cacheLen > 0;
  SmallVector<Type> argTypes = {activations, RankedTensorType::get({seqLen}, b.getI64Type())};
  SmallVector<Type> resultTypes = {activations};
  if (cached) {
    argTypes.append({b.getIndexType(), cacheType, cacheType});
    resultTypes.append({cacheType, cacheType});
  }
  int64_t firstWeight = argTypes.size();
  for (const ParameterSpec &spec : layerSpecs) argTypes.push_back(weightType(b, spec));
  SmallVector<unsigned> caches; // updated in place
  if (cached) caches = {3u, 4u};
  func::FuncOp fn = createFunction(b, loc, ((cached ? "gpt_block_cached" : "gpt_block") + suffix).str(), argTypes,
                                   resultTypes, /*entryPoint=*/false, caches);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&fn.front());
  GraphBuilder g(b, loc, config);
  Value x = fn.getArgument(0), positions = fn.getArgument(1);
  std::map<std::string, Value> byName;
  for (auto [spec, argument] : llvm::zip(layerSpecs, fn.getArguments().drop_front(firstWeight)))
    byName[spec.name] = argument;
  LayerWeights w = layerWeights(config, byName, 0);
  GraphBuilder::Cache cache;
  if (cached) cache = {fn.getArgument(3), fn.getArgument(4), fn.getArgument(2)};
  x = g.add(x, g.attention(x, w, positions, cached ? &cache : nullptr));
  x = g.add(x, g.mlp(x, w));
  // Casts to the declared types keep the builder's output valid before shape inference; they
  // fold away once the types agree.
  SmallVector<Value> results = {b.create<tensor::CastOp>(loc, activations, x)};
  if (cached) {
    results.push_back(b.create<tensor::CastOp>(loc, cacheType, cache.key));
    results.push_back(b.create<tensor::CastOp>(loc, cacheType, cache.value));
  }
  b.create<func::ReturnOp>(loc, results);
  return fn;
}

/// `@gpt_block_paged(x: [T, D], positions, sequences, slots: [T], tables: [B, M], k, v: [N, H, S, d],
/// weights) -> (x, k, v)`: one transformer layer of the batched step, writing the new tokens' keys
/// and values into this layer's pools (in place) and attending through the block tables.
func::FuncOp buildPagedBlock(OpBuilder &b, Location loc, const GPTConfig &config, const BatchShape &shape,
                             ArrayRef<ParameterSpec> layerSpecs, StringRef suffix, KvCacheFormat kvCache) {
  Type f32 = b.getF32Type(), i64 = b.getI64Type();
  auto activations = RankedTensorType::get({shape.tokens, config.nEmbd}, f32);
  auto perToken = RankedTensorType::get({shape.tokens}, i64);
  auto poolType = RankedTensorType::get({shape.poolBlocks, config.kvHeads(), shape.blockSize, config.headSize()},
                                        kvCacheElementType(b, kvCache));
  SmallVector<Type> argTypes = {
      activations, perToken, perToken, perToken, RankedTensorType::get({shape.batch, shape.tableWidth}, i64),
      poolType,    poolType};
  SmallVector<Type> resultTypes = {activations, poolType, poolType};
  const int64_t firstWeight = argTypes.size();
  for (const ParameterSpec &spec : layerSpecs) argTypes.push_back(weightType(b, spec));
  func::FuncOp fn = createFunction(b, loc, ("gpt_block_paged" + suffix).str(), argTypes, resultTypes,
                                   /*entryPoint=*/false, /*updatedInPlace=*/{5u, 6u});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&fn.front());
  GraphBuilder g(b, loc, config);
  Value x = fn.getArgument(0), positions = fn.getArgument(1);
  std::map<std::string, Value> byName;
  for (auto [spec, argument] : llvm::zip(layerSpecs, fn.getArguments().drop_front(firstWeight)))
    byName[spec.name] = argument;
  LayerWeights w = layerWeights(config, byName, 0);
  GraphBuilder::PagedCache pools = {fn.getArgument(5), fn.getArgument(6), fn.getArgument(4), fn.getArgument(2),
                                    fn.getArgument(3)};
  x = g.add(x, g.attention(x, w, positions, /*cache=*/nullptr, &pools));
  x = g.add(x, g.mlp(x, w));
  Value out = b.create<tensor::CastOp>(loc, activations, x);
  Value keys = b.create<tensor::CastOp>(loc, poolType, pools.key);
  Value values = b.create<tensor::CastOp>(loc, poolType, pools.value);
  b.create<func::ReturnOp>(loc, ValueRange{out, keys, values});
  return fn;
}

/// The layers' weight specs, named as layer 0's (the block function's arguments): every layer has
/// the same shapes and layouts, but a quantization mix stores some layers' weights in other
/// formats (WeightStorage::formatOverrides). Layers alike share one block function; each distinct
/// list of formats is a variant with a block of its own.
struct LayerVariants {
  std::vector<std::vector<ParameterSpec>> variants; ///< variant 0 is layer 0's
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
      auto sameFormats = [&](const std::vector<ParameterSpec> &variant) {
        return std::equal(variant.begin(), variant.end(), layer.begin(), layer.end(),
                          [](const ParameterSpec &a, const ParameterSpec &b) { return a.format == b.format; });
      };
      auto found = std::find_if(variants.begin(), variants.end(), sameFormats);
      ofLayer.push_back(found - variants.begin());
      if (found == variants.end()) variants.push_back(std::move(layer));
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
      batch ? RankedTensorType::get({batch->poolBlocks, config.kvHeads(), batch->blockSize, config.headSize()}, element)
            : RankedTensorType::get({config.kvHeads(), cacheLen, config.headSize()}, element);
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

/// The entry function's argument values by kind: ids, positions, last row, offset, caches, and
/// the weights by name.
struct EntryValues {
  Value ids, positions, last, offset, sequences, slots, tables;
  SmallVector<Value> keys, values;
  std::map<std::string, Value> weights;

  /// The token embeddings of `ids`: looked up in the f32 table, or, for a block-quantized model,
  /// in the LM head's weight, which stores the tied table once.
  Value tokenEmbedding(OpBuilder &b, Location loc, const GPTConfig &config, Value ids) const {
    Type result = UnrankedTensorType::get(b.getF32Type());
    auto table = weights.find(modelParameterNames(config).tokenEmbedding);
    if (table != weights.end()) return b.create<EmbeddingOp>(loc, result, table->second, ids);
    MatmulWeight head = this->head();
    return b.create<PackedEmbeddingOp>(loc, result, head.weight, head.scales, ids);
  }

  /// The final norm's bias, null when the architecture has none.
  Value finalNormBias(const ModelParameterNames &names) const {
    auto bias = weights.find(names.finalNormBias);
    return bias == weights.end() ? Value() : bias->second;
  }

  /// The LM head's weight, and its scales when block-quantized.
  MatmulWeight head() const {
    auto scales = weights.find("lm_head.weight_t.scales");
    return {weights.at("lm_head.weight_t"), scales == weights.end() ? Value() : scales->second};
  }

  EntryValues(func::FuncOp fn, ArrayRef<EntryArgument> arguments, ArrayRef<ParameterSpec> specs) {
    for (auto [argument, value] : llvm::zip(arguments, fn.getArguments())) {
      switch (argument.kind) {
      case ArgumentKind::TokenIds:
        ids = value;
        break;
      case ArgumentKind::Positions:
        positions = value;
        break;
      case ArgumentKind::LastRow:
        last = value;
        break;
      case ArgumentKind::CacheOffset:
        offset = value;
        break;
      case ArgumentKind::Sequences:
        sequences = value;
        break;
      case ArgumentKind::CacheSlots:
        slots = value;
        break;
      case ArgumentKind::BlockTables:
        tables = value;
        break;
      case ArgumentKind::KeyCache:
        keys.push_back(value);
        break;
      case ArgumentKind::ValueCache:
        values.push_back(value);
        break;
      case ArgumentKind::Weight:
        weights[specs[argument.index].name] = value;
        break;
      case ArgumentKind::Logits:
        break;
      }
    }
  }
};

} // namespace

namespace {

/// The public function of a cached entry point (step, batch step): its arguments, and as results
/// the logits and every layer's key and value caches (`cacheType`), which it updates in place.
func::FuncOp createCachedEntry(OpBuilder &b, Location loc, StringRef name, const GPTConfig &config,
                               const EntryFunctionArguments &arguments, RankedTensorType logitsType,
                               RankedTensorType cacheType) {
  SmallVector<Type> resultTypes = {logitsType};
  resultTypes.append(2 * config.nLayer, cacheType);
  SmallVector<unsigned> caches; // updated in place
  for (auto [i, argument] : llvm::enumerate(arguments.arguments))
    if (argument.kind == ArgumentKind::KeyCache || argument.kind == ArgumentKind::ValueCache) caches.push_back(i);
  func::FuncOp fn = createFunction(b, loc, name, arguments.types, resultTypes, /*entryPoint=*/true, caches);
  b.setInsertionPointToStart(&fn.front());
  return fn;
}

/// The body of a cached entry point: the embeddings, one call of `block` per layer (x, then
/// `blockInputs(layer)`, then the layer's weights; it returns x and the layer's updated key and
/// value caches), then the rows `in.last` (an embedding lookup into the activations) through the
/// final LayerNorm and the LM head. Returns the logits and the updated caches.
void buildCachedEntryBody(OpBuilder &b, Location loc, const GPTConfig &config, const EntryValues &in,
                          ArrayRef<func::FuncOp> blocks, const LayerVariants &layers, RankedTensorType logitsType,
                          llvm::function_ref<SmallVector<Value>(int64_t layer)> blockInputs) {
  GraphBuilder g(b, loc, config);
  const ModelParameterNames &names = modelParameterNames(config);
  Value x = in.tokenEmbedding(b, loc, config, in.ids);
  if (!config.rope)
    x = g.add(x, b.create<EmbeddingOp>(loc, g.unranked(), in.weights.at(names.positionEmbedding), in.positions));
  x = b.create<tensor::CastOp>(loc, func::FuncOp(blocks.front()).getArgumentTypes()[0], x);
  SmallVector<Value> keys, values;
  for (int64_t layer = 0; layer < config.nLayer; ++layer) {
    const size_t variant = layers.ofLayer[layer];
    SmallVector<Value> operands = {x};
    operands.append(blockInputs(layer));
    operands.append(layerOperands(config, in.weights, layers.variants[variant], layer));
    auto call = b.create<func::CallOp>(loc, blocks[variant], operands);
    x = call.getResult(0);
    keys.push_back(call.getResult(1));
    values.push_back(call.getResult(2));
  }
  x = b.create<EmbeddingOp>(loc, g.unranked(), x, in.last);
  x = g.norm(x, in.weights.at(names.finalNormWeight), in.finalNormBias(names));
  Value logits = g.matmul(x, in.head());
  SmallVector<Value> results = {b.create<tensor::CastOp>(loc, logitsType, logits)};
  for (int64_t layer = 0; layer < config.nLayer; ++layer) {
    results.push_back(keys[layer]);
    results.push_back(values[layer]);
  }
  b.create<func::ReturnOp>(loc, results);
}

} // namespace

OwningOpRef<ModuleOp> buildForward(MLIRContext &ctx, const GPTConfig &config, int64_t seqLen,
                                   const WeightStorage &storage) {
  ctx.loadDialect<TransformerDialect, arith::ArithDialect, func::FuncDialect, bufferization::BufferizationDialect,
                  tensor::TensorDialect>();
  OpBuilder b(&ctx);
  Location loc = NameLoc::get(b.getStringAttr("gpt.forward"));
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());

  std::vector<ParameterSpec> specs = parameterSpecs(config, storage);
  const LayerVariants layers(config, storage);
  SmallVector<func::FuncOp> blocks;
  for (auto [variant, layerSpecs] : llvm::enumerate(layers.variants))
    blocks.push_back(buildBlock(b, loc, config, seqLen, layerSpecs, LayerVariants::suffix(variant)));
  EntryFunctionArguments arguments =
      entryFunctionArguments(b, EntryPoint::Forward, config, specs, seqLen, 0, storage.kvCache);
  auto logitsType = RankedTensorType::get({seqLen, config.paddedVocabSize(storage.tiles)}, b.getF32Type());
  func::FuncOp fn = createFunction(b, loc, "forward", arguments.types, {logitsType}, /*entryPoint=*/true);
  b.setInsertionPointToStart(&fn.front());
  EntryValues in(fn, arguments.arguments, specs);

  GraphBuilder g(b, loc, config);
  const ModelParameterNames &names = modelParameterNames(config);
  Value x = in.tokenEmbedding(b, loc, config, in.ids);
  if (!config.rope)
    x = g.add(x, b.create<EmbeddingOp>(loc, g.unranked(), in.weights.at(names.positionEmbedding), in.positions));
  // The call's operand types must match the block's signature.
  x = b.create<tensor::CastOp>(loc, blocks.front().getArgumentTypes()[0], x);
  for (int64_t layer = 0; layer < config.nLayer; ++layer) {
    const size_t variant = layers.ofLayer[layer];
    SmallVector<Value> operands = {x, in.positions};
    operands.append(layerOperands(config, in.weights, layers.variants[variant], layer));
    x = b.create<func::CallOp>(loc, blocks[variant], operands).getResult(0);
  }
  x = g.norm(x, in.weights.at(names.finalNormWeight), in.finalNormBias(names));
  Value logits = g.matmul(x, in.head());
  b.create<func::ReturnOp>(loc, b.create<tensor::CastOp>(loc, logitsType, logits).getResult());
  return module;
}

OwningOpRef<ModuleOp> buildStep(MLIRContext &ctx, const GPTConfig &config, int64_t seqLen, int64_t cacheLen,
                                const WeightStorage &storage, int64_t logitsRows) {
  if (logitsRows < 1 || logitsRows > seqLen)
    throw std::invalid_argument("a step of " + std::to_string(seqLen) + " tokens returns between 1 and " +
                                std::to_string(seqLen) + " rows of logits, not " + std::to_string(logitsRows));
  ctx.loadDialect<TransformerDialect, arith::ArithDialect, func::FuncDialect, bufferization::BufferizationDialect,
                  tensor::TensorDialect>();
  OpBuilder b(&ctx);
  Location loc = NameLoc::get(b.getStringAttr("gpt.step"));
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());

  std::vector<ParameterSpec> specs = parameterSpecs(config, storage);
  const LayerVariants layers(config, storage);
  SmallVector<func::FuncOp> blocks;
  for (auto [variant, layerSpecs] : llvm::enumerate(layers.variants))
    blocks.push_back(
        buildBlock(b, loc, config, seqLen, layerSpecs, LayerVariants::suffix(variant), cacheLen, storage.kvCache));
  EntryFunctionArguments arguments =
      entryFunctionArguments(b, EntryPoint::Step, config, specs, seqLen, cacheLen, storage.kvCache,
                             /*batch=*/nullptr, logitsRows);
  auto cacheType =
      RankedTensorType::get({config.kvHeads(), cacheLen, config.headSize()}, kvCacheElementType(b, storage.kvCache));
  auto logitsType = RankedTensorType::get({logitsRows, config.paddedVocabSize(storage.tiles)}, b.getF32Type());
  func::FuncOp fn = createCachedEntry(b, loc, "step", config, arguments, logitsType, cacheType);
  EntryValues in(fn, arguments.arguments, specs);
  // Only the rows `last` names go through the final LayerNorm and the LM head: prefill and decode
  // need the last real token's; speculative verification every drafted position's.
  buildCachedEntryBody(b, loc, config, in, blocks, layers, logitsType, [&](int64_t layer) {
    return SmallVector<Value>{in.positions, in.offset, in.keys[layer], in.values[layer]};
  });
  return module;
}

OwningOpRef<ModuleOp> buildBatchStep(MLIRContext &ctx, const GPTConfig &config, const BatchShape &shape,
                                     const WeightStorage &storage) {
  ctx.loadDialect<TransformerDialect, arith::ArithDialect, func::FuncDialect, bufferization::BufferizationDialect,
                  tensor::TensorDialect>();
  OpBuilder b(&ctx);
  Location loc = NameLoc::get(b.getStringAttr("gpt.batch_step"));
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());

  std::vector<ParameterSpec> specs = parameterSpecs(config, storage);
  const LayerVariants layers(config, storage);
  SmallVector<func::FuncOp> blocks;
  for (auto [variant, layerSpecs] : llvm::enumerate(layers.variants))
    blocks.push_back(
        buildPagedBlock(b, loc, config, shape, layerSpecs, LayerVariants::suffix(variant), storage.kvCache));
  EntryFunctionArguments arguments =
      entryFunctionArguments(b, EntryPoint::BatchStep, config, specs, shape.tokens, 0, storage.kvCache, &shape);
  auto poolType = RankedTensorType::get({shape.poolBlocks, config.kvHeads(), shape.blockSize, config.headSize()},
                                        kvCacheElementType(b, storage.kvCache));
  auto logitsType = RankedTensorType::get({shape.batch, config.paddedVocabSize(storage.tiles)}, b.getF32Type());
  func::FuncOp fn = createCachedEntry(b, loc, "batch_step", config, arguments, logitsType, poolType);
  EntryValues in(fn, arguments.arguments, specs);
  // Each sequence's last new token: its row goes through the final LayerNorm and the LM head.
  buildCachedEntryBody(b, loc, config, in, blocks, layers, logitsType, [&](int64_t layer) {
    return SmallVector<Value>{in.positions, in.sequences, in.slots, in.tables, in.keys[layer], in.values[layer]};
  });
  return module;
}

} // namespace gpt
