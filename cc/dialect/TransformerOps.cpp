// Verifiers, shape inference and canonicalization hooks of the `transformer` ops.
#include "cc/dialect/AttentionTiles.h"
#include "cc/dialect/ConstantFolding.h"
#include "cc/dialect/RecoverWrittenOutOps.h"
#include "cc/dialect/ShapeFunctions.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"

#include <cmath>
#include <functional>

using namespace mlir;
using namespace mlir::transformer;

#include "cc/dialect/ShapeInferenceInterface.cpp.inc"

namespace {
#include "cc/dialect/TransformerCanonicalize.inc"

/// The verifier of a single-result op: the operand shapes must be valid (`inferred` succeeded)
/// and agree with the declared result type.
LogicalResult verifyInferred(Operation *op, FailureOr<TensorType> inferred) {
  if (failed(inferred)) return failure();
  return verifyCompatibleResult(op->getResult(0).getType(), *inferred, [op] { return op->emitOpError(); });
}

/// Shape inference of a single-result op: an unranked result takes the inferred type; a ranked
/// result is kept, after checking that it does not contradict the operands.
LogicalResult refineResult(Operation *op, FailureOr<TensorType> inferred) {
  if (failed(inferred)) return failure();
  Value result = op->getResult(0);
  if (!isa<RankedTensorType>(result.getType())) {
    result.setType(*inferred);
    return success();
  }
  return verifyCompatibleResult(result.getType(), *inferred, [op] { return op->emitOpError(); });
}

auto errorOn(Operation *op) {
  return [op] { return op->emitOpError(); };
}

/// The verifier and shape inference of an elementwise unary op (its result has its operand's
/// shape, of rank `minRank` at least; Transformer_UnaryOp in the ODS).
LogicalResult verifySameShape(Operation *op, int64_t minRank) {
  return verifyInferred(op, inferSameShapeType(op->getOperand(0).getType(), minRank, errorOn(op)));
}
LogicalResult refineSameShape(Operation *op, int64_t minRank) {
  return refineResult(op, inferSameShapeType(op->getOperand(0).getType(), minRank, errorOn(op)));
}

/// The verifier and shape inference of a binary op whose operands broadcast
/// (Transformer_BroadcastBinaryOp in the ODS).
LogicalResult verifyBroadcast(Operation *op) {
  return verifyInferred(op, inferBroadcastType(op->getOperand(0).getType(), op->getOperand(1).getType(), errorOn(op)));
}
LogicalResult refineBroadcast(Operation *op) {
  return refineResult(op, inferBroadcastType(op->getOperand(0).getType(), op->getOperand(1).getType(), errorOn(op)));
}

AttentionLayout layout(CausalAttentionOp op) {
  return {op.getQueryTokenMajor(), op.getKeyTokenMajor(), op.getValueTokenMajor(), op.getResultTokenMajor()};
}

} // namespace

//===----------------------------------------------------------------------===//
// ConstantOp
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *, std::optional<Location> location, Adaptor adaptor,
                                           SmallVectorImpl<Type> &inferredReturnTypes) {
  DenseElementsAttr value = adaptor.getValue();
  if (!value) return emitOptionalError(location, "'transformer.constant' requires a `value` attribute");
  inferredReturnTypes.push_back(value.getType());
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

void AddOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<AddZeroRight, AddZeroLeft, FoldAddOfConstants>(context);
}

void MulOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<MulOneRight, MulOneLeft, FoldMulOfConstants, RecoverSwigluRight, RecoverSwigluLeft>(context);
  populateRecoverGeluPatterns(results);
  populateRecoverRmsNormPatterns(results);
}

void NegOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<NegNeg, FoldNegOfConstant>(context);
}

//===----------------------------------------------------------------------===//
// Shape, contraction and normalization ops
//===----------------------------------------------------------------------===//

LogicalResult TransposeOp::verify() {
  return verifyInferred(*this, inferTransposeType(getInput().getType(), errorOn(*this)));
}
LogicalResult TransposeOp::inferShapes() {
  return refineResult(*this, inferTransposeType(getInput().getType(), errorOn(*this)));
}
void TransposeOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<TransposeTranspose, FoldTransposeOfConstant>(context);
}

