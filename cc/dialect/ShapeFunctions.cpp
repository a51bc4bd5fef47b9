// Result-type rules of the transformer ops (see ShapeFunctions.h); packed_matmul's, with the weight
// formats' lanes and scales, are in PackedWeightShapes.cpp.
#include "cc/dialect/ShapeFunctions.h"
#include "cc/dialect/ShapeRules.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <string>
#include <tuple>

namespace mlir::transformer {
using namespace shape_rules;

namespace {

/// A tensor of `shape` (unranked: none) with the element type of `cache`, a tensor: the result of
/// a write into a KV cache, which keeps the cache's format.
TensorType likeCache(std::optional<ArrayRef<int64_t>> shape, Type cache) {
  Type element = cast<TensorType>(cache).getElementType();
  if (!shape) return UnrankedTensorType::get(element);
  return RankedTensorType::get(*shape, element);
}

/// `cache` (a ranked KV cache, key or value tensor) with its last dim as the head_dim its rows
/// hold (kvCacheHeadDim): a q8_0 cache's bytes per row become the values they store, so that
/// the shape checks below compare head dims alike for every format. An error naming `name` for
/// an i8 row width that holds no whole q8_0 row.
FailureOr<RankedTensorType> valuesView(StringRef name, RankedTensorType cache, EmitErrorFn emitError) {
  if (!cache) return cache;
  std::optional<int64_t> headDim = kvCacheHeadDim(cache.getElementType(), cache.getShape().back());
  if (!headDim)
    return emitError() << name << " " << Type(cache) << " is a q8_0 KV cache (i8) whose rows of "
                       << cache.getShape().back() << " bytes are not head_dim int8 codes and head_dim / 32 fp16 "
                       << "scales (head_dim * 17/16 bytes, head_dim a multiple of 32)";
  SmallVector<int64_t> shape(cache.getShape());
  shape.back() = *headDim;
  return cache.clone(shape);
}

/// How a rank-3 tensor of heads is laid out, for error messages.
StringRef layoutName(bool tokenMajor) { return tokenMajor ? "[tokens, heads, head_dim]" : "[heads, tokens, head_dim]"; }

} // namespace

std::optional<int64_t> kvCacheHeadDim(Type element, int64_t width) {
  if (!element.isInteger(8) || ShapedType::isDynamic(width)) return width;
  // 32 codes and a 2-byte scale per block of 32 values.
  if (width <= 0 || width % 34 != 0) return std::nullopt;
  return width / 34 * 32;
}

FailureOr<TensorType> inferBroadcastType(Type lhs, Type rhs, EmitErrorFn emitError) {
  auto l = dyn_cast<RankedTensorType>(lhs);
  auto r = dyn_cast<RankedTensorType>(rhs);
  if (!l || !r) return unranked(lhs);
  int64_t rank = std::max(l.getRank(), r.getRank());
  SmallVector<int64_t> shape(rank);
  for (int64_t i = 0; i < rank; ++i) {
    // Walk from the innermost dim outwards; a missing dim acts as 1.
    int64_t li = l.getRank() - 1 - i, ri = r.getRank() - 1 - i;
    int64_t a = li >= 0 ? l.getDimSize(li) : 1;
    int64_t b = ri >= 0 ? r.getDimSize(ri) : 1;
    int64_t &out = shape[rank - 1 - i];
    if (a == b)
      out = a;
    else if (a == 1)
      out = b;
    else if (b == 1)
      out = a;
    // An unknown dim broadcast against a known N > 1 must be 1 or N: either way the result is N.
    else if (ShapedType::isDynamic(a))
      out = b;
    else if (ShapedType::isDynamic(b))
      out = a;
    else
      return emitError() << "operands are not broadcast-compatible: " << lhs << " and " << rhs << " (dimension " << a
                         << " vs " << b << ")";
  }
  return ranked(shape, lhs);
}

FailureOr<TensorType> inferSameShapeType(Type input, int64_t minRank, EmitErrorFn emitError) {
  auto in = dyn_cast<RankedTensorType>(input);
  if (!in) return unranked(input);
  if (failed(checkRank(in, minRank, "input", emitError))) return failure();
  return ranked(in.getShape(), input);
}

FailureOr<TensorType> inferTransposeType(Type input, EmitErrorFn emitError) {
  auto in = dyn_cast<RankedTensorType>(input);
  if (!in) return unranked(input);
  if (failed(checkRank(in, 2, "input", emitError))) return failure();
  SmallVector<int64_t> shape(in.getShape());
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  return ranked(shape, input);
}

FailureOr<TensorType> inferMatmulType(Type lhs, Type rhs, EmitErrorFn emitError) {
  auto l = dyn_cast<RankedTensorType>(lhs);
  auto r = dyn_cast<RankedTensorType>(rhs);
  if (!l || !r) return unranked(lhs);
  if (failed(checkRank(l, 2, "lhs", emitError)) || failed(checkRank(r, 2, "rhs", emitError))) return failure();
  int64_t k1 = l.getDimSize(l.getRank() - 1), k2 = r.getDimSize(r.getRank() - 2);
  if (!dimsCompatible(k1, k2))
    return emitError() << "contraction dimensions do not match: lhs " << lhs << " has " << k1 << " columns but rhs "
                       << rhs << " has " << k2 << " rows";
  ArrayRef<int64_t> lBatch = l.getShape().drop_back(2), rBatch = r.getShape().drop_back(2);
  SmallVector<int64_t> shape(lBatch);
  if (r.getRank() != 2) {
    bool same = lBatch.size() == rBatch.size() && llvm::all_of(llvm::zip(lBatch, rBatch), [](auto p) {
                  return dimsCompatible(std::get<0>(p), std::get<1>(p));
                });
    if (!same)
      return emitError() << "batch dimensions do not match: lhs " << lhs << ", rhs " << rhs
                         << " (rhs must be rank 2 or have the same leading dimensions as lhs)";
    for (auto [i, d] : llvm::enumerate(rBatch))
      if (ShapedType::isDynamic(shape[i])) shape[i] = d;
  }
  shape.push_back(l.getDimSize(l.getRank() - 2));
  shape.push_back(r.getDimSize(r.getRank() - 1));
  return ranked(shape, lhs);
}

FailureOr<TensorType> inferLayerNormType(Type input, Type weight, Type bias, EmitErrorFn emitError) {
  auto in = dyn_cast<RankedTensorType>(input);
  if (!in) return unranked(input);
  if (failed(checkRank(in, 1, "input", emitError))) return failure();
  int64_t features = in.getShape().back();
  for (auto [name, type] : {std::pair<StringRef, Type>{"weight", weight}, {"bias", bias}}) {
    auto t = dyn_cast<RankedTensorType>(type);
    if (t && (t.getRank() != 1 || !dimsCompatible(t.getDimSize(0), features)))
      return emitError() << name << " " << type << " must be a rank-1 tensor of size " << features
                         << ", the last dimension of input " << input;
  }
  return ranked(in.getShape(), input);
}

FailureOr<TensorType> inferRmsNormType(Type input, Type weight, EmitErrorFn emitError) {
  auto in = dyn_cast<RankedTensorType>(input);
  if (!in) return unranked(input);
  if (failed(checkRank(in, 1, "input", emitError))) return failure();
  int64_t features = in.getShape().back();
  auto w = dyn_cast<RankedTensorType>(weight);
  if (w && (w.getRank() != 1 || !dimsCompatible(w.getDimSize(0), features)))
    return emitError() << "weight " << weight << " must be a rank-1 tensor of size " << features
                       << ", the last dimension of input " << input;
  return ranked(in.getShape(), input);
}

FailureOr<TensorType> inferSameShapesType(Type lhs, Type rhs, EmitErrorFn emitError) {
  auto l = dyn_cast<RankedTensorType>(lhs);
  auto r = dyn_cast<RankedTensorType>(rhs);
  if (!l && !r) return unranked(lhs);
  if (!l || !r) return ranked((l ? l : r).getShape(), lhs);
  bool same = l.getRank() == r.getRank() && llvm::all_of(llvm::zip(l.getShape(), r.getShape()), [](auto p) {
                return dimsCompatible(std::get<0>(p), std::get<1>(p));
              });
  if (!same) return emitError() << "operands must have the same shape, got " << lhs << " and " << rhs;
  SmallVector<int64_t> shape(l.getShape());
  for (auto [i, d] : llvm::enumerate(r.getShape()))
    if (ShapedType::isDynamic(shape[i])) shape[i] = d;
  return ranked(shape, lhs);
}

FailureOr<TensorType> inferEmbeddingType(Type table, Type ids, EmitErrorFn emitError) {
  auto t = dyn_cast<RankedTensorType>(table);
  auto i = dyn_cast<RankedTensorType>(ids);
  if (t && t.getRank() != 2) return emitError() << "table must be a rank-2 [vocab, features] tensor, got " << table;
  if (i && i.getRank() != 1) return emitError() << "ids must be a rank-1 tensor, got " << ids;
  if (!t || !i) return unranked(table);
  return ranked({i.getDimSize(0), t.getDimSize(1)}, table);
}

FailureOr<TensorType> inferPackedEmbeddingType(Type codes, Type scales, Type ids, const gpt::WeightFormatTraits &format,
                                               EmitErrorFn emitError) {
  if (format.format != gpt::WeightFormat::Q8_0 && format.format != gpt::WeightFormat::Q6_K)
    return emitError() << "reads tables in q8_0 or q6_k (an LM head's formats), got " << format.name;
  auto c = dyn_cast<RankedTensorType>(codes);
  auto s = dyn_cast<RankedTensorType>(scales);
  auto i = dyn_cast<RankedTensorType>(ids);
  if (c && c.getRank() != 3)
    return emitError() << "codes must be a rank-3 [V / P, D * " << format.codeBits() << " / 32, P] tensor, got "
                       << codes;
  if (s && s.getRank() != 3)
    return emitError() << "scales must be a rank-3 [V / P, D / " << format.blockValues << " * "
                       << format.scaleRowsPerBlock() << ", P] tensor, got " << scales;
  if (i && i.getRank() != 1) return emitError() << "ids must be a rank-1 tensor, got " << ids;
  if (!c || !s || !i) return unranked(codes);
  if (!c.hasStaticShape() || !s.hasStaticShape())
    return emitError() << "codes and scales must have static shapes, got " << codes << " and " << scales;
  if (c.getDimSize(0) != s.getDimSize(0) || c.getDimSize(2) != s.getDimSize(2))
    return emitError() << "codes " << codes << " and scales " << scales << " must have the same panels";
  // D from the lanes: each column's K * codeBits / 32 words.
  FailureOr<int64_t> bits = multiplyDims(c.getDimSize(1), 32);
  if (failed(bits)) return overflowError(emitError, c.getDimSize(1), 32, codes);
  const int64_t features = *bits / format.codeBits();
  if (*bits % format.codeBits() != 0 || features % format.blockValues != 0)
    return emitError() << format.name << " codes " << codes << " must hold whole blocks of " << format.blockValues
                       << " features per column";
  const int64_t scaleRows = features / format.blockValues * format.scaleRowsPerBlock();
  if (s.getDimSize(1) != scaleRows)
    return emitError() << "codes " << codes << " give D = " << features << ", so the " << format.name << " scales need "
                       << scaleRows << " rows, got " << scales;
  return ranked({i.getDimSize(0), features}, codes);
}

FailureOr<TensorType> inferSliceType(Type input, int64_t offset, int64_t size, EmitErrorFn emitError) {
  if (offset < 0 || size <= 0)
    return emitError() << "needs offset >= 0 and size > 0, got offset " << offset << " and size " << size;
  auto in = dyn_cast<RankedTensorType>(input);
  if (!in) return unranked(input);
  if (failed(checkRank(in, 1, "input", emitError))) return failure();
  int64_t last = in.getShape().back();
  // `offset > last - size`, not `offset + size > last`: the sum of two large attributes overflows.
  if (!ShapedType::isDynamic(last) && (size > last || offset > last - size)) {
    InFlightDiagnostic error = emitError() << "slice [" << offset << ", ";
    int64_t end;
    if (llvm::AddOverflow(offset, size, end))
      error << offset << " + " << size;
    else
      error << end;
    return error << ") does not fit in the last dimension (" << last << ") of " << input;
  }
  SmallVector<int64_t> shape(in.getShape());
  shape.back() = size;
  return ranked(shape, input);
}

FailureOr<TensorType> inferSplitHeadsType(Type input, int64_t numHeads, bool tokenMajor, EmitErrorFn emitError) {
  if (numHeads <= 0) return emitError() << "num_heads must be positive, got " << numHeads;
  auto in = dyn_cast<RankedTensorType>(input);
  if (!in) return unranked(input);
  if (in.getRank() != 2) return emitError() << "input must be a rank-2 [tokens, features] tensor, got " << input;
  int64_t features = in.getDimSize(1);
  if (!ShapedType::isDynamic(features) && features % numHeads != 0)
    return emitError() << "features (" << features << ") of " << input << " do not divide into " << numHeads
                       << " heads";
  int64_t headDim = ShapedType::isDynamic(features) ? ShapedType::kDynamic : features / numHeads;
  if (tokenMajor) return ranked({in.getDimSize(0), numHeads, headDim}, input);
  return ranked({numHeads, in.getDimSize(0), headDim}, input);
}

FailureOr<TensorType> inferMergeHeadsType(Type input, bool tokenMajor, EmitErrorFn emitError) {
  auto in = dyn_cast<RankedTensorType>(input);
  if (!in) return unranked(input);
  if (in.getRank() != 3)
    return emitError() << "input must be a rank-3 " << layoutName(tokenMajor) << " tensor, got " << input;
  int64_t tokens = in.getDimSize(tokenMajor ? 0 : 1), heads = in.getDimSize(tokenMajor ? 1 : 0);
  int64_t headDim = in.getDimSize(2);
  FailureOr<int64_t> features = multiplyDims(heads, headDim);
  if (failed(features)) return overflowError(emitError, heads, headDim, input);
  return ranked({tokens, *features}, input);
}

FailureOr<TensorType> inferRopeType(Type input, Type positions, EmitErrorFn emitError) {
  auto in = dyn_cast<RankedTensorType>(input);
  auto pos = dyn_cast<RankedTensorType>(positions);
  if (pos && pos.getRank() != 1) return emitError() << "positions must be a rank-1 tensor, got " << positions;
  if (!in) return unranked(input);
  if (in.getRank() != 3) return emitError() << "input must be a rank-3 [heads, tokens, head_dim] tensor, got " << input;
  int64_t headDim = in.getDimSize(2);
  if (!ShapedType::isDynamic(headDim) && headDim % 2 != 0)
    return emitError() << "head_dim must be even to rotate halves, got " << input;
  if (pos && !dimsCompatible(pos.getDimSize(0), in.getDimSize(1)))
    return emitError() << "positions " << positions << " must have one entry per token of " << input;
  return ranked(in.getShape(), input);
}

FailureOr<TensorType> inferAttentionType(Type query, Type key, Type value, AttentionLayout layout,
                                         EmitErrorFn emitError) {
  auto q = dyn_cast<RankedTensorType>(query);
  auto k = dyn_cast<RankedTensorType>(key);
  auto v = dyn_cast<RankedTensorType>(value);
  // A token-major operand is named so in errors, and checked in the head-major order [H, T, d].
  auto describe = [](StringRef operand, bool tokenMajor) {
    return tokenMajor ? ("token-major " + operand).str() : operand.str();
  };
  std::string qName = describe("query", layout.query), kName = describe("key", layout.key),
              vName = describe("value", layout.value);
  for (auto [name, t, type, tokenMajor] :
       {std::tuple<StringRef, RankedTensorType, Type, bool>{qName, q, query, layout.query},
        {kName, k, key, layout.key},
        {vName, v, value, layout.value}})
    if (t && t.getRank() != 3)
      return emitError() << name << " must be a rank-3 " << layoutName(tokenMajor) << " tensor, got " << type;
  if (!q || !k || !v) return unranked(query);
  FailureOr<RankedTensorType> kValues = valuesView(kName, k, emitError), vValues = valuesView(vName, v, emitError);
  if (failed(kValues) || failed(vValues)) return failure();
  k = *kValues;
  v = *vValues;
  if (layout.query) q = cast<RankedTensorType>(swapHeadsAndTokens(q));
  if (layout.key) k = cast<RankedTensorType>(swapHeadsAndTokens(k));
  if (layout.value) v = cast<RankedTensorType>(swapHeadsAndTokens(v));
  if (!dimsCompatible(k.getDimSize(0), v.getDimSize(0)))
    return emitError() << kName << " " << key << " and " << vName << " " << value
                       << " must have the same number of heads";
  // Grouped-query attention: each key/value head serves H / Hkv query heads.
  int64_t queryHeads = q.getDimSize(0), keyHeads = k.getDimSize(0);
  if (!ShapedType::isDynamic(queryHeads) && !ShapedType::isDynamic(keyHeads) && keyHeads > 0 &&
      queryHeads % keyHeads != 0)
    return emitError() << qName << " " << query << " has " << queryHeads << " heads, which the " << keyHeads
                       << " heads of " << kName << " " << key << " do not divide (each key/value head serves "
                       << "query_heads / key_heads query heads)";
  if (!dimsCompatible(q.getDimSize(2), k.getDimSize(2)))
    return emitError() << qName << " " << query << " and " << kName << " " << key << " must have the same head_dim";
  if (!dimsCompatible(k.getDimSize(1), v.getDimSize(1)))
    return emitError() << kName << " " << key << " and " << vName << " " << value
                       << " must have the same number of tokens";
  // A softmax over no keys has no value, and an attention over no heads, queries or features
  // has nothing to compute: say so instead of lowering a loop nest over nothing.
  for (auto [name, t, type] :
       {std::tuple<StringRef, RankedTensorType, Type>{qName, q, query}, {kName, k, key}, {vName, v, value}})
    if (llvm::is_contained(t.getShape(), 0))
      return emitError() << name << " " << type << " has a zero-sized dimension; attention needs at least one head, "
                         << "token and feature";
  TensorType result = ranked({q.getDimSize(0), q.getDimSize(1), v.getDimSize(2)}, query);
  return layout.result ? cast<TensorType>(swapHeadsAndTokens(result)) : result;
}

Type swapHeadsAndTokens(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || t.getRank() < 2) return type;
  SmallVector<int64_t> shape(t.getShape());
  std::swap(shape[0], shape[1]);
  return t.clone(shape);
}

