// Recovery of transformer.causal_attention from its written-out form (see RecoverWrittenOutOps.h).
#include "cc/dialect/RecoverWrittenOutOps.h"

#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/PatternMatch.h"

#include <cmath>
#include <optional>
#include <vector>

namespace mlir::transformer {
namespace {

/// Masks past this many bits are not analysed (the tile classifier refuses them too).
constexpr int64_t kMaxMaskBits = int64_t(1) << 26;

/// The value of a splat f32 transformer.constant (any shape), or none.
std::optional<double> splatValue(Value value) {
  auto constant = value.getDefiningOp<ConstantOp>();
  if (!constant || !constant.getValue().isSplat()) return std::nullopt;
  return constant.getValue().getSplatValue<APFloat>().convertToDouble();
}

/// Whether `value` masks a score out of a softmax: a splat of -inf or of a huge negative number
/// (HF's finfo(float32).min), whose exponential is 0 next to any kept score.
bool isMaskingFill(Value value) {
  std::optional<double> fill = splatValue(value);
  return fill && *fill <= -1e30;
}

/// The dimension (0: row, 1: column) whose index a 2-D `tensor.generate` yields, or none.
std::optional<unsigned> iotaDimension(Value value) {
  auto generate = value.getDefiningOp<tensor::GenerateOp>();
  if (!generate || generate.getType().getRank() != 2) return std::nullopt;
  Block &body = generate.getBody().front();
  auto yielded = dyn_cast<BlockArgument>(cast<tensor::YieldOp>(body.getTerminator()).getValue());
  if (!yielded || yielded.getOwner() != &body) return std::nullopt;
  return yielded.getArgNumber();
}

/// The bits of an i1 [queries, keys] mask known at compile time, row-major: an `arith.constant`,
/// or an `arith.cmpi` of row and column indices (evaluated here), or none.
std::optional<std::vector<bool>> maskBits(Value mask, int64_t queries, int64_t keys) {
  auto type = dyn_cast<RankedTensorType>(mask.getType());
  if (!type || type.getShape() != ArrayRef<int64_t>{queries, keys} || queries * keys > kMaxMaskBits)
    return std::nullopt;
  std::vector<bool> bits(queries * keys);
  if (auto constant = mask.getDefiningOp<arith::ConstantOp>()) {
    auto values = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (!values) return std::nullopt;
    int64_t i = 0;
    for (bool bit : values.getValues<bool>()) bits[i++] = bit;
    return bits;
  }
  auto compare = mask.getDefiningOp<arith::CmpIOp>();
  if (!compare) return std::nullopt;
  std::optional<unsigned> lhs = iotaDimension(compare.getLhs()), rhs = iotaDimension(compare.getRhs());
  if (!lhs || !rhs) return std::nullopt;
  for (int64_t i = 0; i < queries; ++i)
    for (int64_t j = 0; j < keys; ++j) {
      APInt index[2] = {APInt(64, i), APInt(64, j)};
      bits[i * keys + j] = arith::applyCmpPredicate(compare.getPredicate(), index[*lhs], index[*rhs]);
    }
  return bits;
}

bool isCausal(const std::vector<bool> &keep, int64_t queries, int64_t keys) {
  if (queries != keys) return false;
  for (int64_t i = 0; i < queries; ++i)
    for (int64_t j = 0; j < keys; ++j)
      if (keep[i * keys + j] != (j <= i)) return false;
  return true;
}

bool everyRowKeepsAKey(const std::vector<bool> &keep, int64_t queries, int64_t keys) {
  for (int64_t i = 0; i < queries; ++i) {
    bool any = false;
    for (int64_t j = 0; j < keys && !any; ++j) any = keep[i * keys + j];
    if (!any) return false;
  }
  return true;
}

/// A static type of rank >= 3 ([..., T, d]), or null.
RankedTensorType attentionOperandType(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.getRank() >= 3 && type.hasStaticShape() ? type : RankedTensorType();
}

/// The scale of `scores` when it is a product with a splat (either side), which is then peeled off
/// `scores`; 1 when it is none.
double peelScale(Value &scores) {
  auto mul = scores.getDefiningOp<MulOp>();
  if (!mul) return 1.0;
  for (auto [factor, product] : {std::pair(mul.getRhs(), mul.getLhs()), std::pair(mul.getLhs(), mul.getRhs())}) {
    std::optional<double> value = splatValue(factor);
    if (value && product.getType() == mul.getType()) {
      scores = product;
      return *value;
    }
  }
  return 1.0;
}

/// Whether q, k and v are static [..., Tq, d], [..., Tk, d] and [..., Tk, dv] with the same leading dims.
bool attentionShapesAgree(RankedTensorType q, RankedTensorType k, RankedTensorType v) {
  if (!q || !k || !v || q.getRank() != k.getRank() || k.getRank() != v.getRank()) return false;
  return q.getShape().drop_back(2) == k.getShape().drop_back(2) &&
         k.getShape().drop_back(2) == v.getShape().drop_back(2) && q.getShape().back() == k.getShape().back() &&
         k.getShape().end()[-2] == v.getShape().end()[-2];
}

// softmax(where(keep, scale * q @ k^T, -inf)) @ v = causal_attention(q, k, v) {scale}, masked by keep
struct RecoverCausalAttention : OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatmulOp op, PatternRewriter &rewriter) const override {
    auto softmax = op.getLhs().getDefiningOp<SoftmaxOp>();
    auto where = softmax ? softmax.getInput().getDefiningOp<WhereOp>() : WhereOp();
    if (!where) return rewriter.notifyMatchFailure(op, "not softmax(where(...)) @ v");
    // where(c, scores, fill) keeps where c holds; where(c, fill, scores) (masked_fill) where it does not.
    bool keepWhereTrue = isMaskingFill(where.getFalseValue());
    if (!keepWhereTrue && !isMaskingFill(where.getTrueValue()))
      return rewriter.notifyMatchFailure(op, "neither value of the where is a -inf (or finfo.min) fill");
    Value scores = keepWhereTrue ? where.getTrueValue() : where.getFalseValue();
    if (scores.getType() != where.getType()) return rewriter.notifyMatchFailure(op, "the where broadcasts the scores");

