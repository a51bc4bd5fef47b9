// Lowering of matmul (linalg.matmul / batch_matmul) and packed_matmul (a linalg.generic over panels).
#include "cc/codegen/common/CodegenAttributes.h"
#include "cc/conversion/LoweringUtils.h"
#include "cc/conversion/Passes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/DialectConversion.h"

#include <limits>

namespace gpt::conversion {
using namespace mlir;
using namespace mlir::transformer;

namespace {

struct MatmulLowering : OpConversionPattern<MatmulOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(MatmulOp op, OpAdaptor adaptor, ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType resultType = rankedType(op.getResult());
    int64_t rank = resultType.getRank();
    Value lhs = adaptor.getLhs(), rhs = adaptor.getRhs();

    Value product;
    if (rankedType(rhs).getRank() == 2) {
      // A weight shared by every batch: fold the batch dims into M and run one 2-D matmul.
      if (rank > 2) lhs = collapse(rewriter, loc, lhs, rank - 1);
      int64_t m = rankedType(lhs).getDimSize(0), n = resultType.getShape().back();
      product = rewriter.create<linalg::MatmulOp>(loc, ValueRange{lhs, rhs}, ValueRange{filled(rewriter, loc, {m, n})})
                    .getResult(0);
    } else {
      // Same batch dims on both sides: fold them into one and run a batch matmul.
      if (rank > 3) {
        lhs = collapse(rewriter, loc, lhs, rank - 2);
        rhs = collapse(rewriter, loc, rhs, rank - 2);
      }
      auto l = rankedType(lhs);
      SmallVector<int64_t> shape = {l.getDimSize(0), l.getDimSize(1), resultType.getShape().back()};
      product =
          rewriter.create<linalg::BatchMatmulOp>(loc, ValueRange{lhs, rhs}, ValueRange{filled(rewriter, loc, shape)})
              .getResult(0);
    }
    if (rankedType(product) != resultType) {
      int64_t folded = rankedType(rhs).getRank() == 2 ? rank - 1 : rank - 2;
      product = rewriter.create<tensor::ExpandShapeOp>(loc, resultType, product, collapseLeading(folded, rank));
    }
    rewriter.replaceOp(op, product);
    return success();
  }
};

/// `value` [d0, ..., dn] viewed (expand_shape, no copy) with dim `dim` split into `shape`.
Value splitDim(OpBuilder &b, Location loc, Value value, int64_t dim, ArrayRef<int64_t> shape) {
  RankedTensorType type = rankedType(value);
  SmallVector<int64_t> expanded;
  SmallVector<ReassociationIndices> groups;
  for (int64_t i = 0; i < type.getRank(); ++i) {
    ReassociationIndices group;
    for (int64_t size : i == dim ? shape : ArrayRef<int64_t>(type.getShape()[i])) {
      group.push_back(expanded.size());
      expanded.push_back(size);
    }
    groups.push_back(group);
  }
  return b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get(expanded, type.getElementType()), value, groups);
}

/// `value` sliced at index `at` of its dim `dim`, which the result drops (a rank-reducing
/// extract_slice with unit strides).
Value sliceAt(OpBuilder &b, Location loc, Value value, int64_t dim, int64_t at) {
  RankedTensorType type = rankedType(value);
  SmallVector<int64_t> shape(type.getShape());
  shape.erase(shape.begin() + dim);
  SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0)), sizes,
      strides(type.getRank(), b.getIndexAttr(1));
  offsets[dim] = b.getIndexAttr(at);
  for (int64_t i = 0; i < type.getRank(); ++i) sizes.push_back(b.getIndexAttr(i == dim ? 1 : type.getDimSize(i)));
  return b.create<tensor::ExtractSliceOp>(loc, RankedTensorType::get(shape, type.getElementType()), value, offsets,
                                          sizes, strides);
}

Value i32Constant(OpBuilder &b, Location loc, int64_t value) {
  return b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(static_cast<int32_t>(value)));
}

/// A new tensor of `shape` and `element` type filled with zeros.
Value zeros(OpBuilder &b, Location loc, ArrayRef<int64_t> shape, Type element) {
  Value empty = b.create<tensor::EmptyOp>(loc, shape, element);
  Value zero = b.create<arith::ConstantOp>(loc, b.getZeroAttr(element));
  return b.create<linalg::FillOp>(loc, zero, empty).getResult(0);
}

using IteratorType = utils::IteratorType;

/// A rank-`rank` all-parallel generic writing a new `element` tensor of `shape` from `inputs`
/// read through `inputMaps`.
Value buildParallel(OpBuilder &b, Location loc, ArrayRef<int64_t> shape, Type element, ValueRange inputs,
                    ArrayRef<AffineMap> inputMaps, BodyBuilder body) {
  Value init = b.create<tensor::EmptyOp>(loc, shape, element);
  SmallVector<IteratorType> iterators(shape.size(), IteratorType::parallel);
  return buildGeneric(b, loc, init, inputs, inputMaps, b.getMultiDimIdentityMap(shape.size()), iterators, body);
}