LogicalResult MatmulOp::verify() {
  return verifyInferred(*this, inferMatmulType(getLhs().getType(), getRhs().getType(), errorOn(*this)));
}
LogicalResult MatmulOp::inferShapes() {
  return refineResult(*this, inferMatmulType(getLhs().getType(), getRhs().getType(), errorOn(*this)));
}
void MatmulOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *) {
  populateRecoverAttentionPatterns(results);
}
namespace {
/// The formats' names as the op's messages list them: "f32, bf16, ... or q6_k".
std::string formatNames() {
  std::vector<std::string> names;
  for (const gpt::WeightFormatTraits &row : gpt::weightFormats()) names.push_back(row.name);
  return gpt::alternatives(names);
}

FailureOr<TensorType> inferPackedMatmul(PackedMatmulOp op) {
  const gpt::WeightFormatTraits *format = gpt::findWeightFormat(op.getFormat().str());
  if (!format) return op.emitOpError() << "has no weight format '" << op.getFormat() << "' (" << formatNames() << ")";
  Type scales = op.getScales() ? op.getScales().getType() : Type();
  return inferPackedMatmulType(op.getLhs().getType(), op.getRhs().getType(), scales, *format, errorOn(op));
}
} // namespace

/// The format as a bare word before the operands (`transformer.packed_matmul q4_k %x, ...`).
static ParseResult parseWeightFormatName(OpAsmParser &parser, StringAttr &format) {
  SMLoc at = parser.getCurrentLocation();
  std::string name;
  if (parser.parseKeywordOrString(&name)) return failure();
  if (!gpt::findWeightFormat(name))
    return parser.emitError(at) << "no weight format '" << name << "' (" << formatNames() << ")";
  format = parser.getBuilder().getStringAttr(name);
  return success();
}
static void printWeightFormatName(OpAsmPrinter &printer, Operation *, StringAttr format) {
  printer.printKeywordOrString(format.getValue());
}

LogicalResult PackedMatmulOp::verify() { return verifyInferred(*this, inferPackedMatmul(*this)); }
LogicalResult PackedMatmulOp::inferShapes() { return refineResult(*this, inferPackedMatmul(*this)); }

const gpt::WeightFormatTraits &PackedMatmulOp::getWeightFormat() { return gpt::parseWeightFormat(getFormat().str()); }

LogicalResult LayerNormOp::verify() {
  float epsilon = getEpsilon().convertToFloat();
  if (!(epsilon > 0.0f) || !std::isfinite(epsilon))
    return emitOpError() << "epsilon must be a positive finite number, got " << getEpsilonAttr();
  return verifyInferred(
      *this, inferLayerNormType(getInput().getType(), getWeight().getType(), getBias().getType(), errorOn(*this)));
}
LogicalResult LayerNormOp::inferShapes() {
  return refineResult(
      *this, inferLayerNormType(getInput().getType(), getWeight().getType(), getBias().getType(), errorOn(*this)));
}

LogicalResult RmsNormOp::verify() {
  float epsilon = getEpsilon().convertToFloat();
  if (!(epsilon > 0.0f) || !std::isfinite(epsilon))
    return emitOpError() << "epsilon must be a positive finite number, got " << getEpsilonAttr();
  return verifyInferred(*this, inferRmsNormType(getInput().getType(), getWeight().getType(), errorOn(*this)));
}
LogicalResult RmsNormOp::inferShapes() {
  return refineResult(*this, inferRmsNormType(getInput().getType(), getWeight().getType(), errorOn(*this)));
}

//===----------------------------------------------------------------------===//
// Model-level ops
//===----------------------------------------------------------------------===//

LogicalResult SwigluOp::verify() {
  return verifyInferred(*this, inferSameShapesType(getGate().getType(), getUp().getType(), errorOn(*this)));
}
LogicalResult SwigluOp::inferShapes() {
  return refineResult(*this, inferSameShapesType(getGate().getType(), getUp().getType(), errorOn(*this)));
}

LogicalResult EmbeddingOp::verify() {
  return verifyInferred(*this, inferEmbeddingType(getTable().getType(), getIds().getType(), errorOn(*this)));
}
LogicalResult EmbeddingOp::inferShapes() {
  return refineResult(*this, inferEmbeddingType(getTable().getType(), getIds().getType(), errorOn(*this)));
}

namespace {
FailureOr<TensorType> inferPackedEmbedding(PackedEmbeddingOp op) {
  const gpt::WeightFormatTraits *format = gpt::findWeightFormat(op.getFormat().str());
  if (!format) return op.emitOpError() << "has no weight format '" << op.getFormat() << "' (" << formatNames() << ")";
  return inferPackedEmbeddingType(op.getCodes().getType(), op.getScales().getType(), op.getIds().getType(), *format,
                                  errorOn(op));
}
} // namespace

