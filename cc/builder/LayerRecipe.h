// The layer recipe's pieces (llama.cpp's build_norm/build_attn/build_ffn): the weights a layer
// and the model read, what attention reads besides activations, and GraphBuilder, which emits
// transformer ops for them; transformerLayer composes one layer. Used by GPTBuilder.cpp only.
#ifndef GPT_CC_BUILDER_LAYERRECIPE_H
#define GPT_CC_BUILDER_LAYERRECIPE_H

#include "cc/builder/GPTConfig.h"
#include "cc/builder/MaskExpression.h"
#include "cc/builder/Parameters.h"

#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>
#include <vector>

namespace gpt::recipe {

using namespace mlir;
using namespace mlir::transformer;

using W = LayerWeight;

/// The element type of a KV cache of `format`: what its tensors hold, and what the runtime's
/// arrays hold (bf16 as uint16 bits; q8_0 as the bytes of its codes and scales, kvCacheRowWidth).
inline Type kvCacheElementType(OpBuilder &b, KvCacheFormat format) {
  switch (format) {
  case KvCacheFormat::Q8_0:
    return b.getI8Type();
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
inline Type unrankedLike(Value like) {
  return UnrankedTensorType::get(cast<TensorType>(like.getType()).getElementType());
}

/// A matmul weight and, for a block-quantized one, its scales (null otherwise), in the format it
/// is stored in.
struct MatmulWeight {
  Value weight, scales;
  WeightFormat format = WeightFormat::F32;
  /// In a block function shared by layers that store this weight in different formats (a
  /// quantization mix): each format's weight, this one first, and the index argument that says
  /// which one a call reads. Empty where every layer of the block has the same format.
  std::vector<MatmulWeight> formats;
  Value choice;
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

/// How one layer attends: its sliding window (0: none), its rope base and whether the config's
/// rope scaling applies (GPTConfig::layerWindows: a windowed layer of a model with per-layer
/// windows is local, with localRopeBase and no scaling).
struct LayerAttention {
  int64_t window = 0;
  float ropeBase = 10000.0f;
  bool ropeScaled = true;

  /// The attention of a layer whose window is `window` (GPTConfig::windowOf).
  static LayerAttention of(const GPTConfig &config, int64_t window) {
    const bool local = !config.layerWindows.empty() && window > 0;
    const float localBase = config.localRopeBase != 0.0f ? config.localRopeBase : config.ropeBase;
    return {window, local ? localBase : config.ropeBase, !local};
  }
};

/// Emits transformer ops with unranked results; shape inference gives them their types. The
/// layer ops (attention, rope) attend as `layer` says; the model-level ones ignore it. `rows` is
/// the activations' row count where a block function knows it (a matmul whose weight comes in
/// several formats declares its result's type).
class GraphBuilder {
public:
  GraphBuilder(OpBuilder &b, Location loc, const GPTConfig &config, LayerAttention layer = {}, int64_t rows = 0)
      : b(b), loc(loc), config(config), layer(layer), rows(rows) {}

  Type unranked() { return UnrankedTensorType::get(b.getF32Type()); }

  Value add(Value x, Value y) { return b.create<AddOp>(loc, unranked(), x, y); }
  Value mul(Value x, Value y) { return b.create<MulOp>(loc, unranked(), x, y); }
  /// x times a constant (broadcast from a [1] tensor).
  Value scale(Value x, float factor) {
    auto type = RankedTensorType::get({1}, b.getF32Type());
    return mul(x, b.create<transformer::ConstantOp>(loc, DenseElementsAttr::get(type, factor)));
  }
  /// x times a weight, plain [K, N] or packed in panels [N/P, K, P] (with its scales); a weight
  /// that comes in several formats (MatmulWeight::formats) through the one its choice names.
  Value matmul(Value x, const MatmulWeight &w) {
    if (!w.formats.empty()) return matmulOfChoice(x, w.formats, w.choice);
    if (cast<RankedTensorType>(w.weight.getType()).getRank() == 3)
      return b.create<PackedMatmulOp>(loc, unranked(), weightFormatName(w.format), x, w.weight, w.scales);
    return b.create<MatmulOp>(loc, unranked(), x, w.weight);
  }

  /// x times formats[choice], the others behind branches that a call does not take: one block
  /// function for layers that differ only in some weights' formats compiles every region they
  /// share once (the prefill and decode of a 1.7B Q4_K_M file in 1.8 CPU-s instead of 2.2, JOURNAL).
  /// scf.if, not an index switch: bufferization and every pass after it know it.
  Value matmulOfChoice(Value x, ArrayRef<MatmulWeight> formats, Value choice) {
    auto weight = cast<RankedTensorType>(formats.front().weight.getType());
    const int64_t columns = weight.getRank() == 3 ? weight.getDimSize(0) * weight.getDimSize(2) : weight.getDimSize(1);
    if (rows <= 0) throw std::logic_error("a matmul of a weight in several formats needs the builder's row count");
    auto type = RankedTensorType::get({rows, columns}, b.getF32Type());
    if (formats.size() == 1) return castTo(matmul(x, formats.front()), type);
    Value isLast = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, choice,
                                           b.create<arith::ConstantIndexOp>(loc, formats.size() - 1));
    // The last format when the choice names it, else the ones before it (an scf.if chain).
    auto branch = b.create<scf::IfOp>(loc, TypeRange{type}, isLast, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    b.create<scf::YieldOp>(loc, castTo(matmul(x, formats.back()), type));
    b.setInsertionPointToStart(branch.elseBlock());
    b.create<scf::YieldOp>(loc, matmulOfChoice(x, formats.drop_back(), choice));
    return branch.getResult(0);
  }
  /// x w + bias, or x w where the architecture has no bias (null).
  Value linear(Value x, const MatmulWeight &w, Value bias) {
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
  /// Rotary embedding of q or k, as the config and the layer say (base, layout, Llama 3 scaling).
  Value rope(Value x, Value positions) {
    DenseF32ArrayAttr scaling;
    if (config.ropeScaling.factor != 0.0f && layer.ropeScaled) {
      const RopeScaling &s = config.ropeScaling;
      scaling = b.getDenseF32ArrayAttr(
          {s.factor, s.lowFreqFactor, s.highFreqFactor, static_cast<float>(s.originalMaxPositions)});
    }
    UnitAttr interleaved = config.ropeLayout == RopeLayout::Interleaved ? b.getUnitAttr() : nullptr;
    return b.create<RopeOp>(loc, unranked(), x, positions, b.getF32FloatAttr(layer.ropeBase), interleaved, scaling);
  }

  /// Causal self-attention of the normed activations `h`: the residual branch, not yet added
  /// to x. Keys and values go where `in` says (AttentionInputs), whose caches are replaced by
  /// the updated ones.
  Value attention(Value h, const LayerWeights &w, AttentionInputs &in) {
    Value qkv = linear(h, w.matmul(W::QkvWeight), w[W::QkvBias]);
    // q, then k and v of n_kv_head heads each (grouped-query attention: fewer than q's); v from a
    // matmul of its own where the names give it one (ParameterNames::vProj).
    const int64_t d = config.qSize(), kv = config.kvSize();
    Value q = heads(qkv, 0, config.nHead), k = heads(qkv, d, config.kvHeads());
    Value v = w[W::VProjWeight] ? heads(linear(h, w.matmul(W::VProjWeight), w[W::VProjBias]), 0, config.kvHeads())
                                : heads(qkv, d + kv, config.kvHeads());
    if (Value qNorm = w[W::QNormWeight]) {
      // Gemma 3's (and Qwen3's) RMSNorm over each head's head_size, before rope.
      q = norm(q, qNorm, Value());
      k = norm(k, w[W::KNormWeight], Value());
    }
    if (config.rope) {
      q = rope(q, in.positions);
      k = rope(k, in.positions);
    }
    float scale =
        config.attentionScale != 0.0f ? config.attentionScale : 1.0f / std::sqrt(static_cast<float>(config.headSize()));
    Value a = in.kind == AttentionInputs::Kind::Paged ? pagedAttention(q, k, v, in, scale)
                                                      : causalAttention(q, k, v, in, scale);
    return linear(b.create<MergeHeadsOp>(loc, unranked(), a), w.matmul(W::AttnOutWeight), w[W::AttnOutBias]);
  }

  /// Attention through the block tables, the new keys and values written into the pools first.
  Value pagedAttention(Value q, Value k, Value v, AttentionInputs &in, float scale) {
    // The pools keep their element type (the KV cache's format): the write rounds to it.
    in.key = b.create<PagedCacheWriteOp>(loc, unrankedLike(in.key), k, in.key, in.slots);
    in.value = b.create<PagedCacheWriteOp>(loc, unrankedLike(in.value), v, in.value, in.slots);
    IntegerAttr window = layer.window > 0 ? b.getI64IntegerAttr(layer.window) : nullptr;
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
    if (layer.window > 0) attention.setWindowAttr(b.getI64IntegerAttr(layer.window));
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
  /// c_proj), down(swiglu(gate(h), up(h))) or down(gelu(gate(h)) * up(h)) (GeGLU), gate and up
  /// one fused matmul [d, 2 ff].
  Value mlp(Value h, const LayerWeights &w) {
    h = linear(h, w.matmul(W::MlpUpWeight), w[W::MlpUpBias]);
    if (config.mlp != MlpKind::Gelu) {
      const int64_t ff = config.ffSize();
      Value gate = b.create<SliceOp>(loc, unranked(), h, b.getI64IntegerAttr(0), b.getI64IntegerAttr(ff));
      Value up = b.create<SliceOp>(loc, unranked(), h, b.getI64IntegerAttr(ff), b.getI64IntegerAttr(ff));
      h = config.mlp == MlpKind::SwiGlu ? Value(b.create<SwigluOp>(loc, unranked(), gate, up))
                                        : mul(b.create<GeluOp>(loc, unranked(), gate), up);
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
                               : Value(b.create<PackedEmbeddingOp>(loc, unranked(), weightFormatName(packed.format),
                                                                   packed.weight, packed.scales, ids));
    if (w.positionEmbedding) x = add(x, b.create<EmbeddingOp>(loc, unranked(), w.positionEmbedding, positions));
    // Gemma: times sqrt(n_embd), which HF rounds to the embedding's dtype (f32) first.
    if (config.embeddingScale) x = scale(x, static_cast<float>(std::sqrt(static_cast<double>(config.nEmbd))));
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
  LayerAttention layer;
  int64_t rows;
};

/// One transformer layer, the recipe of every block function: pre-norm attention and MLP, each
/// added to the residual stream; where the architecture has them (Gemma's sandwich), each
/// branch's output normed before it is added.
inline Value transformerLayer(GraphBuilder &g, Value x, const LayerWeights &w, AttentionInputs &in) {
  Value attention = g.attention(g.norm(x, w[W::AttnNormWeight], w[W::AttnNormBias]), w, in);
  if (Value post = w[W::PostAttnNormWeight]) attention = g.norm(attention, post, Value());
  x = g.add(x, attention);
  Value mlp = g.mlp(g.norm(x, w[W::MlpNormWeight], w[W::MlpNormBias]), w);
  if (Value post = w[W::PostMlpNormWeight]) mlp = g.norm(mlp, post, Value());
  return g.add(x, mlp);
}

} // namespace gpt::recipe

#endif // GPT_CC_BUILDER_LAYERRECIPE_H