    double scale = peelScale(scores);
    if (!(scale > 0.0) || !std::isfinite(scale))
      return rewriter.notifyMatchFailure(op, "the scale is not a positive finite splat");
    auto product = scores.getDefiningOp<MatmulOp>();
    auto transpose = product ? product.getRhs().getDefiningOp<TransposeOp>() : TransposeOp();
    if (!transpose) return rewriter.notifyMatchFailure(op, "the scores are not q @ transpose(k)");
    Value query = product.getLhs(), key = transpose.getInput(), value = op.getRhs();
    RankedTensorType q = attentionOperandType(query), k = attentionOperandType(key), v = attentionOperandType(value);
    if (!attentionShapesAgree(q, k, v))
      return rewriter.notifyMatchFailure(op, "q, k, v are not static [..., Tq, d], [..., Tk, d], [..., Tk, dv]");
    int64_t rank = q.getRank(), queries = q.getShape().end()[-2], keys = k.getShape().end()[-2];

    std::optional<std::vector<bool>> bits = maskBits(where.getCondition(), queries, keys);
    if (!bits) return rewriter.notifyMatchFailure(op, "the mask is not a constant or index comparison [Tq, Tk]");
    std::vector<bool> keep = std::move(*bits);
    if (!keepWhereTrue) keep.flip();
    if (!everyRowKeepsAKey(keep, queries, keys))
      return rewriter.notifyMatchFailure(op, "a query row keeps no key (softmax of nothing)");