FailureOr<TensorType> inferCacheUpdateType(Type update, Type cache, EmitErrorFn emitError) {
  auto u = dyn_cast<RankedTensorType>(update);
  auto c = dyn_cast<RankedTensorType>(cache);
  for (auto [name, t, type] : {std::tuple<StringRef, RankedTensorType, Type>{"update", u, update}, {"cache", c, cache}})
    if (t && t.getRank() != 3)
      return emitError() << name << " must be a rank-3 [heads, tokens, head_dim] tensor, got " << type;
  if (!u || !c) return likeCache(std::nullopt, cache);
  FailureOr<RankedTensorType> values = valuesView("cache", c, emitError);
  if (failed(values)) return failure();
  if (!dimsCompatible(u.getDimSize(0), c.getDimSize(0)) || !dimsCompatible(u.getDimSize(2), values->getDimSize(2)))
    return emitError() << "update " << update << " and cache " << cache << " must agree on heads and head_dim";
  if (!ShapedType::isDynamic(u.getDimSize(1)) && !ShapedType::isDynamic(c.getDimSize(1)) &&
      u.getDimSize(1) > c.getDimSize(1))
    return emitError() << "update " << update << " has more tokens than cache " << cache << " can hold";
  return likeCache(c.getShape(), cache);
}