LogicalResult PackedEmbeddingOp::verify() { return verifyInferred(*this, inferPackedEmbedding(*this)); }
const gpt::WeightFormatTraits &PackedEmbeddingOp::getWeightFormat() {
  return gpt::parseWeightFormat(getFormat().str());
}
LogicalResult PackedEmbeddingOp::inferShapes() { return refineResult(*this, inferPackedEmbedding(*this)); }

LogicalResult SliceOp::verify() {
  return verifyInferred(*this, inferSliceType(getInput().getType(), getOffset(), getSize(), errorOn(*this)));
}
LogicalResult SliceOp::inferShapes() {
  return refineResult(*this, inferSliceType(getInput().getType(), getOffset(), getSize(), errorOn(*this)));
}

LogicalResult SplitHeadsOp::verify() {
  return verifyInferred(*this,
                        inferSplitHeadsType(getInput().getType(), getNumHeads(), getTokenMajor(), errorOn(*this)));
}
LogicalResult SplitHeadsOp::inferShapes() {
  return refineResult(*this, inferSplitHeadsType(getInput().getType(), getNumHeads(), getTokenMajor(), errorOn(*this)));
}

void SplitHeadsOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<SplitMergeHeads>(context);
}

void MergeHeadsOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<MergeSplitHeads>(context);
}

LogicalResult MergeHeadsOp::verify() {
  return verifyInferred(*this, inferMergeHeadsType(getInput().getType(), getTokenMajor(), errorOn(*this)));
}
LogicalResult MergeHeadsOp::inferShapes() {
  return refineResult(*this, inferMergeHeadsType(getInput().getType(), getTokenMajor(), errorOn(*this)));
}

LogicalResult RopeOp::verify() {
  float base = getBase().convertToFloat();
  if (!(base > 1.0f) || !std::isfinite(base))
    return emitOpError() << "base must be a finite number > 1, got " << getBaseAttr();
  if (std::optional<ArrayRef<float>> scaling = getScaling()) {
    if (scaling->size() != 4)
      return emitOpError() << "scaling must be [factor, low_freq_factor, high_freq_factor, original_max_positions], "
                           << "got " << scaling->size() << " values";
    for (float value : *scaling)
      if (!(value > 0.0f) || !std::isfinite(value))
        return emitOpError() << "scaling values must be positive finite numbers, got " << value;
    if (!((*scaling)[2] > (*scaling)[1]))
      return emitOpError() << "scaling's high_freq_factor (" << (*scaling)[2] << ") must be larger than its "
                           << "low_freq_factor (" << (*scaling)[1] << ")";
  }
  return verifyInferred(*this, inferRopeType(getInput().getType(), getPositions().getType(), errorOn(*this)));
}
SmallVector<double> RopeOp::getFrequencies(int64_t headDim) {
  const int64_t half = headDim / 2;
  const double base = getBase().convertToFloat();
  SmallVector<double> theta;
  for (int64_t i = 0; i < half; ++i) theta.push_back(std::pow(base, -2.0 * double(i) / double(headDim)));
  std::optional<ArrayRef<float>> scaling = getScaling();
  if (!scaling) return theta;
  // transformers' _compute_llama3_parameters, in f64.
  const double factor = (*scaling)[0], low = (*scaling)[1], high = (*scaling)[2], original = (*scaling)[3];
  const double lowWavelength = original / low, highWavelength = original / high;
  for (double &t : theta) {
    double wavelength = 2.0 * M_PI / t;
    if (wavelength > lowWavelength) {
      t /= factor;
    } else if (wavelength >= highWavelength) {
      double smooth = (original / wavelength - low) / (high - low);
      t = (1.0 - smooth) * t / factor + smooth * t;
    }
  }
  return theta;
}

LogicalResult RopeOp::inferShapes() {
  return refineResult(*this, inferRopeType(getInput().getType(), getPositions().getType(), errorOn(*this)));
}

void CausalAttentionOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *) {
  populateFoldRepeatedHeadsPatterns(results);
}

