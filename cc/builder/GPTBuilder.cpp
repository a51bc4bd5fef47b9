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
#include <tuple>

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

/// The model-level weights: the embeddings (null where the model has none: the token table of
/// a block-quantized model, which reads the head's copy; the position table of a rope model),
/// the final norm and the LM head.
struct ModelWeights {
  Value tokenEmbedding, positionEmbedding, finalNormWeight, finalNormBias;
  MatmulWeight head;
  /// A block-quantized untied model's q8_0 copy of its token table, laid out as the head's.
  MatmulWeight packedEmbedding;
};

/// What a layer's attention reads besides its activations, and where its keys and values go:
/// nowhere (None: forward, attention over the tokens themselves), a cache (step: written at
/// `offset`, attended over whole) or paged pools (batch step: written at `slots`, attended
/// through the block tables). A block function takes them as its arguments after x, in
/// operands() order, and returns the updated caches after x.
struct AttentionInputs {
  enum class Kind { None, Cache, Paged };
  Kind kind = Kind::None;
  int64_t tokens = 0;             ///< T, the rows of the activations
  Value positions;                ///< [T] i64
  Value offset;                   ///< Cache: the first token's position (index)
  Value sequences, slots, tables; ///< Paged (EntryPoints.h)
  /// Cache: this layer's [H, C, d] caches; Paged: its pools [N, H, S, d]. Attention replaces them
  /// by the updated ones.
  Value key, value;

  SmallVector<Value> operands() const {
    switch (kind) {
    case Kind::Cache:
      return {positions, offset, key, value};
    case Kind::Paged:
      return {positions, sequences, slots, tables, key, value};
    case Kind::None:
      break;
    }
    return {positions};
  }

  /// The inputs of `kind` from a block function's arguments after x (operands() order).
  static AttentionInputs fromArguments(Kind kind, int64_t tokens, ValueRange args) {
    AttentionInputs in{kind, tokens, args[0]};
    if (kind == Kind::Cache) std::tie(in.offset, in.key, in.value) = std::make_tuple(args[1], args[2], args[3]);
    if (kind == Kind::Paged)
      std::tie(in.sequences, in.slots, in.tables, in.key, in.value) =
          std::make_tuple(args[1], args[2], args[3], args[4], args[5]);
    return in;
  }
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

  /// Causal self-attention of the normed activations `h`: the residual branch, not yet added
  /// to x. Keys and values go where `in` says (AttentionInputs), whose caches are replaced by
  /// the updated ones.
  Value attention(Value h, const LayerWeights &w, AttentionInputs &in) {
    Value qkv = linear(h, w.matmul(W::QkvWeight), w[W::QkvBias]);
    // q, then k and v of n_kv_head heads each (grouped-query attention: fewer than q's).
    const int64_t d = config.qSize(), kv = config.kvSize();
    Value q = heads(qkv, 0, config.nHead), k = heads(qkv, d, config.kvHeads()),
          v = heads(qkv, d + kv, config.kvHeads());
    if (config.rope) {
      q = rope(q, in.positions);
      k = rope(k, in.positions);
    }
    float scale = 1.0f / std::sqrt(static_cast<float>(config.headSize()));
    Value a = in.kind == AttentionInputs::Kind::Paged ? pagedAttention(q, k, v, in, scale)
                                                      : causalAttention(q, k, v, in, scale);
    return linear(b.create<MergeHeadsOp>(loc, unranked(), a), w.matmul(W::AttnOutWeight), w[W::AttnOutBias]);
  }

  /// Attention through the block tables, the new keys and values written into the pools first.
  Value pagedAttention(Value q, Value k, Value v, AttentionInputs &in, float scale) {
    // The pools keep their element type (the KV cache's format): the write rounds to it.
    in.key = b.create<PagedCacheWriteOp>(loc, unrankedLike(in.key), k, in.key, in.slots);
    in.value = b.create<PagedCacheWriteOp>(loc, unrankedLike(in.value), v, in.value, in.slots);
    IntegerAttr window = config.attentionWindow > 0 ? b.getI64IntegerAttr(config.attentionWindow) : nullptr;
    return b.create<PagedAttentionOp>(loc, unranked(), q, in.key, in.value, in.tables, in.sequences, in.positions,
                                      b.getF32FloatAttr(scale), window);
  }