namespace {
/// `type` when it is a ranked tensor of `rank`, null when unranked; an error naming `name` and
/// `shape` (the dims it must have) for any other rank.
FailureOr<RankedTensorType> rankedOf(StringRef name, Type type, int64_t rank, StringRef shape, EmitErrorFn emitError) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (t && t.getRank() != rank)
    return emitError() << name << " must be a rank-" << rank << " " << shape << " tensor, got " << type;
  return t;
}
} // namespace

FailureOr<TensorType> inferPagedCacheWriteType(Type update, Type pool, Type slots, EmitErrorFn emitError) {
  FailureOr<RankedTensorType> u = rankedOf("update", update, 3, "[heads, tokens, head_dim]", emitError);
  FailureOr<RankedTensorType> p = rankedOf("pool", pool, 4, "[blocks, heads, block_size, head_dim]", emitError);
  FailureOr<RankedTensorType> s = rankedOf("slots", slots, 1, "[tokens]", emitError);
  if (failed(u) || failed(p) || failed(s)) return failure();
  if (!*u || !*p) return likeCache(std::nullopt, pool);
  FailureOr<RankedTensorType> values = valuesView("pool", *p, emitError);
  if (failed(values)) return failure();
  if (!dimsCompatible(u->getDimSize(0), p->getDimSize(1)) || !dimsCompatible(u->getDimSize(2), values->getDimSize(3)))
    return emitError() << "update " << update << " and pool " << pool << " must agree on heads and head_dim";
  if (*s && !dimsCompatible(s->getDimSize(0), u->getDimSize(1)))
    return emitError() << "slots " << slots << " must give one slot per token of update " << update;
  return likeCache(p->getShape(), pool);
}