    // The causal rule needs no mask; any other pattern of keys becomes the mask operand.
    Value mask;
    if (!isCausal(keep, queries, keys)) {
      auto maskType = RankedTensorType::get({queries, keys}, rewriter.getI1Type());
      SmallVector<bool> maskValues(keep.begin(), keep.end());
      mask = rewriter.create<arith::ConstantOp>(op.getLoc(), DenseElementsAttr::get(maskType, ArrayRef(maskValues)));
    }
    // Attention runs over [H, T, d]: leading dims (a batch, then the heads) are collapsed into one.
    int64_t heads = 1;
    for (int64_t size : q.getShape().drop_back(2)) heads *= size;
    auto asHeads = [&](Value x, RankedTensorType type) -> Value {
      if (rank == 3) return x;
      auto collapsed =
          RankedTensorType::get({heads, type.getShape().end()[-2], type.getShape().back()}, type.getElementType());
      return rewriter.create<ReshapeOp>(op.getLoc(), collapsed, x);
    };
    Value q3 = asHeads(query, q), k3 = asHeads(key, k), v3 = asHeads(value, v);
    Type attentionType =
        rank == 3 ? op.getType() : RankedTensorType::get({heads, queries, v.getShape().back()}, v.getElementType());
    Value attention = rewriter.create<CausalAttentionOp>(
        op.getLoc(), attentionType, q3, k3, v3, /*query_offset=*/Value(), mask, rewriter.getF32FloatAttr(scale),
        nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    if (rank != 3) attention = rewriter.create<ReshapeOp>(op.getLoc(), op.getType(), attention);
    rewriter.replaceOp(op, attention);
    return success();
  }
};

/// The [Hkv, T, d] tensor whose heads `value` repeats n times each, as HF's repeat_kv is imported
/// (reshape to [Hkv, 1, T, d], broadcast to [Hkv, n, T, d], reshape to [Hkv * n, T, d]); or null.
Value repeatedHeadsSource(Value value) {
  auto merged = value.getDefiningOp<ReshapeOp>();
  auto broadcast = merged ? merged.getInput().getDefiningOp<BroadcastOp>() : BroadcastOp();
  auto split = broadcast ? broadcast.getInput().getDefiningOp<ReshapeOp>() : ReshapeOp();
  if (!split) return {};
  auto source = dyn_cast<RankedTensorType>(split.getInput().getType());
  auto single = dyn_cast<RankedTensorType>(split.getType());
  auto repeated = dyn_cast<RankedTensorType>(broadcast.getType());
  auto result = dyn_cast<RankedTensorType>(value.getType());
  if (!source || !single || !repeated || !result || source.getRank() != 3 || repeated.getRank() != 4) return {};
  int64_t heads = source.getDimSize(0), tokens = source.getDimSize(1), size = source.getDimSize(2);
  int64_t copies = repeated.getDimSize(1);
  if (single.getShape() != ArrayRef<int64_t>{heads, 1, tokens, size} ||
      repeated.getShape() != ArrayRef<int64_t>{heads, copies, tokens, size} ||
      result.getShape() != ArrayRef<int64_t>{heads * copies, tokens, size})
    return {};
  return split.getInput();
}

// causal_attention(q, repeat_heads(k, n), repeat_heads(v, n)) = causal_attention(q, k, v): with
// Hkv = H / n key/value heads, query head h reads head h / n, the copy it read before.
struct FoldRepeatedKeyValueHeads : OpRewritePattern<CausalAttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(CausalAttentionOp op, PatternRewriter &rewriter) const override {
    if (op.getKeyTokenMajor() || op.getValueTokenMajor())
      return rewriter.notifyMatchFailure(op, "token-major keys or values");
    Value key = repeatedHeadsSource(op.getKey()), value = repeatedHeadsSource(op.getValue());
    if (!key || !value ||
        cast<RankedTensorType>(key.getType()).getDimSize(0) != cast<RankedTensorType>(value.getType()).getDimSize(0))
      return rewriter.notifyMatchFailure(op, "keys and values are not both repeated heads");
    rewriter.modifyOpInPlace(op, [&] {
      op.getKeyMutable().assign(key);
      op.getValueMutable().assign(value);
    });
    return success();
  }
};

} // namespace

void populateRecoverAttentionPatterns(RewritePatternSet &patterns) {
  patterns.add<RecoverCausalAttention>(patterns.getContext());
}

void populateFoldRepeatedHeadsPatterns(RewritePatternSet &patterns) {
  patterns.add<FoldRepeatedKeyValueHeads>(patterns.getContext());
}

} // namespace mlir::transformer