LogicalResult CausalAttentionOp::verify() {
  float scale = getScale().convertToFloat();
  if (!(scale > 0.0f) || !std::isfinite(scale))
    return emitOpError() << "scale must be a positive finite number, got " << getScaleAttr();
  if (std::optional<int64_t> window = getWindow(); window && *window < 1)
    return emitOpError() << "window must be >= 1 (the keys a query sees, its own included), got " << *window;
  if (failed(verifyMaskAndTiles())) return failure();
  return verifyInferred(*this, inferAttentionType(getQuery().getType(), getKey().getType(), getValue().getType(),
                                                  layout(*this), errorOn(*this)));
}
/// The number of tokens of a [H, T, d] operand (token-major: [T, H, d]); dynamic when unranked.
static int64_t attentionTokens(Value operand, bool tokenMajor) {
  auto type = dyn_cast<RankedTensorType>(operand.getType());
  if (!type || type.getRank() != 3) return ShapedType::kDynamic;
  return type.getDimSize(tokenMajor ? 0 : 1);
}

LogicalResult CausalAttentionOp::verifyMaskAndTiles() {
  int64_t queries = attentionTokens(getQuery(), getQueryTokenMajor());
  int64_t keys = attentionTokens(getKey(), getKeyTokenMajor());
  if (Value mask = getMask()) {
    if (getQueryOffset()) return emitOpError() << "a mask operand gives every query's keys itself: it takes no offset";
    if (getWindow()) return emitOpError() << "a mask operand replaces the causal rule and its window: no window";
    auto fits = [](int64_t a, int64_t b) { return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b; };
    auto type = dyn_cast<RankedTensorType>(mask.getType());
    if (type && (type.getRank() != 2 || !fits(type.getDimSize(0), queries) || !fits(type.getDimSize(1), keys)))
      return emitOpError() << "mask " << mask.getType() << " must be [queries, keys] = [" << queries << ", " << keys
                           << "] (i1: key j visible from query i)";
  }
  if (!getMaskExpression().empty()) {
    if (getMask()) return emitOpError() << "takes a mask operand or a mask expression (visible), not both";
    if (getWindow()) return emitOpError() << "a mask expression replaces the causal rule and its window: no window";
  }
  if (bool(getTileSizes()) != bool(getTileClasses()))
    return emitOpError() << "tile_sizes and tile_classes go together (--transformer-classify-attention-tiles)";
  if (getTileClasses() && !ShapedType::isDynamic(queries) && !ShapedType::isDynamic(keys))
    return verifyTileClasses(*this, *getTileSizes(), *getTileClasses(), queries, keys);
  return success();
}

LogicalResult CausalAttentionOp::verifyRegions() {
  Region &expression = getMaskExpression();
  if (expression.empty()) return success();
  if (!expression.hasOneBlock()) return emitOpError() << "the mask expression must be a single block";
  Block &body = expression.front();
  if (body.getNumArguments() != 2 || !llvm::all_of(body.getArgumentTypes(), [](Type t) { return t.isIndex(); }))
    return emitOpError() << "the mask expression takes two index arguments, (query position, key position), got "
                         << body.getNumArguments() << " arguments";
  for (Operation &op : body.without_terminator())
    if (op.getDialect() == nullptr || op.getDialect()->getNamespace() != "arith")
      return op.emitOpError() << "is not allowed in a mask expression: only arith ops (the compiler evaluates it "
                              << "tile by tile)";
  if (!isa<YieldOp>(body.getTerminator()))
    return emitOpError() << "the mask expression must end in transformer.yield of an i1";
  return success();
}

LogicalResult CausalAttentionOp::inferShapes() {
  return refineResult(*this, inferAttentionType(getQuery().getType(), getKey().getType(), getValue().getType(),
                                                layout(*this), errorOn(*this)));
}

LogicalResult CacheUpdateOp::verify() {
  return verifyInferred(*this, inferCacheUpdateType(getUpdate().getType(), getCache().getType(), errorOn(*this)));
}
LogicalResult CacheUpdateOp::inferShapes() {
  return refineResult(*this, inferCacheUpdateType(getUpdate().getType(), getCache().getType(), errorOn(*this)));
}

LogicalResult PagedCacheWriteOp::verify() {
  return verifyInferred(*this, inferPagedCacheWriteType(getUpdate().getType(), getPool().getType(),
                                                        getSlots().getType(), errorOn(*this)));
}
LogicalResult PagedCacheWriteOp::inferShapes() {
  return refineResult(*this, inferPagedCacheWriteType(getUpdate().getType(), getPool().getType(), getSlots().getType(),
                                                      errorOn(*this)));
}