FailureOr<TensorType> inferPagedAttentionType(Type query, Type keyPool, Type valuePool, Type blockTables,
                                              Type sequences, Type positions, EmitErrorFn emitError) {
  FailureOr<RankedTensorType> q = rankedOf("query", query, 3, "[heads, tokens, head_dim]", emitError);
  FailureOr<RankedTensorType> k = rankedOf("key pool", keyPool, 4, "[blocks, heads, block_size, head_dim]", emitError);
  FailureOr<RankedTensorType> v =
      rankedOf("value pool", valuePool, 4, "[blocks, heads, block_size, head_dim]", emitError);
  FailureOr<RankedTensorType> t = rankedOf("block_tables", blockTables, 2, "[sequences, blocks]", emitError);
  FailureOr<RankedTensorType> s = rankedOf("sequences", sequences, 1, "[tokens]", emitError);
  FailureOr<RankedTensorType> p = rankedOf("positions", positions, 1, "[tokens]", emitError);
  if (failed(q) || failed(k) || failed(v) || failed(t) || failed(s) || failed(p)) return failure();
  if (!*q) return unranked(query);
  if (*k && *v && k->getShape() != v->getShape())
    return emitError() << "key pool " << keyPool << " and value pool " << valuePool << " must have the same shape";
  FailureOr<RankedTensorType> keyValues = valuesView("key pool", *k, emitError);
  if (failed(keyValues)) return failure();
  if (*k && !dimsCompatible(q->getDimSize(2), (*keyValues).getDimSize(3)))
    return emitError() << "query " << query << " and key pool " << keyPool << " must agree on head_dim";
  // Grouped-query attention: the pools hold Hkv heads, each serving H / Hkv query heads.
  if (*k && !ShapedType::isDynamic(q->getDimSize(0)) && !ShapedType::isDynamic(k->getDimSize(1)) &&
      k->getDimSize(1) > 0 && q->getDimSize(0) % k->getDimSize(1) != 0)
    return emitError() << "query " << query << " has " << q->getDimSize(0) << " heads, which the " << k->getDimSize(1)
                       << " heads of key pool " << keyPool << " do not divide";
  for (auto [name, index, type] :
       {std::tuple<StringRef, RankedTensorType, Type>{"sequences", *s, sequences}, {"positions", *p, positions}})
    if (index && !dimsCompatible(index.getDimSize(0), q->getDimSize(1)))
      return emitError() << name << " " << type << " must give one entry per token of query " << query;
  if (llvm::is_contained(q->getShape(), 0))
    return emitError() << "query " << query << " has a zero-sized dimension; attention needs a head, token and feature";
  return ranked(q->getShape(), query);
}