/// `x` (f32) rounded to the nearest bf16, ties to even, as the top 16 bits of an i32 (the low 16
/// zero); a NaN stays a quiet NaN. In integer arithmetic rather than arith.truncf, which is one
/// instruction only on a CPU with avx512bf16 and a libgcc call per value elsewhere.
Value roundToBf16Bits(OpBuilder &b, Location l, Value x) {
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

/// A row of activations quantized per block of 32 along K, as llama.cpp quantizes them for its
/// int8 dot products: per block, d = max|x| / 127 and code = round_even(x * min(1 / d, FLT_MAX))
/// in [-127, 127] (0 where d = 0).
struct QuantizedActivations {
  Value lanes;         ///< [M, K/32, 8] i32: lane q of a block holds the codes of x[32 b + q + 8 i], i < 4
  Value scales;        ///< [M, K/32] f32: d
  Value compensations; ///< [M, K/32] f32: offset * sum of the block's codes (exact in f32)
};

/// 1 / d, or 0 for an all-zero block. At most the largest finite f32: for a block whose max |x|
/// is below ~3.7e-37, 1 / d overflows to infinity, and x * inf (NaN for x = 0) would turn the
/// block's codes into poison and its compensation, and so the whole output row, into NaN. Capped,
/// |x| * inverse <= max|x| / d = 127 still, and a zero stays a zero code.
Value inverseScale(OpBuilder &b, Location l, Value d) {
  Value zero = b.create<arith::ConstantOp>(l, b.getF32FloatAttr(0.0f));
  Value one = b.create<arith::ConstantOp>(l, b.getF32FloatAttr(1.0f));
  Value largest = b.create<arith::ConstantOp>(l, b.getF32FloatAttr(std::numeric_limits<float>::max()));
  Value isZero = b.create<arith::CmpFOp>(l, arith::CmpFPredicate::OEQ, d, zero);
  Value inverse = b.create<arith::MinimumFOp>(l, b.create<arith::DivFOp>(l, one, d), largest);
  return b.create<arith::SelectOp>(l, isZero, zero, inverse);
}

Value roundedCode(OpBuilder &b, Location l, Value x, Value inverse) {
  return b.create<math::RoundEvenOp>(l, b.create<arith::MulFOp>(l, x, inverse));
}

/// Quantizes `lhs` [M, K]; `offset` is what the weight's unsigned codes add to each true code
/// (128 for q8_0, 8 for q4_0), which the compensations take back out of the integer sums. (q4_1
/// passes 1: its codes are the true ones, and its compensation, the plain sum of the activation
/// codes, is what each block's min multiplies.)
QuantizedActivations quantizeActivations(OpBuilder &b, Location loc, Value lhs, int64_t offset) {
  const int64_t block = PackedMatmulOp::kBlockSize, lanesPerBlock = block / 4;
  ArrayRef<int64_t> shape = rankedType(lhs).getShape();
  const int64_t m = shape[0], blocks = shape[1] / block;
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type();
  // Blocks as rows of 32: their max |x| and code sums are row reductions.
  Value rows = b.create<tensor::CollapseShapeOp>(loc, splitDim(b, loc, lhs, 1, {blocks, block}),
                                                 SmallVector<ReassociationIndices>{{0, 1}, {2}});
  AffineMap identity2 = b.getMultiDimIdentityMap(2);
  Value amax = buildRowReduction(b, loc, {m * blocks, block}, {rows}, {identity2}, 0.0,
                                 [](OpBuilder &b, Location l, ValueRange args) -> Value {
                                   return b.create<arith::MaximumFOp>(l, args[1], b.create<math::AbsFOp>(l, args[0]));
                                 });
  Value scales = buildParallel(b, loc, {m * blocks}, f32, {amax}, {b.getMultiDimIdentityMap(1)},
                               [](OpBuilder &b, Location l, ValueRange args) -> Value {
                                 Value limit = b.create<arith::ConstantOp>(l, b.getF32FloatAttr(127.0f));
                                 return b.create<arith::DivFOp>(l, args[0], limit);
                               });
  Value compensations =
      buildRowReduction(b, loc, {m * blocks, block}, {rows, scales}, {identity2, rowMap(2, ctx)}, 0.0,
                        [offset](OpBuilder &b, Location l, ValueRange args) -> Value {
                          Value code = roundedCode(b, l, args[0], inverseScale(b, l, args[1]));
                          Value scaled = b.create<arith::MulFOp>(
                              l, code, b.create<arith::ConstantOp>(l, b.getF32FloatAttr(static_cast<float>(offset))));
                          return b.create<arith::AddFOp>(l, args[2], scaled);
                        });
  // Lane q of a block packs x[32 b + q + 8 i] for i < 4: four contiguous runs of 8 per block.
  Value runs = splitDim(b, loc, lhs, 1, {blocks, 4, lanesPerBlock});
  SmallVector<Value> inputs;
  for (int64_t i = 0; i < 4; ++i) inputs.push_back(sliceAt(b, loc, runs, 2, i));
  Value blockScales = b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get({m, blocks}, f32), scales,
                                                      SmallVector<ReassociationIndices>{{0, 1}});
  inputs.push_back(blockScales);
  AffineMap identity3 = b.getMultiDimIdentityMap(3);
  SmallVector<AffineMap> maps(4, identity3);
  maps.push_back(AffineMap::get(3, 0, {getAffineDimExpr(0, ctx), getAffineDimExpr(1, ctx)}, ctx));
  Value lanes = buildParallel(b, loc, {m, blocks, lanesPerBlock}, b.getI32Type(), inputs, maps,
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
  for (Value quantization : {amax, scales, compensations, lanes})
    gpt::codegen::markQuantizesActivations(quantization.getDefiningOp());
  Value blockCompensations = b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get({m, blocks}, f32),
                                                             compensations, SmallVector<ReassociationIndices>{{0, 1}});
  return {lanes, blockScales, blockCompensations};
}

