// Activations converted for the low-precision weights' dot products (see QuantizedActivations.h).
#include "cc/conversion/QuantizedActivations.h"

#include "cc/codegen/common/CodegenAttributes.h"
#include "cc/conversion/LoweringUtils.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>

namespace gpt::conversion {
using namespace mlir;
using namespace mlir::transformer;

/// `x` (f32) rounded to the nearest bf16, ties to even, as the top 16 bits of an i32 (the low 16
/// zero); a NaN stays a quiet NaN. In integer arithmetic rather than arith.truncf, which is one
/// instruction only on a CPU with avx512bf16 and a libgcc call per value elsewhere.
static Value roundToBf16Bits(OpBuilder &b, Location l, Value x) {
  Value bits = b.create<arith::BitcastOp>(l, b.getI32Type(), x);
  Value low = b.create<arith::ShRUIOp>(l, bits, i32Constant(b, l, 16));
  Value keptLsb = b.create<arith::AndIOp>(l, low, i32Constant(b, l, 1));
  Value bias = b.create<arith::AddIOp>(l, keptLsb, i32Constant(b, l, 0x7FFF));
  Value top = i32Constant(b, l, static_cast<int32_t>(0xFFFF0000u));
  Value rounded = b.create<arith::AndIOp>(l, b.create<arith::AddIOp>(l, bits, bias), top);
  Value truncated = b.create<arith::AndIOp>(l, bits, top);
  Value quiet = b.create<arith::OrIOp>(l, truncated, i32Constant(b, l, 0x00400000));
  Value isNan = b.create<arith::CmpFOp>(l, arith::CmpFPredicate::UNO, x, x);
  return b.create<arith::SelectOp>(l, isNan, quiet, rounded);
}

/// The activations a bf16 weight multiplies: [M, K] f32 as [M, K/2] lanes of two bf16, lane r
/// holding x[m, r] (rounded to nearest even) in its low half and x[m, r + K/2] in its high half.
/// Two contiguous halves of each row, so the conversion reads whole vectors.
Value bf16Lanes(OpBuilder &b, Location loc, Value lhs) {
  ArrayRef<int64_t> shape = rankedType(lhs).getShape();
  Value halves = splitDim(b, loc, lhs, 1, {2, shape[1] / 2});
  Value low = sliceAt(b, loc, halves, 1, 0), high = sliceAt(b, loc, halves, 1, 1);
  AffineMap identity = b.getMultiDimIdentityMap(2);
  return buildParallel(b, loc, {shape[0], shape[1] / 2}, b.getI32Type(), {low, high}, {identity, identity},
                       [](OpBuilder &b, Location l, ValueRange args) -> Value {
                         Value lowHalf =
                             b.create<arith::ShRUIOp>(l, roundToBf16Bits(b, l, args[0]), i32Constant(b, l, 16));
                         return b.create<arith::OrIOp>(l, lowHalf, roundToBf16Bits(b, l, args[1]));
                       });
}

/// 1 / d, or 0 for an all-zero block. At most the largest finite f32: for a block whose max |x|
/// is below ~3.7e-37, 1 / d overflows to infinity, and x * inf (NaN for x = 0) would turn the
/// block's codes into poison and its compensation, and so the whole output row, into NaN. Capped,
/// |x| * inverse <= max|x| / d = 127 still, and a zero stays a zero code.
static Value inverseScale(OpBuilder &b, Location l, Value d) {
  Value zero = b.create<arith::ConstantOp>(l, b.getF32FloatAttr(0.0f));
  Value one = b.create<arith::ConstantOp>(l, b.getF32FloatAttr(1.0f));
  Value largest = b.create<arith::ConstantOp>(l, b.getF32FloatAttr(std::numeric_limits<float>::max()));
  Value isZero = b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OEQ, d, zero);
  Value inverse = b.create<arith::MinimumFOp>(l, b.create<arith::DivFOp>(l, one, d), largest);
  return b.create<arith::SelectOp>(l, isZero, zero, inverse);
}

static Value roundedCode(OpBuilder &b, Location l, Value x, Value inverse) {
  return b.create<math::RoundEvenOp>(l, b.create<arith::MulFOp>(l, x, inverse));
}

/// Per row r of `rows` [R, n], `factor` times the sum of its codes at the row's scale `scales[r]`
/// (exact in f32): what the integer dot products' offsets or mins take back out.
static Value scaledCodeSums(OpBuilder &b, Location loc, Value rows, Value scales, float factor) {
  ArrayRef<int64_t> shape = rankedType(rows).getShape();
  return buildRowReduction(
      b, loc, {shape[0], shape[1]}, {rows, scales}, {b.getMultiDimIdentityMap(2), rowMap(2, b.getContext())}, 0.0,
      [factor](OpBuilder &b, Location l, ValueRange args) -> Value {
        Value code = roundedCode(b, l, args[0], inverseScale(b, l, args[1]));
        Value scaled = b.create<arith::MulFOp>(l, code, b.create<arith::ConstantOp>(l, b.getF32FloatAttr(factor)));
        return b.create<arith::AddFOp>(l, args[2], scaled);
      });
}