LogicalResult verifyCompatibleResult(Type declared, TensorType inferred, EmitErrorFn emitError) {
  // A KV cache's write returns the cache's format: a result of another element type would
  // reinterpret its bits.
  auto declaredTensor = dyn_cast<TensorType>(declared);
  if (declaredTensor && declaredTensor.getElementType() != inferred.getElementType())
    return emitError() << "result type " << declared << " does not have the element type " << inferred.getElementType()
                       << " implied by the operands";
  auto d = dyn_cast<RankedTensorType>(declared);
  auto i = dyn_cast<RankedTensorType>(inferred);
  if (!d || !i) return success();
  bool ok = d.getRank() == i.getRank() && llvm::all_of(llvm::zip(d.getShape(), i.getShape()), [](auto p) {
              return dimsCompatible(std::get<0>(p), std::get<1>(p));
            });
  if (ok) return success();
  return emitError() << "result type " << declared << " does not match the type " << inferred
                     << " implied by the operands";
}

FailureOr<TensorType> inferPermuteType(Type input, ArrayRef<int64_t> permutation, EmitErrorFn emitError) {
  auto in = dyn_cast<RankedTensorType>(input);
  if (!in) return unranked(input);
  int64_t rank = in.getRank();
  SmallVector<bool> seen(rank, false);
  if (int64_t(permutation.size()) != rank)
    return emitError() << "permutation has " << permutation.size() << " entries for the rank-" << rank << " input "
                       << input;
  SmallVector<int64_t> shape;
  for (int64_t p : permutation) {
    if (p < 0 || p >= rank || seen[p])
      return emitError() << "permutation must list each of 0 .. " << rank - 1 << " once, got " << p
                         << (p >= 0 && p < rank ? " twice" : " (out of range)");
    seen[p] = true;
    shape.push_back(in.getDimSize(p));
  }
  return ranked(shape, input);
}