/// q6_K's activations: quantized per block of 32 as quantizeActivations does (the same codes and
/// scales), laid out per run of 16 weights, so that no lane mixes two runs (each has its own
/// weight scale): `lanes` [M, K/32, 8], lane 4 h + l of block b holding the codes of
/// x[32 b + 16 h + l + 4 i] in byte i, and `compensations` [M, K/16] f32, 32 times each run's
/// code sum (exact in f32).
QuantizedActivations quantizeActivationRuns(OpBuilder &b, Location loc, Value lhs) {
  constexpr int64_t run = PackedMatmulOp::kQ6_KRunSize, lanesPerRun = run / 4;
  const int64_t blockSize = PackedMatmulOp::kBlockSize;
  // The block scales; quantizeActivations' lanes and compensations go unused (and die).
  const Value blockScales = quantizeActivations(b, loc, lhs, 1).scales;
  ArrayRef<int64_t> shape = rankedType(lhs).getShape();
  const int64_t m = shape[0], runs = shape[1] / run, blocks = shape[1] / blockSize;
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type();
  AffineExpr d0, d1;
  bindDims(ctx, d0, d1);
  // Each block's d beside each of its two runs, [M * K/16]: a broadcast, a map the vectorizer
  // reads (where run / 2 is not).
  Value pairedScales = buildParallel(b, loc, {m, blocks, 2}, f32, {blockScales}, {AffineMap::get(3, 0, {d0, d1}, ctx)},
                                     [](OpBuilder &, Location, ValueRange args) -> Value { return args[0]; });
  Value flatScales = b.create<tensor::CollapseShapeOp>(loc, pairedScales, SmallVector<ReassociationIndices>{{0, 1, 2}});
  Value runScales = b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get({m, runs}, f32), flatScales,
                                                    SmallVector<ReassociationIndices>{{0, 1}});
  // Runs as rows of 16: their code sums are row reductions.
  Value rows = b.create<tensor::CollapseShapeOp>(loc, splitDim(b, loc, lhs, 1, {runs, run}),
                                                 SmallVector<ReassociationIndices>{{0, 1}, {2}});
  Value compensations = buildRowReduction(
      b, loc, {m * runs, run}, {rows, flatScales}, {b.getMultiDimIdentityMap(2), rowMap(2, ctx)}, 0.0,
      [](OpBuilder &b, Location l, ValueRange args) -> Value {
        Value code = roundedCode(b, l, args[0], inverseScale(b, l, args[1]));
        Value scaled = b.create<arith::MulFOp>(l, code, b.create<arith::ConstantOp>(l, b.getF32FloatAttr(32.0f)));
        return b.create<arith::AddFOp>(l, args[2], scaled);
      });
  // Lane l of run h packs x[16 h + l + 4 i] for i < 4: four contiguous runs of 4 per run.
  Value strided = splitDim(b, loc, lhs, 1, {runs, 4, lanesPerRun});
  SmallVector<Value> inputs;
  for (int64_t i = 0; i < 4; ++i) inputs.push_back(sliceAt(b, loc, strided, 2, i));
  inputs.push_back(runScales);
  SmallVector<AffineMap> maps(4, b.getMultiDimIdentityMap(3));
  maps.push_back(AffineMap::get(3, 0, {d0, d1}, ctx));
  Value lanes = buildParallel(b, loc, {m, runs, lanesPerRun}, b.getI32Type(), inputs, maps,
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
  for (Value quantization : {pairedScales, compensations, lanes})
    gpt::codegen::markQuantizesActivations(quantization.getDefiningOp());
  // [M, K/16, 4] lanes as [M, K/32, 8]: a block's two runs side by side.
  Value blockLanes = b.create<tensor::CollapseShapeOp>(loc, splitDim(b, loc, lanes, 1, {blocks, 2}),
                                                       SmallVector<ReassociationIndices>{{0}, {1}, {2, 3}});
  Value runCompensations = b.create<tensor::ExpandShapeOp>(loc, RankedTensorType::get({m, runs}, f32), compensations,
                                                           SmallVector<ReassociationIndices>{{0, 1}});
  return {blockLanes, blockScales, runCompensations};
}