/// The int32 lanes the dot products read, [M, G, L] from `strided` [M, G, 4, L]: lane l of group g
/// holds in byte i the code of strided[m, g, i, l] at the group's scale `scales` [M, G].
static Value packCodeLanes(OpBuilder &b, Location loc, Value strided, Value scales) {
  ArrayRef<int64_t> shape = rankedType(strided).getShape();
  MLIRContext *ctx = b.getContext();
  SmallVector<Value> inputs;
  for (int64_t i = 0; i < 4; ++i) inputs.push_back(sliceAt(b, loc, strided, 2, i));
  inputs.push_back(scales);
  SmallVector<AffineMap> maps(4, b.getMultiDimIdentityMap(3));
  maps.push_back(AffineMap::get(3, 0, {getAffineDimExpr(0, ctx), getAffineDimExpr(1, ctx)}, ctx));
  return buildParallel(b, loc, {shape[0], shape[1], shape[3]}, b.getI32Type(), inputs, maps,
                       [](OpBuilder &b, Location l, ValueRange args) -> Value {
                         Value inverse = inverseScale(b, l, args[4]);
                         Value lane;
                         for (int64_t i = 0; i < 4; ++i) {
                           Value code =
                               b.create<arith::FPToSIOp>(l, b.getI32Type(), roundedCode(b, l, args[i], inverse));
                           Value byte = b.create<arith::AndIOp>(l, code, i32Constant(b, l, 0xFF));
                           if (i > 0) byte = b.create<arith::ShLIOp>(l, byte, i32Constant(b, l, 8 * i));
                           lane = lane ? b.create<arith::OrIOp>(l, lane, byte) : byte;
                         }
                         return lane;
                       });
}

/// `scales` [M, G] with each value repeated `times` times beside itself, flat: [M * G * times]. A
/// broadcast, a map the vectorizer reads (where an index divided by `times` is not).
static Value repeatEach(OpBuilder &b, Location loc, Value scales, int64_t times) {
  ArrayRef<int64_t> shape = rankedType(scales).getShape();
  AffineExpr d0, d1;
  bindDims(b.getContext(), d0, d1);
  Value repeated = buildParallel(b, loc, {shape[0], shape[1], times}, b.getF32Type(), {scales},
                                 {AffineMap::get(3, 0, {d0, d1}, b.getContext())},
                                 [](OpBuilder &, Location, ValueRange args) -> Value { return args[0]; });
  gpt::codegen::markQuantizesActivations(repeated.getDefiningOp());
  return b.create<tensor::CollapseShapeOp>(loc, repeated, SmallVector<ReassociationIndices>{{0, 1, 2}});
}

/// The largest |x| of each row of `rows` [R, n], over 127: the scale that maps the row onto [-127, 127].
static Value rowScales(OpBuilder &b, Location loc, Value rows) {
  ArrayRef<int64_t> shape = rankedType(rows).getShape();
  Value amax = buildRowReduction(b, loc, {shape[0], shape[1]}, {rows}, {b.getMultiDimIdentityMap(2)}, 0.0,
                                 [](OpBuilder &b, Location l, ValueRange args) -> Value {
                                   return b.create<arith::MaximumFOp>(l, args[1], b.create<math::AbsFOp>(l, args[0]));
                                 });
  Value scales = buildParallel(b, loc, {shape[0]}, b.getF32Type(), {amax}, {b.getMultiDimIdentityMap(1)},
                               [](OpBuilder &b, Location l, ValueRange args) -> Value {
                                 Value limit = b.create<arith::ConstantOp>(l, b.getF32FloatAttr(127.0f));
                                 return b.create<arith::DivFOp>(l, args[0], limit);
                               });
  for (Value quantization : {amax, scales}) gpt::codegen::markQuantizesActivations(quantization.getDefiningOp());
  return scales;
}

/// `lhs` [M, K] as rows of `size` consecutive values, [M * K / size, size].
static Value rowsOf(OpBuilder &b, Location loc, Value lhs, int64_t size) {
  const int64_t groups = rankedType(lhs).getDimSize(1) / size;
  return b.create<tensor::CollapseShapeOp>(loc, splitDim(b, loc, lhs, 1, {groups, size}),
                                           SmallVector<ReassociationIndices>{{0, 1}, {2}});
}