LogicalResult PagedAttentionOp::verify() {
  float scale = getScale().convertToFloat();
  if (!(scale > 0.0f) || !std::isfinite(scale))
    return emitOpError() << "scale must be a positive finite number, got " << getScaleAttr();
  if (std::optional<int64_t> window = getWindow(); window && *window < 1)
    return emitOpError() << "window must be >= 1 (the keys a query sees, its own included), got " << *window;
  return verifyInferred(*this,
                        inferPagedAttentionType(getQuery().getType(), getKeyPool().getType(), getValuePool().getType(),
                                                getBlockTables().getType(), getSequences().getType(),
                                                getPositions().getType(), errorOn(*this)));
}
LogicalResult PagedAttentionOp::inferShapes() {
  return refineResult(*this,
                      inferPagedAttentionType(getQuery().getType(), getKeyPool().getType(), getValuePool().getType(),
                                              getBlockTables().getType(), getSequences().getType(),
                                              getPositions().getType(), errorOn(*this)));
}

//===----------------------------------------------------------------------===//
// Ops of imported PyTorch graphs
//===----------------------------------------------------------------------===//

namespace {
/// The broadcast shape of where's two values, broadcast again with its condition's.
FailureOr<TensorType> inferWhere(WhereOp op) {
  FailureOr<TensorType> values =
      inferBroadcastType(op.getTrueValue().getType(), op.getFalseValue().getType(), errorOn(op));
  if (failed(values)) return failure();
  return inferBroadcastType(*values, op.getCondition().getType(), errorOn(op));
}
} // namespace

LogicalResult WhereOp::verify() { return verifyInferred(*this, inferWhere(*this)); }
LogicalResult WhereOp::inferShapes() { return refineResult(*this, inferWhere(*this)); }

void PowOp::getCanonicalizationPatterns(RewritePatternSet &, MLIRContext *) {}

LogicalResult PermuteOp::verify() {
  return verifyInferred(*this, inferPermuteType(getInput().getType(), getPermutation(), errorOn(*this)));
}
LogicalResult PermuteOp::inferShapes() {
  return refineResult(*this, inferPermuteType(getInput().getType(), getPermutation(), errorOn(*this)));
}

LogicalResult ConcatOp::verify() {
  return verifyInferred(*this, inferConcatType(getInputs().getTypes(), getDim(), errorOn(*this)));
}
LogicalResult ConcatOp::inferShapes() {
  return refineResult(*this, inferConcatType(getInputs().getTypes(), getDim(), errorOn(*this)));
}

LogicalResult MeanOp::verify() { return verifyInferred(*this, inferMeanType(getInput().getType(), errorOn(*this))); }
LogicalResult MeanOp::inferShapes() { return refineResult(*this, inferMeanType(getInput().getType(), errorOn(*this))); }

LogicalResult ReshapeOp::verify() {
  auto in = dyn_cast<RankedTensorType>(getInput().getType());
  auto out = dyn_cast<RankedTensorType>(getType());
  if (!in || !out || !in.hasStaticShape() || !out.hasStaticShape() || in.getRank() == 0 || out.getRank() == 0)
    return emitOpError() << "input and result must have static shapes of rank >= 1, got " << getInput().getType()
                         << " -> " << getType();
  if (in.getNumElements() != out.getNumElements())
    return emitOpError() << "cannot reshape " << in << " (" << in.getNumElements() << " elements) to " << out << " ("
                         << out.getNumElements() << " elements)";
  return success();
}

LogicalResult BroadcastOp::verify() {
  auto in = dyn_cast<RankedTensorType>(getInput().getType());
  auto out = dyn_cast<RankedTensorType>(getType());
  if (!in || !out || !out.hasStaticShape())
    return emitOpError() << "needs a ranked input and a static result, got " << getInput().getType() << " -> "
                         << getType();
  if (in.getRank() > out.getRank())
    return emitOpError() << "cannot broadcast " << in << " to the lower rank of " << out;
  for (int64_t i = 1; i <= in.getRank(); ++i) {
    int64_t from = in.getDimSize(in.getRank() - i), to = out.getDimSize(out.getRank() - i);
    if (from != to && from != 1)
      return emitOpError() << in << " does not broadcast to " << out << " (dimension " << from << " vs " << to << ")";
  }
  return success();
}

#define GET_OP_CLASSES
#include "cc/dialect/TransformerOps.cpp.inc"