/// [M, K] x [N/P, K, P] as one linalg.generic over (m, panel, column, k) that writes [M, N/P, P]:
/// a register tile of one panel's P columns reads the weight from consecutive addresses. The
/// result is then viewed (collapse_shape, no copy) as [M, N].
///
/// A low-precision weight multiplies activations converted to its lanes (see the op): bf16
/// lanes with transformer.lane_dot_bf16 over K/2 steps. A block-quantized weight (q8_0, q4_0, q4_1, q4_K)
/// applies each block's scales once per block, as llama.cpp does, in two generics:
/// - the block sums `partial[m, panel, block, column] = sum over the block of code_x * code_w`
///   in i32, with transformer.lane_dot_u8i8 (marked `gpt.block_partials`);
/// - their scaled sum over blocks, `out += (partial - compensation) * d_w * d_x` (q4_1:
///   `out += d_x * (d_w * partial + min_w * compensation)`; q4_K: d_w = d * sc and
///   min_w = -dmin * m of the block's super-block, in f32), the packed
///   matmul proper (loops M, panel, column, block), which the schedule tiles like an f32 one and
///   into whose block loop it fuses the partial sums (transform.gpt.vectorize_block_matmul), so
///   that they live in registers and are never stored.
/// Float accumulation uses math.fma: the JIT does not contract a mulf and an addf into one.
struct PackedMatmulLowering : OpConversionPattern<PackedMatmulOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(PackedMatmulOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    RankedTensorType resultType = rankedType(op.getResult());
    int64_t rank = resultType.getRank();
    Value lhs = adaptor.getLhs();
    if (rank > 2) lhs = collapse(rewriter, loc, lhs, rank - 1);
    ArrayRef<int64_t> packed = rankedType(adaptor.getRhs()).getShape();
    int64_t m = rankedType(lhs).getDimSize(0);
    Value init = filled(rewriter, loc, {m, packed[0], packed[2]});

    Value panels;
    switch (op.getWeightFormat()) {
    case PackedWeightFormat::F32:
      panels = plainPanels(rewriter, loc, lhs, adaptor.getRhs(), init);
      break;
    case PackedWeightFormat::BF16:
      panels = plainPanels(rewriter, loc, bf16Lanes(rewriter, loc, lhs), adaptor.getRhs(), init);
      break;
    case PackedWeightFormat::Q8_0:
    case PackedWeightFormat::Q4_0:
    case PackedWeightFormat::Q4_1:
    case PackedWeightFormat::Q4_K: {
      const PackedWeightFormat format = op.getWeightFormat();
      const bool q8 = format == PackedWeightFormat::Q8_0, q4_K = format == PackedWeightFormat::Q4_K,
                 withMins = format == PackedWeightFormat::Q4_1 || q4_K;
      QuantizedActivations x = quantizeActivations(rewriter, loc, lhs, q8 ? 128 : withMins ? 1 : 8);
      Value partials = q8 ? q8Partials(rewriter, loc, x.lanes, adaptor.getRhs())
                          : q4Partials(rewriter, loc, x.lanes, adaptor.getRhs());
      panels = q4_K       ? scaledSubBlocks(rewriter, loc, partials, adaptor.getScales(), x.scales,
                                            scaledCompensations(rewriter, loc, x), init)
               : withMins ? scaledBlocksWithMins(rewriter, loc, partials, adaptor.getScales(), x, init)
                          : scaledBlocks(rewriter, loc, partials, adaptor.getScales(), x, init);
      break;
    }
    case PackedWeightFormat::Q6_K: {
      QuantizedActivations x = quantizeActivationRuns(rewriter, loc, lhs);
      Value scales = adaptor.getScales();
      const int64_t blocks = rankedType(x.lanes).getDimSize(1);
      Value runScales = scaleRows(rewriter, loc, scales, 0, blocks);
      Value partials = q6Partials(rewriter, loc, x.lanes, adaptor.getRhs(), runScales);
      panels =
          scaledRunPairs(rewriter, loc, partials, runScales,
                         scaleRows(rewriter, loc, scales, blocks, rankedType(scales).getDimSize(1) - blocks), x, init);
      break;
    }
    }
    gpt::codegen::markPackedMatmul(panels.getDefiningOp());
    Value product =
        rewriter.create<tensor::CollapseShapeOp>(loc, panels, SmallVector<ReassociationIndices>{{0}, {1, 2}});
    if (rank > 2)
      product = rewriter.create<tensor::ExpandShapeOp>(loc, resultType, product, collapseLeading(rank - 1, rank));
    rewriter.replaceOp(op, product);
    return success();
  }