FailureOr<TensorType> inferConcatType(TypeRange inputs, int64_t dim, EmitErrorFn emitError) {
  if (inputs.empty()) return emitError() << "needs at least one input";
  SmallVector<int64_t> shape;
  for (Type input : inputs) {
    auto type = dyn_cast<RankedTensorType>(input);
    if (!type) return unranked(input);
    if (shape.empty()) {
      if (dim < 0 || dim >= type.getRank())
        return emitError() << "dim " << dim << " is out of range for the rank-" << type.getRank() << " input " << input;
      shape.assign(type.getShape().begin(), type.getShape().end());
      continue;
    }
    if (type.getRank() != int64_t(shape.size()))
      return emitError() << "inputs must have one rank: " << input << " is not of rank " << shape.size();
    for (int64_t i = 0; i < type.getRank(); ++i) {
      int64_t size = type.getDimSize(i);
      if (i == dim)
        shape[i] =
            ShapedType::isDynamic(shape[i]) || ShapedType::isDynamic(size) ? ShapedType::kDynamic : shape[i] + size;
      else if (!ShapedType::isDynamic(size) && !ShapedType::isDynamic(shape[i]) && size != shape[i])
        return emitError() << "inputs must agree on every dimension but " << dim << ": " << input << " has " << size
                           << " in dimension " << i << ", the first input " << shape[i];
    }
  }
  return ranked(shape, inputs.front());
}

FailureOr<TensorType> inferMeanType(Type input, EmitErrorFn emitError) {
  auto in = dyn_cast<RankedTensorType>(input);
  if (!in) return unranked(input);
  if (failed(checkRank(in, 1, "input", emitError))) return failure();
  SmallVector<int64_t> shape(in.getShape());
  shape.back() = 1;
  return ranked(shape, input);
}

} // namespace mlir::transformer