  /// Attention over the tokens themselves, or (Kind::Cache) over the cache they are written into.
  Value causalAttention(Value q, Value k, Value v, AttentionInputs &in, float scale) {
    const bool cached = in.kind == AttentionInputs::Kind::Cache;
    Value offset;
    int64_t slots = cached ? cast<RankedTensorType>(in.key.getType()).getDimSize(1) : 0;
    if (cached && config.attentionWindow == 1 && slots == 1) {
      // A window of 1: each query sees its own key alone, and no step reads the cache (which
      // stays as it is: a whole-cache update at the constant slot 0 would fold to a new tensor
      // that no longer aliases the caller's buffer).
      offset = b.create<arith::ConstantIndexOp>(loc, 0);
    } else if (cached) {
      Value slot = offset = in.offset;
      if (config.attentionWindow > 0) {
        // A rolling cache of C <= W slots: position p lives at slot p % C. The caller writes
        // either T tokens that fit unwrapped (offset + T <= C: slots are positions) or one token
        // past C, whose query then sees every slot: each holds one of the W - 1 positions before
        // it (softmax does not care in what order). Query offset min(offset, C - T) says both.
        const int64_t rows = in.tokens;
        slot = b.create<arith::RemUIOp>(loc, offset, b.create<arith::ConstantIndexOp>(loc, slots));
        offset = b.create<arith::MinUIOp>(loc, offset, b.create<arith::ConstantIndexOp>(loc, slots - rows));
      }
      // The caches keep their element type (the KV cache's format): the update rounds to it, and
      // attention reads the rounded keys and values back, the new tokens' own among them.
      in.key = k = b.create<CacheUpdateOp>(loc, unrankedLike(in.key), k, in.key, slot);
      in.value = v = b.create<CacheUpdateOp>(loc, unrankedLike(in.value), v, in.value, slot);
    }
    auto attention = b.create<CausalAttentionOp>(loc, unranked(), q, k, v, offset, b.getF32FloatAttr(scale));
    if (config.attentionWindow > 0) attention.setWindowAttr(b.getI64IntegerAttr(config.attentionWindow));
    if (!config.attentionMask.empty()) {
      if (cached) throw std::invalid_argument("a model with an attention_mask compiles forward only, no cached step");
      attention.getMaskMutable().assign(maskConstant(in.tokens));
    }
    if (!config.attentionMaskExpression.empty())
      buildMaskExpression(b, loc, attention.getMaskExpression(), config.attentionMaskExpression);
    return attention.getResult();
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

  /// The MLP residual branch of the normed activations `h`: down(gelu(up(h))) (GPT-2's c_fc,
  /// c_proj), or down(swiglu(gate(h), up(h))), gate and up one fused matmul [d, 2 ff].
  Value mlp(Value h, const LayerWeights &w) {
    h = linear(h, w.matmul(W::MlpUpWeight), w[W::MlpUpBias]);
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

  /// The token embeddings of `ids`, plus the learned positions' where the model has them.
  Value embed(const ModelWeights &w, Value ids, Value positions) {
    // A block-quantized model looks tokens up in a packed q8_0 table: its own (untied), or the LM
    // head's weight, which stores the tied table once.
    const MatmulWeight &packed = w.packedEmbedding.weight ? w.packedEmbedding : w.head;
    Value x = w.tokenEmbedding ? Value(b.create<EmbeddingOp>(loc, unranked(), w.tokenEmbedding, ids))
                               : Value(b.create<PackedEmbeddingOp>(loc, unranked(), packed.weight, packed.scales, ids));
    if (w.positionEmbedding) x = add(x, b.create<EmbeddingOp>(loc, unranked(), w.positionEmbedding, positions));
    return x;
  }

  /// The logits of the rows `rows` of x (all of them where `rows` is null): the final norm and
  /// the LM head.
  Value head(const ModelWeights &w, Value x, Value rows) {
    if (rows) x = b.create<EmbeddingOp>(loc, unranked(), x, rows);
    return matmul(norm(x, w.finalNormWeight, w.finalNormBias), w.head);
  }

  /// `value` cast to `type`: the declared types of function boundaries, which keep the
  /// builder's output valid before shape inference (the casts fold away once the types agree).
  Value castTo(Value value, Type type) { return b.create<tensor::CastOp>(loc, type, value); }

private:
  OpBuilder &b;
  Location loc;
  const GPTConfig &config;
};

/// One transformer layer, the recipe of every block function: pre-norm attention and MLP, each
/// added to the residual stream.
Value transformerLayer(GraphBuilder &g, Value x, const LayerWeights &w, AttentionInputs &in) {
  x = g.add(x, g.attention(g.norm(x, w[W::AttnNormWeight], w[W::AttnNormBias]), w, in));
  return g.add(x, g.mlp(g.norm(x, w[W::MlpNormWeight], w[W::MlpNormBias]), w));
}

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
      cache = RankedTensorType::get({config.kvHeads(), cacheLen, config.headSize()}, element);
      inputs.append({b.getIndexType(), cache, cache});
      break;
    case EntryPoint::BatchStep:
      kind = AttentionInputs::Kind::Paged;
      cache =
          RankedTensorType::get({batch->poolBlocks, config.kvHeads(), batch->blockSize, config.headSize()}, element);
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
                        ArrayRef<ParameterSpec> layerSpecs, StringRef suffix) {
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
  GraphBuilder g(b, loc, config);
  std::map<std::string, Value> byName;
  for (auto [spec, argument] : llvm::zip(layerSpecs, fn.getArguments().drop_front(firstWeight)))
    byName[spec.name] = argument;
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

  /// The model-level weights; the token table is absent from a block-quantized model, whose
  /// lookup reads a packed copy (its own, or the tied LM head's).
  ModelWeights modelWeights(const GPTConfig &config) const {
    const ModelParameterNames names = modelParameterNames(config);
    auto find = [&](const std::string &name) {
      auto found = weights.find(name);
      return found == weights.end() ? Value() : found->second;
    };
    ModelWeights w{find(names.tokenEmbedding),
                   Value(),
                   weights.at(names.finalNormWeight),
                   find(names.finalNormBias),
                   {weights.at("lm_head.weight_t"), find("lm_head.weight_t.scales")},
                   {find(names.tokenEmbedding + "_t"), find(names.tokenEmbedding + "_t.scales")}};
    if (!config.rope) w.positionEmbedding = weights.at(names.positionEmbedding);
    return w;
  }

  /// Layer `layer`'s AttentionInputs of `kind`.
  AttentionInputs attentionInputs(AttentionInputs::Kind kind, int64_t tokens, int64_t layer) const {
    AttentionInputs in{kind, tokens, positions, offset, sequences, slots, tables};
    if (kind != AttentionInputs::Kind::None) std::tie(in.key, in.value) = std::make_pair(keys[layer], values[layer]);
    return in;
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
    blocks.push_back(buildBlock(b, loc, config, signature, layerSpecs, LayerVariants::suffix(variant)));
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
    operands.append(layerOperands(config, in.weights, layers.variants[variant], layer));
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