private:
  /// f32 panels, or bf16 lanes against bf16 activation lanes; loops (m, panel, column, k).
  static Value plainPanels(OpBuilder &b, Location loc, Value lhs, Value rhs, Value init) {
    MLIRContext *ctx = b.getContext();
    AffineExpr mDim, panel, column, k;
    bindDims(ctx, mDim, panel, column, k);
    SmallVector<AffineMap> inputMaps = {AffineMap::get(4, 0, {mDim, k}, ctx),
                                        AffineMap::get(4, 0, {panel, k, column}, ctx)};
    SmallVector<IteratorType> iterators = {IteratorType::parallel, IteratorType::parallel, IteratorType::parallel,
                                           IteratorType::reduction};
    return buildGeneric(b, loc, init, {lhs, rhs}, inputMaps, AffineMap::get(4, 0, {mDim, panel, column}, ctx),
                        iterators, [](OpBuilder &b, Location l, ValueRange args) -> Value {
                          if (args[1].getType().isInteger(32))
                            return b.create<LaneDotBf16Op>(l, args[2], args[0], args[1]);
                          Value product = b.create<arith::MulFOp>(l, args[0], args[1]);
                          return b.create<arith::AddFOp>(l, args[2], product);
                        });
  }

  /// [M, N/P, K/32, P] i32 block sums of the activation codes times the weight codes (loops m,
  /// panel, column, block, lane in block; the last one the reduction), from activation lanes
  /// `x` [M, K/32, L] and weight lanes `codes` viewed as [N/P, K/32, L, P].
  static Value blockPartials(OpBuilder &b, Location loc, ValueRange x, Value codes, int64_t lanesPerBlock,
                             BodyBuilder body) {
    MLIRContext *ctx = b.getContext();
    ArrayRef<int64_t> packed = rankedType(codes).getShape();
    int64_t m = rankedType(x[0]).getDimSize(0), blocks = rankedType(x[0]).getDimSize(1);
    Value init = zeros(b, loc, {m, packed[0], blocks, packed[2]}, b.getI32Type());
    AffineExpr mDim, panel, column, blockDim, lane;
    bindDims(ctx, mDim, panel, column, blockDim, lane);
    SmallVector<AffineMap> maps(x.size(), AffineMap::get(5, 0, {mDim, blockDim, lane}, ctx));
    maps.push_back(AffineMap::get(5, 0, {panel, blockDim, lane, column}, ctx));
    SmallVector<IteratorType> iterators(4, IteratorType::parallel);
    iterators.push_back(IteratorType::reduction);
    SmallVector<Value> inputs(x);
    inputs.push_back(splitDim(b, loc, codes, 1, {blocks, lanesPerBlock}));
    Value partials = buildGeneric(b, loc, init, inputs, maps,
                                  AffineMap::get(5, 0, {mDim, panel, blockDim, column}, ctx), iterators, body);
    gpt::codegen::markBlockPartials(partials.getDefiningOp());
    return partials;
  }

  /// q8_0: each weight byte is a signed code; flipping its top bit adds 128, the unsigned byte
  /// vpdpbusd multiplies (the compensation takes 128 * sum(code_x) back out).
  static Value q8Partials(OpBuilder &b, Location loc, Value x, Value codes) {
    return blockPartials(b, loc, {x}, codes, PackedMatmulOp::kBlockSize / 4,
                         [](OpBuilder &b, Location l, ValueRange args) -> Value {
                           Value weight = b.create<arith::XOrIOp>(l, args[1], i32Constant(b, l, 0x80808080));
                           return b.create<LaneDotU8I8Op>(l, args[2], weight, args[0]);
                         });
  }

  /// q4_0 and q4_1: a weight lane's low nibbles are unsigned codes for activation lane o of the
  /// block, its high nibbles for lane o + 4 (q4_0's compensation takes 8 * sum(code_x) back out).
  static Value q4Partials(OpBuilder &b, Location loc, Value x, Value codes) {
    const int64_t lanesPerBlock = PackedMatmulOp::kBlockSize / 8;
    Value pairs = splitDim(b, loc, x, 2, {2, lanesPerBlock});
    return blockPartials(b, loc, {sliceAt(b, loc, pairs, 2, 0), sliceAt(b, loc, pairs, 2, 1)}, codes, lanesPerBlock,
                         [](OpBuilder &b, Location l, ValueRange args) -> Value {
                           Value nibbles = i32Constant(b, l, 0x0F0F0F0F);
                           Value low = b.create<arith::AndIOp>(l, args[2], nibbles);
                           Value shifted = b.create<arith::ShRUIOp>(l, args[2], i32Constant(b, l, 4));
                           Value high = b.create<arith::AndIOp>(l, shifted, nibbles);
                           Value sum = b.create<LaneDotU8I8Op>(l, args[3], low, args[0]);
                           return b.create<LaneDotU8I8Op>(l, sum, high, args[1]);
                         });
  }

  /// [M, N/P, P] sums over blocks of (partial - compensation) * d_w * d_x (loops m, panel,
  /// column, block).
  static Value scaledBlocks(OpBuilder &b, Location loc, Value partials, Value scales, const QuantizedActivations &x,
                            Value init) {
    MLIRContext *ctx = b.getContext();
    AffineExpr mDim, panel, column, blockDim;
    bindDims(ctx, mDim, panel, column, blockDim);
    AffineMap perRowBlock = AffineMap::get(4, 0, {mDim, blockDim}, ctx);
    SmallVector<AffineMap> inputMaps = {AffineMap::get(4, 0, {mDim, panel, blockDim, column}, ctx),
                                        AffineMap::get(4, 0, {panel, blockDim, column}, ctx), perRowBlock, perRowBlock};
    SmallVector<IteratorType> iterators = {IteratorType::parallel, IteratorType::parallel, IteratorType::parallel,
                                           IteratorType::reduction};
    return buildGeneric(b, loc, init, {partials, scales, x.scales, x.compensations}, inputMaps,
                        AffineMap::get(4, 0, {mDim, panel, column}, ctx), iterators,
                        [](OpBuilder &b, Location l, ValueRange args) -> Value {
                          // Both terms are integers below 2^24: their difference is exact.
                          Type f32 = b.getF32Type();
                          Value sum = b.create<arith::SubFOp>(l, b.create<arith::SIToFPOp>(l, f32, args[0]), args[3]);
                          Value scale = b.create<arith::MulFOp>(l, b.create<arith::ExtFOp>(l, f32, args[1]), args[2]);
                          return b.create<math::FmaOp>(l, sum, scale, args[4]);
                        });
  }

  /// q4_1: [M, N/P, P] sums over blocks of d_x * (d_w * partial + min_w * sum(code_x)), the
  /// scales [N/P, K/32, 2, P] read as two [N/P, K/32, P] views (loops m, panel, column, block).
  static Value scaledBlocksWithMins(OpBuilder &b, Location loc, Value partials, Value scalesAndMins,
                                    const QuantizedActivations &x, Value init) {
    MLIRContext *ctx = b.getContext();
    AffineExpr mDim, panel, column, blockDim;
    bindDims(ctx, mDim, panel, column, blockDim);
    AffineMap perRowBlock = AffineMap::get(4, 0, {mDim, blockDim}, ctx);
    AffineMap perColumnBlock = AffineMap::get(4, 0, {panel, blockDim, column}, ctx);
    SmallVector<AffineMap> inputMaps = {AffineMap::get(4, 0, {mDim, panel, blockDim, column}, ctx), perColumnBlock,
                                        perColumnBlock, perRowBlock, perRowBlock};
    SmallVector<IteratorType> iterators = {IteratorType::parallel, IteratorType::parallel, IteratorType::parallel,
                                           IteratorType::reduction};
    Value scales = sliceAt(b, loc, scalesAndMins, 2, 0), mins = sliceAt(b, loc, scalesAndMins, 2, 1);
    return buildGeneric(b, loc, init, {partials, scales, mins, x.scales, x.compensations}, inputMaps,
                        AffineMap::get(4, 0, {mDim, panel, column}, ctx), iterators,
                        [](OpBuilder &b, Location l, ValueRange args) -> Value {
                          Type f32 = b.getF32Type();
                          Value scale = b.create<arith::MulFOp>(l, b.create<arith::ExtFOp>(l, f32, args[1]), args[3]);
                          Value minScale =
                              b.create<arith::MulFOp>(l, b.create<arith::ExtFOp>(l, f32, args[2]), args[3]);
                          Value withMin = b.create<math::FmaOp>(l, args[4], minScale, args[5]);
                          return b.create<math::FmaOp>(l, b.create<arith::SIToFPOp>(l, f32, args[0]), scale, withMin);
                        });
  }

  /// q4_K's code sums times their block's d_x, [M, K/32] f32: one product per row and block, which
  /// the matmul's min term then reads as is instead of multiplying d_x into it per column.
  static Value scaledCompensations(OpBuilder &b, Location loc, const QuantizedActivations &x) {
    ArrayRef<int64_t> shape = rankedType(x.scales).getShape();
    AffineMap identity = b.getMultiDimIdentityMap(2);
    Value scaled = buildParallel(b, loc, shape, b.getF32Type(), {x.compensations, x.scales}, {identity, identity},
                                 [](OpBuilder &b, Location l, ValueRange args) -> Value {
                                   return b.create<arith::MulFOp>(l, args[0], args[1]);
                                 });
    gpt::codegen::markQuantizesActivations(scaled.getDefiningOp());
    return scaled;
  }

  /// q4_K: [M, N/P, P] sums over sub-blocks of d_x * d * sc * partial - dmin * m * (d_x * sum(code_x)),
  /// the products in f32, the last factor read per row and block (scaledCompensations: four float
  /// operations per row and column of a sub-block, where d_x * (...) took five), from the scales
  /// [N/P, K/32 + K/128, P]: the sub-blocks' (sc | m << 8) bits read as a [N/P, K/32, P] view, and
  /// the super-blocks' (d, dmin) rows as two [N/P, K/256, P] views at super-block block / 8 (loops
  /// m, panel, column, block: the schedule steps the block loop one sub-block at a time, so each
  /// step reads one of each per column).
  static Value scaledSubBlocks(OpBuilder &b, Location loc, Value partials, Value scales, Value xScales,
                               Value scaledCompensations, Value init) {
    MLIRContext *ctx = b.getContext();
    constexpr int64_t subBlocks = PackedMatmulOp::kSuperBlockSize / PackedMatmulOp::kBlockSize;
    AffineExpr mDim, panel, column, blockDim;
    bindDims(ctx, mDim, panel, column, blockDim);
    AffineMap perRowBlock = AffineMap::get(4, 0, {mDim, blockDim}, ctx);
    AffineMap perColumnBlock = AffineMap::get(4, 0, {panel, blockDim, column}, ctx);
    AffineMap perColumnSuper = AffineMap::get(4, 0, {panel, blockDim.floorDiv(subBlocks), column}, ctx);
    SmallVector<AffineMap> inputMaps = {AffineMap::get(4, 0, {mDim, panel, blockDim, column}, ctx),
                                        perColumnBlock,
                                        perColumnSuper,
                                        perColumnSuper,
                                        perRowBlock,
                                        perRowBlock};
    SmallVector<IteratorType> iterators = {IteratorType::parallel, IteratorType::parallel, IteratorType::parallel,
                                           IteratorType::reduction};
    ArrayRef<int64_t> shape = rankedType(scales).getShape();
    const int64_t blocks = rankedType(partials).getDimSize(2), superBlocks = blocks / subBlocks;
    auto rows = [&](int64_t first, int64_t count) -> Value {
      return b.create<tensor::ExtractSliceOp>(
          loc, scales, SmallVector<OpFoldResult>{b.getIndexAttr(0), b.getIndexAttr(first), b.getIndexAttr(0)},
          SmallVector<OpFoldResult>{b.getIndexAttr(shape[0]), b.getIndexAttr(count), b.getIndexAttr(shape[2])},
          SmallVector<OpFoldResult>(3, b.getIndexAttr(1)));
    };
    Value subScales = rows(0, blocks);
    Value pairs = splitDim(b, loc, rows(blocks, 2 * superBlocks), 1, {superBlocks, 2});
    Value d = sliceAt(b, loc, pairs, 2, 0), dmin = sliceAt(b, loc, pairs, 2, 1);
    return buildGeneric(
        b, loc, init, {partials, subScales, d, dmin, xScales, scaledCompensations}, inputMaps,
        AffineMap::get(4, 0, {mDim, panel, column}, ctx), iterators,
        [](OpBuilder &b, Location l, ValueRange args) -> Value {
          Type f32 = b.getF32Type(), i32 = b.getI32Type();
          // The 16 bits of the scale-min pair, widened: sc in bits 0-7, m in 8-15.
          Value bits = b.create<arith::ExtUIOp>(l, i32, b.create<arith::BitcastOp>(l, b.getI16Type(), args[1]));
          Value sc = b.create<arith::UIToFPOp>(l, f32, b.create<arith::AndIOp>(l, bits, i32Constant(b, l, 0xFF)));
          Value m = b.create<arith::UIToFPOp>(l, f32, b.create<arith::ShRUIOp>(l, bits, i32Constant(b, l, 8)));
          Value subScale = b.create<arith::MulFOp>(l, b.create<arith::ExtFOp>(l, f32, args[2]), sc);
          Value subMin = b.create<arith::MulFOp>(l, b.create<arith::ExtFOp>(l, f32, args[3]), m);
          Value scale = b.create<arith::MulFOp>(l, subScale, args[4]);
          // The scaled partial first, then the min term: each fma updates the accumulator in place (the
          // other order kept the partial's register and copied the accumulator, one move per row and column).
          Value withScaled = b.create<math::FmaOp>(l, b.create<arith::SIToFPOp>(l, f32, args[0]), scale, args[6]);
          return b.create<math::FmaOp>(l, args[5], b.create<arith::NegFOp>(l, subMin), withScaled);
        });
  }

  /// Rows first .. first + count - 1 of a [N/P, rows, P] scales operand.
  static Value scaleRows(OpBuilder &b, Location loc, Value scales, int64_t first, int64_t count) {
    ArrayRef<int64_t> shape = rankedType(scales).getShape();
    return b.create<tensor::ExtractSliceOp>(
        loc, scales, SmallVector<OpFoldResult>{b.getIndexAttr(0), b.getIndexAttr(first), b.getIndexAttr(0)},
        SmallVector<OpFoldResult>{b.getIndexAttr(shape[0]), b.getIndexAttr(count), b.getIndexAttr(shape[2])},
        SmallVector<OpFoldResult>(3, b.getIndexAttr(1)));
  }

  /// The two int8 run scales of a q6_K scale pair's 16 bits (`bits`, an f16 element), as i32:
  /// run 0's in the low byte, run 1's in the high one.
  static std::pair<Value, Value> runScalePair(OpBuilder &b, Location l, Value bits) {
    Value pair = b.create<arith::ExtSIOp>(l, b.getI32Type(), b.create<arith::BitcastOp>(l, b.getI16Type(), bits));
    Value low =
        b.create<arith::ShRSIOp>(l, b.create<arith::ShLIOp>(l, pair, i32Constant(b, l, 24)), i32Constant(b, l, 24));
    return {low, b.create<arith::ShRSIOp>(l, pair, i32Constant(b, l, 8))};
  }

  /// q6_K: [M, N/P, K/32, P] i32 sums per block of sc_0 * sum(code_x * c) over run 0 plus sc_1 *
  /// the same over run 1 (exact: below 2^25), from the activation lanes `x` [M, K/32, 8] (lanes
  /// 0-3 run 0's, 4-7 run 1's), the weight's 6 lanes per block (3 per run) and `runScales` [N/P,
  /// K/32, P] (loops m, panel, column, block and a unit loop, the reduction the schedule tiles).
  /// Each run's 4 code lanes are nibbles of its lanes 0 and 1 with their top bits from lane 2
  /// (LanePacking.h's q6_KRunWords), each multiplied with one activation lane by lane_dot_u8i8.
  static Value q6Partials(OpBuilder &b, Location loc, Value x, Value codes, Value runScales) {
    MLIRContext *ctx = b.getContext();
    constexpr int64_t wordsPerBlock = 2 * PackedMatmulOp::kQ6_KWordsPerRun, lanesPerBlock = 8;
    ArrayRef<int64_t> packed = rankedType(codes).getShape();
    const int64_t m = rankedType(x).getDimSize(0), blocks = rankedType(x).getDimSize(1);
    Value init = zeros(b, loc, {m, packed[0], blocks, packed[2]}, b.getI32Type());
    AffineExpr mDim, panel, column, blockDim, unit;
    bindDims(ctx, mDim, panel, column, blockDim, unit);
    auto unitSlice = [&](Value value, int64_t dim, int64_t at) -> Value {
      RankedTensorType type = rankedType(value);
      SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0)), sizes;
      offsets[dim] = b.getIndexAttr(at);
      for (int64_t i = 0; i < type.getRank(); ++i) sizes.push_back(b.getIndexAttr(i == dim ? 1 : type.getDimSize(i)));
      return b.create<tensor::ExtractSliceOp>(loc, value, offsets, sizes,
                                              SmallVector<OpFoldResult>(type.getRank(), b.getIndexAttr(1)));
    };
    SmallVector<Value> inputs;
    SmallVector<AffineMap> maps;
    for (int64_t q = 0; q < lanesPerBlock; ++q) {
      inputs.push_back(unitSlice(x, 2, q));
      maps.push_back(AffineMap::get(5, 0, {mDim, blockDim, unit}, ctx));
    }
    Value words = splitDim(b, loc, codes, 1, {blocks, wordsPerBlock});
    for (int64_t w = 0; w < wordsPerBlock; ++w) {
      inputs.push_back(unitSlice(words, 2, w));
      maps.push_back(AffineMap::get(5, 0, {panel, blockDim, unit, column}, ctx));
    }
    inputs.push_back(runScales);
    maps.push_back(AffineMap::get(5, 0, {panel, blockDim, column}, ctx));
    SmallVector<IteratorType> iterators(4, IteratorType::parallel);
    iterators.push_back(IteratorType::reduction);
    Value partials = buildGeneric(
        b, loc, init, inputs, maps, AffineMap::get(5, 0, {mDim, panel, blockDim, column}, ctx), iterators,
        [](OpBuilder &b, Location l, ValueRange args) -> Value {
          Value nibbles = i32Constant(b, l, 0x0F0F0F0F), tops = i32Constant(b, l, 0x30303030);
          auto runSum = [&](ValueRange lanes, Value low, Value odd, Value high) -> Value {
            // Lanes 0-3 of the run: low nibbles of `low`, of `odd`, high nibbles of `low`, of `odd`,
            // each with its 2 top bits from bits 2 l, 2 l + 1 of `high`'s bytes moved to bits 4-5.
            Value four = i32Constant(b, l, 4), two = i32Constant(b, l, 2);
            Value codes[4] = {
                b.create<arith::OrIOp>(l, b.create<arith::AndIOp>(l, low, nibbles),
                                       b.create<arith::AndIOp>(l, b.create<arith::ShLIOp>(l, high, four), tops)),
                b.create<arith::OrIOp>(l, b.create<arith::AndIOp>(l, odd, nibbles),
                                       b.create<arith::AndIOp>(l, b.create<arith::ShLIOp>(l, high, two), tops)),
                b.create<arith::OrIOp>(l, b.create<arith::AndIOp>(l, b.create<arith::ShRUIOp>(l, low, four), nibbles),
                                       b.create<arith::AndIOp>(l, high, tops)),
                b.create<arith::OrIOp>(l, b.create<arith::AndIOp>(l, b.create<arith::ShRUIOp>(l, odd, four), nibbles),
                                       b.create<arith::AndIOp>(l, b.create<arith::ShRUIOp>(l, high, two), tops))};
            Value sum = i32Constant(b, l, 0);
            for (int64_t lane = 0; lane < 4; ++lane) sum = b.create<LaneDotU8I8Op>(l, sum, codes[lane], lanes[lane]);
            return sum;
          };
          Value first = runSum(args.slice(0, 4), args[8], args[9], args[10]);
          Value second = runSum(args.slice(4, 4), args[11], args[12], args[13]);
          auto [scale0, scale1] = runScalePair(b, l, args[14]);
          Value scaled = b.create<arith::AddIOp>(l, b.create<arith::MulIOp>(l, first, scale0),
                                                 b.create<arith::MulIOp>(l, second, scale1));
          return b.create<arith::AddIOp>(l, args[15], scaled);
        });
    gpt::codegen::markBlockPartials(partials.getDefiningOp());
    return partials;
  }

  /// q6_K: [M, N/P, P] sums over blocks of d_x * d * (partial - 32 (sc_0 * sum_0(code_x) + sc_1 *
  /// sum_1(code_x))), the difference exact in i32 and below 2^24 (so exact in f32), from the run
  /// scale pairs [N/P, K/32, P] and the super-blocks' d rows [N/P, K/256, P] at block / 8 (loops m,
  /// panel, column, block).
  static Value scaledRunPairs(OpBuilder &b, Location loc, Value partials, Value runScales, Value superScales,
                              const QuantizedActivations &x, Value init) {
    MLIRContext *ctx = b.getContext();
    constexpr int64_t blocksPerSuper = PackedMatmulOp::kSuperBlockSize / PackedMatmulOp::kBlockSize;
    AffineExpr mDim, panel, column, blockDim;
    bindDims(ctx, mDim, panel, column, blockDim);
    AffineMap perRowBlock = AffineMap::get(4, 0, {mDim, blockDim}, ctx);
    const int64_t blocks = rankedType(partials).getDimSize(2);
    Value pairs = splitDim(b, loc, x.compensations, 1, {blocks, 2});
    SmallVector<AffineMap> inputMaps = {AffineMap::get(4, 0, {mDim, panel, blockDim, column}, ctx),
                                        AffineMap::get(4, 0, {panel, blockDim, column}, ctx),
                                        AffineMap::get(4, 0, {panel, blockDim.floorDiv(blocksPerSuper), column}, ctx),
                                        perRowBlock,
                                        perRowBlock,
                                        perRowBlock};
    SmallVector<IteratorType> iterators = {IteratorType::parallel, IteratorType::parallel, IteratorType::parallel,
                                           IteratorType::reduction};
    return buildGeneric(
        b, loc, init,
        {partials, runScales, superScales, x.scales, sliceAt(b, loc, pairs, 2, 0), sliceAt(b, loc, pairs, 2, 1)},
        inputMaps, AffineMap::get(4, 0, {mDim, panel, column}, ctx), iterators,
        [](OpBuilder &b, Location l, ValueRange args) -> Value {
          Type f32 = b.getF32Type(), i32 = b.getI32Type();
          auto [scale0, scale1] = runScalePair(b, l, args[1]);
          // 32 sc sum(code_x) per run, each below 2^23, their sum below 2^24: exact in f32.
          Value compensation =
              b.create<math::FmaOp>(l, b.create<arith::SIToFPOp>(l, f32, scale1), args[5],
                                    b.create<arith::MulFOp>(l, b.create<arith::SIToFPOp>(l, f32, scale0), args[4]));
          Value sum = b.create<arith::SubIOp>(l, args[0], b.create<arith::FPToSIOp>(l, i32, compensation));
          Value scale = b.create<arith::MulFOp>(l, b.create<arith::ExtFOp>(l, f32, args[2]), args[3]);
          return b.create<math::FmaOp>(l, b.create<arith::SIToFPOp>(l, f32, sum), scale, args[6]);
        });
  }
};

} // namespace

void populateMatmulLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<MatmulLowering, PackedMatmulLowering>(patterns.getContext());
}

} // namespace gpt::conversion