/// Quantizes `lhs` [M, K]; `offset` is what the weight's unsigned codes add to each true code
/// (128 for q8_0, 8 for q4_0), which the compensations take back out of the integer sums. (A format
/// with mins passes 1: its codes are the true ones, and its compensation, the plain sum of the activation
/// codes, is what each block's min multiplies.)
QuantizedActivations quantizeActivations(OpBuilder &b, Location loc, Value lhs, int64_t offset) {
  const int64_t block = PackedMatmulOp::kBlockSize, lanesPerBlock = block / 4;
  ArrayRef<int64_t> shape = rankedType(lhs).getShape();
  const int64_t m = shape[0], blocks = shape[1] / block;
  Type f32 = b.getF32Type();
  // Blocks as rows of 32: their max |x| and code sums are row reductions.
  Value rows = rowsOf(b, loc, lhs, block);
  Value scales = rowScales(b, loc, rows);
  Value compensations = scaledCodeSums(b, loc, rows, scales, static_cast<float>(offset));
  // Lane q of a block packs x[32 b + q + 8 i] for i < 4: four contiguous runs of 8 per block.
  Value blockScales = b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get({m, blocks}, f32), scales,
                                                      SmallVector<ReassociationIndices>{{0, 1}});
  Value lanes = packCodeLanes(b, loc, splitDim(b, loc, lhs, 1, {blocks, 4, lanesPerBlock}), blockScales);
  for (Value quantization : {compensations, lanes})
    gpt::codegen::markQuantizesActivations(quantization.getDefiningOp());
  Value blockCompensations = b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get({m, blocks}, f32),
                                                             compensations, SmallVector<ReassociationIndices>{{0, 1}});
  return {lanes, blockScales, blockCompensations};
}

QuantizedActivations quantizeActivationsPerSuperBlock(OpBuilder &b, Location loc, Value lhs) {
  constexpr int64_t block = PackedMatmulOp::kBlockSize, superBlock = PackedMatmulOp::kSuperBlockSize;
  ArrayRef<int64_t> shape = rankedType(lhs).getShape();
  const int64_t m = shape[0], blocks = shape[1] / block, superBlocks = shape[1] / superBlock;
  Type f32 = b.getF32Type();
  Value superScales = b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get({m, superBlocks}, f32),
                                                      rowScales(b, loc, rowsOf(b, loc, lhs, superBlock)),
                                                      SmallVector<ReassociationIndices>{{0, 1}});
  // Each block quantized at its super-block's scale: the code sums and lanes per block of 32.
  Value blockScales = repeatEach(b, loc, superScales, superBlock / block);
  Value compensations = scaledCodeSums(b, loc, rowsOf(b, loc, lhs, block), blockScales, 1.0f);
  Value lanes = packCodeLanes(b, loc, splitDim(b, loc, lhs, 1, {blocks, 4, block / 4}),
                              b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get({m, blocks}, f32), blockScales,
                                                              SmallVector<ReassociationIndices>{{0, 1}}));
  for (Value quantization : {compensations, lanes})
    gpt::codegen::markQuantizesActivations(quantization.getDefiningOp());
  Value blockCompensations = b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get({m, blocks}, f32),
                                                             compensations, SmallVector<ReassociationIndices>{{0, 1}});
  return {lanes, superScales, blockCompensations};
}

/// q6_K's activations: quantized per block of 32 as quantizeActivations does (the same codes and
/// scales), laid out per run of 16 weights, so that no lane mixes two runs (each has its own
/// weight scale): `lanes` [M, K/32, 8], lane 4 h + l of block b holding the codes of
/// x[32 b + 16 h + l + 4 i] in byte i, and `compensations` [M, K/16] f32, 32 times each run's
/// code sum (exact in f32).
QuantizedActivations quantizeActivationRuns(OpBuilder &b, Location loc, Value lhs) {
  constexpr int64_t run = PackedMatmulOp::kQ6_KRunSize, lanesPerRun = run / 4;
  const int64_t blockSize = PackedMatmulOp::kBlockSize;
  ArrayRef<int64_t> shape = rankedType(lhs).getShape();
  const int64_t m = shape[0], runs = shape[1] / run, blocks = shape[1] / blockSize;
  Type f32 = b.getF32Type();
  const Value superScales =
      b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get({m, shape[1] / PackedMatmulOp::kSuperBlockSize}, f32),
                                      rowScales(b, loc, rowsOf(b, loc, lhs, PackedMatmulOp::kSuperBlockSize)),
                                      SmallVector<ReassociationIndices>{{0, 1}});
  // Each super-block's d beside each of its 16 runs, [M * K/16].
  Value flatScales = repeatEach(b, loc, superScales, PackedMatmulOp::kSuperBlockSize / run);
  Value runScales = b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get({m, runs}, f32), flatScales,
                                                    SmallVector<ReassociationIndices>{{0, 1}});
  // Runs as rows of 16: their code sums are row reductions.
  Value compensations = scaledCodeSums(b, loc, rowsOf(b, loc, lhs, run), flatScales, 32.0f);
  // Lane l of run h packs x[16 h + l + 4 i] for i < 4: four contiguous runs of 4 per run.
  Value lanes = packCodeLanes(b, loc, splitDim(b, loc, lhs, 1, {runs, 4, lanesPerRun}), runScales);
  for (Value quantization : {compensations, lanes})
    gpt::codegen::markQuantizesActivations(quantization.getDefiningOp());
  // [M, K/16, 4] lanes as [M, K/32, 8]: a block's two runs side by side.
  Value blockLanes = b.create<tensor::CollapseShapeOp>(loc, splitDim(b, loc, lanes, 1, {blocks, 2}),
                                                       SmallVector<ReassociationIndices>{{0}, {1}, {2, 3}});
  Value runCompensations = b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get({m, runs}, f32), compensations,
                                                           SmallVector<ReassociationIndices>{{0, 1}});
  return {blockLanes, superScales, runCompensations};
}

} // namespace gpt::conversion
