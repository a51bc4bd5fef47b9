// The result type of transformer.packed_matmul: a weight packed in column panels, in each weight
// format's lanes and scales (see ShapeFunctions.h, inferPackedMatmulType).
#include "cc/dialect/ShapeFunctions.h"
#include "cc/dialect/ShapeRules.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"

#include <string>

namespace mlir::transformer {
using namespace shape_rules;

namespace {

/// An i32 panel-packed weight's rows for K = `k`: 2 weights per 32-bit lane (bf16), 4 (q8_0) or 8
/// (q4_0, q4_1); the block formats carry scales.
LogicalResult checkLanePacking(int64_t k, int64_t rows, bool scales, bool minima, int64_t blockSize, Type rhs,
                               EmitErrorFn emitError) {
  int64_t perLane = rows > 0 && k % rows == 0 ? k / rows : 0;
  if (minima && perLane != 8)
    return emitError() << "a q4_1 or q4_K weight (scales with mins) for K = " << k << " must have " << k / 8
                       << " rows (8 codes per lane), got " << rhs;
  if (scales && perLane != 4 && perLane != 8)
    return emitError() << "an i32 weight with scales for K = " << k << " must have " << k / 4 << " rows (q8_0, 4 "
                       << "codes per lane) or " << k / 8 << " rows (q4_0, 8 codes per lane), got " << rhs;
  if (!scales && perLane != 2)
    return emitError() << "an i32 weight without scales is bf16 (2 weights per lane): for K = " << k << " it needs "
                       << k / 2 << " rows, got " << rhs
                       << (perLane == 4 || perLane == 8 ? " (a q8_0/q4_0 weight needs its scales)" : "");
  if (scales && k % blockSize != 0)
    return emitError() << "a block-quantized weight needs K (" << k << ") to be a multiple of the block size "
                       << blockSize;
  return success();
}

/// q4_K's scales: per super-block of 256 weights, its 8 sub-blocks' scale and min, d and dmin.
constexpr int64_t kSuperBlockSize = 256, kQ4_KScaleRows = 10;

/// True for rank-3 scales of K / 32 + K / 128 rows: q4_K's (no other format has that many).
bool isQ4_KScales(RankedTensorType scales, int64_t k) {
  return scales && scales.getRank() == 3 && !ShapedType::isDynamic(k) && k > 0 && k % kSuperBlockSize == 0 &&
         scales.getDimSize(1) == k / kSuperBlockSize * kQ4_KScaleRows;
}

/// q6_K's scales: per super-block of 256 weights, its 16 int8 run scales in pairs, and d.
constexpr int64_t kQ6_KScaleRows = 9, kQ6_KRunValues = 16, kQ6_KWordsPerRun = 3;

/// True for rank-3 scales of K / 32 + K / 256 rows: q6_K's (no other format has that many).
bool isQ6_KScales(RankedTensorType scales, int64_t k) {
  return scales && scales.getRank() == 3 && !ShapedType::isDynamic(k) && k > 0 && k % kSuperBlockSize == 0 &&
         scales.getDimSize(1) == k / kSuperBlockSize * kQ6_KScaleRows;
}

/// A q6_K weight: 3 lane words per run of 16 weights, and its scales' panels and width.
LogicalResult checkQ6_KPacking(RankedTensorType scales, int64_t panels, int64_t k, int64_t rows, int64_t width,
                               Type rhs, EmitErrorFn emitError) {
  if (!ShapedType::isDynamic(rows) && rows != k / kQ6_KRunValues * kQ6_KWordsPerRun)
    return emitError() << "a q6_K weight for K = " << k << " must have " << k / kQ6_KRunValues * kQ6_KWordsPerRun
                       << " rows (3 lanes per 16 6-bit codes), got " << rhs;
  if (dimsCompatible(scales.getDimSize(0), panels) && dimsCompatible(scales.getDimSize(2), width)) return success();
  return emitError() << "q6_K scales must be [N / P, K / 32 + K / 256, P] = [" << panels << ", "
                     << k / kSuperBlockSize * kQ6_KScaleRows << ", " << width << "], got " << scales;
}

/// `scales` of a panel-packed weight: [N / P, K / blockSize, P], or [N / P, K / blockSize, 2, P] with
/// `minima` (q4_1's scale and min pairs), or q4_K's [N / P, K / 32 + K / 128, P].
LogicalResult checkPackedScales(RankedTensorType scales, int64_t panels, int64_t k, int64_t width, bool minima,
                                int64_t blockSize, EmitErrorFn emitError) {
  // q4_K: [N / P, K / 32 + K / 128, P], 10 rows per super-block of 256 weights.
  if (isQ4_KScales(scales, k)) {
    if (dimsCompatible(scales.getDimSize(0), panels) && dimsCompatible(scales.getDimSize(2), width)) return success();
    return emitError() << "q4_K scales must be [N / P, K / 32 + K / 128, P] = [" << panels << ", "
                       << k / kSuperBlockSize * kQ4_KScaleRows << ", " << width << "], got " << scales;
  }
  SmallVector<int64_t> expected = {panels, ShapedType::isDynamic(k) ? ShapedType::kDynamic : k / blockSize, width};
  if (minima) expected.insert(expected.begin() + 2, 2);
  for (auto [got, want] : llvm::zip(scales.getShape(), expected))
    if (!dimsCompatible(got, want)) {
      std::string values;
      llvm::raw_string_ostream os(values);
      llvm::interleaveComma(expected, os);
      return emitError() << "scales must be [N / P, K / " << blockSize << (minima ? ", 2, P] = [" : ", P] = [")
                         << values << "] (" << (minima ? "a scale and a min" : "one") << " per block of " << blockSize
                         << " weights of a column), got " << scales;
    }
  return success();
}

} // namespace

FailureOr<TensorType> inferPackedMatmulType(Type lhs, Type rhs, Type scales, int64_t blockSize, EmitErrorFn emitError) {
  auto l = dyn_cast<RankedTensorType>(lhs);
  auto r = dyn_cast<RankedTensorType>(rhs);
  auto s = dyn_cast_or_null<RankedTensorType>(scales);
  if (r && r.getRank() != 3)
    return emitError() << "rhs must be a rank-3 [N / P, rows, P] panel-packed weight, got " << rhs;
  bool lanes = cast<ShapedType>(rhs).getElementType().isInteger(32);
  if (!lanes && scales)
    return emitError() << "only an i32 (q8_0, q4_0, q4_1, q4_K or q6_K) weight takes scales, not " << rhs;
  if (s && s.getRank() != 3 && s.getRank() != 4)
    return emitError() << "scales must be a rank-3 [N / P, K / " << blockSize
                       << ", P] tensor (q4_K: [N / P, K / 32 + K / 128, P]; q6_K: [N / P, K / 32 + K / 256, P]), or "
                          "(q4_1) rank-4 [N / P, K / "
                       << blockSize << ", 2, P] scale and min pairs, got " << scales;
  // q4_1's (scale, min) pairs, and q4_K's sub-block mins.
  const bool minima = s && (s.getRank() == 4 || (l && isQ4_KScales(s, l.getShape().back())));
  if (!l || !r) return unranked(lhs);
  if (failed(checkRank(l, 2, "lhs", emitError))) return failure();
  int64_t k = l.getShape().back(), rows = r.getDimSize(1);
  int64_t panels = r.getDimSize(0), width = r.getDimSize(2);
  if (!lanes && !dimsCompatible(k, rows))
    return emitError() << "contraction dimensions do not match: lhs " << lhs << " has " << k
                       << " columns but the packed rhs " << rhs << " has " << rows << " rows";
  if (lanes && isQ6_KScales(s, k)) {
    if (failed(checkQ6_KPacking(s, panels, k, rows, width, rhs, emitError))) return failure();
  } else if (lanes && !ShapedType::isDynamic(k) && !ShapedType::isDynamic(rows) &&
             failed(checkLanePacking(k, rows, bool(scales), minima, blockSize, rhs, emitError)))
    return failure();
  if (s && !isQ6_KScales(s, k) && failed(checkPackedScales(s, panels, k, width, minima, blockSize, emitError)))
    return failure();
  FailureOr<int64_t> columns = multiplyDims(panels, width);
  if (failed(columns)) return overflowError(emitError, panels, width, rhs);
  SmallVector<int64_t> shape(l.getShape().drop_back());
  shape.push_back(*columns);
  return ranked(shape, lhs);
}

} // namespace mlir::transformer
