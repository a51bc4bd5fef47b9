// The result type of transformer.packed_matmul: a weight packed in column panels, its lanes and
// scales shaped as its format's row of the weight-format table says (see ShapeFunctions.h,
// inferPackedMatmulType).
#include "cc/dialect/ShapeFunctions.h"
#include "cc/dialect/ShapeRules.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"

#include <string>

namespace mlir::transformer {
using namespace shape_rules;

namespace {

/// The weight's rows for K = `k`: K for f32, else its K * codeBits / 32 lane words per column
/// (bf16 2 rows a word, q8_0 4, the 4-bit formats 8, q6_k 16 in 3 words). Failure where K does not
/// fill whole words or the product overflows.
FailureOr<int64_t> laneRows(const gpt::WeightFormatTraits &format, int64_t k) {
  if (format.format == gpt::WeightFormat::F32) return k;
  FailureOr<int64_t> bits = multiplyDims(k, format.codeBits());
  if (failed(bits) || *bits % 32 != 0) return failure();
  return *bits / 32;
}

/// The weight's element type and rank, and whether it comes with scales, against its format.
LogicalResult checkOperandKinds(const gpt::WeightFormatTraits &format, Type rhs, RankedTensorType scales,
                                bool hasScales, EmitErrorFn emitError) {
  auto r = dyn_cast<RankedTensorType>(rhs);
  if (r && r.getRank() != 3)
    return emitError() << "rhs must be a rank-3 [N / P, rows, P] panel-packed weight, got " << rhs;
  const bool floats = format.format == gpt::WeightFormat::F32;
  if (floats != cast<ShapedType>(rhs).getElementType().isF32())
    return emitError() << format.name << " weights are " << (floats ? "f32" : "i32 lane words") << ", got " << rhs;
  if (hasScales != format.blockQuantized())
    return emitError() << format.name << " weights "
                       << (hasScales ? "take no scales (only the block formats do)" : "need their scales");
  if (scales && scales.getRank() != 3)
    return emitError() << "scales must be a rank-3 [N / P, K / " << format.blockValues << " * "
                       << format.scaleRowsPerBlock() << ", P] tensor, got " << scales;
  return success();
}

/// The weight's rows and its scales' shape for K = `k` (static).
LogicalResult checkLanesAndScales(const gpt::WeightFormatTraits &format, int64_t k, RankedTensorType r,
                                  RankedTensorType scales, Type lhs, EmitErrorFn emitError) {
  const int64_t rows = r.getDimSize(1), panels = r.getDimSize(0), width = r.getDimSize(2);
  if (format.format == gpt::WeightFormat::F32) {
    if (dimsCompatible(k, rows)) return success();
    return emitError() << "contraction dimensions do not match: lhs " << lhs << " has " << k
                       << " columns but the packed rhs " << r << " has " << rows << " rows";
  }
  if (format.blockQuantized() && k % format.blockValues != 0)
    return emitError() << format.name << " weights need K (" << k << ") to be a multiple of their block, "
                       << format.blockValues;
  FailureOr<int64_t> words = laneRows(format, k);
  if (failed(words))
    return emitError() << format.name << " weights need a K (" << k << ") that fills whole 32-bit words of "
                       << format.codeBits() << "-bit codes";
  if (!dimsCompatible(rows, *words))
    return emitError() << format.name << " weights for K = " << k << " must have " << *words << " rows ("
                       << format.codeBits() << "-bit codes, K * " << format.codeBits()
                       << " / 32 words per column), got " << r;
  if (!scales) return success();
  const int64_t scaleRows = k / format.blockValues * format.scaleRowsPerBlock();
  const int64_t expected[] = {panels, scaleRows, width};
  for (auto [got, want] : llvm::zip(scales.getShape(), expected))
    if (!dimsCompatible(got, want))
      return emitError() << format.name << " scales must be [N / P, K / " << format.blockValues << " * "
                         << format.scaleRowsPerBlock() << ", P] = [" << panels << ", " << scaleRows << ", " << width
                         << "] (" << format.scaleRowsPerBlock() << " per block of " << format.blockValues
                         << " weights of a column), got " << scales;
  return success();
}

} // namespace

FailureOr<TensorType> inferPackedMatmulType(Type lhs, Type rhs, Type scales, const gpt::WeightFormatTraits &format,
                                            EmitErrorFn emitError) {
  auto l = dyn_cast<RankedTensorType>(lhs);
  auto r = dyn_cast<RankedTensorType>(rhs);
  auto s = dyn_cast_or_null<RankedTensorType>(scales);
  if (failed(checkOperandKinds(format, rhs, s, bool(scales), emitError))) return failure();
  if (!l || !r) return unranked(lhs);
  if (failed(checkRank(l, 2, "lhs", emitError))) return failure();
  const int64_t k = l.getShape().back(), panels = r.getDimSize(0), width = r.getDimSize(2);
  if (!ShapedType::isDynamic(k) && failed(checkLanesAndScales(format, k, r, s, lhs, emitError))) return failure();
  FailureOr<int64_t> columns = multiplyDims(panels, width);
  if (failed(columns)) return overflowError(emitError, panels, width, rhs);
  SmallVector<int64_t> shape(l.getShape().drop_back());
  shape.push_back(*columns);
  return ranked(shape, lhs);
}

} // namespace mlir::transformer
