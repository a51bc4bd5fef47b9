// Lowering of matmul (linalg.matmul / batch_matmul) and packed_matmul (a linalg.generic over panels).
#include "cc/codegen/common/CodegenAttributes.h"
#include "cc/conversion/LoweringUtils.h"
#include "cc/conversion/Passes.h"
#include "cc/conversion/QuantizedActivations.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/DialectConversion.h"

#include <limits>
#include <optional>

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

using IteratorType = utils::IteratorType;

/// [M, K] x [N/P, K, P] as one linalg.generic over (m, panel, column, k) that writes [M, N/P, P]:
/// a register tile of one panel's P columns reads the weight from consecutive addresses. The
/// result is then viewed (collapse_shape, no copy) as [M, N].
///
/// A low-precision weight multiplies activations converted to its lanes (see the op): bf16
/// lanes with transformer.lane_dot_bf16 over K/2 steps. A block-quantized weight (32-value blocks)
/// applies each block's scales once per block, as llama.cpp does, in two generics:
/// - the block sums `partial[m, panel, block, column] = sum over the block of code_x * code_w`
///   in i32, with transformer.lane_dot_u8i8 (marked `gpt.block_partials`); for the K-quants,
///   whose activations have one scale per super-block of 256 (llama.cpp's q4_K x q8_K), the sums
///   per super-block of each block's sum times its integer scale, still in i32;
/// - their scaled sum over blocks, `out += (partial - compensation) * d_w * d_x` (q4_1 and q5_1:
///   `out += d_x * (d_w * partial + min_w * compensation)`; q4_K and q5_K, per super-block:
///   `out += d_x * (d * partial - dmin * sum over sub-blocks of m * compensation)`; q6_K: `out +=
///   d_x * d * partial`), the packed
///   matmul proper (loops M, panel, column, block), which the schedule tiles like an f32 one and
///   into whose block loop it fuses the partial sums (transform.gpt.vectorize_block_matmul), so
///   that they live in registers and are never stored.
/// Float accumulation uses math.fma: the JIT does not contract a mulf and an addf into one.
struct PackedMatmulLowering : OpConversionPattern<PackedMatmulOp> {
  using OpConversionPattern::OpConversionPattern;
  /// A K-quant super-block's blocks of 32.
  static constexpr int64_t kSubBlocks = PackedMatmulOp::kSuperBlockSize / PackedMatmulOp::kBlockSize;
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
    const WeightFormat format = op.getWeightFormat().format;
    switch (format) {
    case WeightFormat::F32:
      panels = plainPanels(rewriter, loc, lhs, adaptor.getRhs(), init);
      break;
    case WeightFormat::BF16:
      panels = plainPanels(rewriter, loc, bf16Lanes(rewriter, loc, lhs), adaptor.getRhs(), init);
      break;
    case WeightFormat::Q8_0:
    case WeightFormat::Q4_0:
    case WeightFormat::Q4_1:
    case WeightFormat::Q5_0:
    case WeightFormat::Q5_1: {
      // The unsigned codes' offset from the true ones (none where a min takes its place).
      const bool withMins = op.getWeightFormat().hasMins;
      const int64_t offset = withMins ? 1 : format == WeightFormat::Q8_0 ? 128 : format == WeightFormat::Q5_0 ? 16 : 8;
      QuantizedActivations x = quantizeActivations(rewriter, loc, lhs, offset);
      Value partials = format == WeightFormat::Q8_0           ? q8Partials(rewriter, loc, x.lanes, adaptor.getRhs())
                       : op.getWeightFormat().codeBits() == 5 ? q5Partials(rewriter, loc, x.lanes, adaptor.getRhs())
                                                              : q4Partials(rewriter, loc, x.lanes, adaptor.getRhs());
      panels = withMins ? scaledBlocksWithMins(rewriter, loc, partials, adaptor.getScales(), x, init)
                        : scaledBlocks(rewriter, loc, partials, adaptor.getScales(), x, init);
      break;
    }
    case WeightFormat::Q4_K:
    case WeightFormat::Q5_K: {
      QuantizedActivations x = quantizeActivationsPerSuperBlock(rewriter, loc, lhs);
      Value scales = adaptor.getScales();
      const int64_t blocks = rankedType(x.lanes).getDimSize(1);
      Value subScales = scaleRows(rewriter, loc, scales, 0, blocks);
      Value partials = subBlockScaledPartials(rewriter, loc, x.lanes, adaptor.getRhs(), subScales,
                                              format == WeightFormat::Q5_K ? PackedMatmulOp::kQ5_KWordsPerBlock
                                                                           : PackedMatmulOp::kBlockSize / 8);
      // The super-blocks' (d, dmin) row pairs.
      Value pairs =
          splitDim(rewriter, loc, scaleRows(rewriter, loc, scales, blocks, rankedType(scales).getDimSize(1) - blocks),
                   1, {rankedType(x.scales).getDimSize(1), 2});
      Value d = sliceAt(rewriter, loc, pairs, 2, 0), dmin = sliceAt(rewriter, loc, pairs, 2, 1);
      panels = scaledSuperBlocks(rewriter, loc, partials, d, x.scales, SuperBlockMins{dmin, subScales, x.compensations},
                                 init);
      break;
    }
    case WeightFormat::Q6_K: {
      QuantizedActivations x = quantizeActivationRuns(rewriter, loc, lhs);
      Value scales = adaptor.getScales();
      const int64_t blocks = rankedType(x.lanes).getDimSize(1);
      Value partials = q6Partials(rewriter, loc, x, adaptor.getRhs(), scaleRows(rewriter, loc, scales, 0, blocks));
      panels = scaledSuperBlocks(rewriter, loc, partials,
                                 scaleRows(rewriter, loc, scales, blocks, rankedType(scales).getDimSize(1) - blocks),
                                 x.scales, std::nullopt, init);
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
                           return nibbleCodeSum(b, l, args.take_front(2), args.slice(2, 1), {}, args[3]);
                         });
  }

  /// q5_0 and q5_1: [M, N/P, K/32, P] i32 block sums of a whole block a step (groupedBlockPartials
  /// with groups of one block): its 4 nibble words and its fifth bits (q5_K's lane words, the
  /// codes unsigned; q5_0's compensation takes 16 * sum(code_x) back out) against its 8
  /// activation lanes. The fifth bits go to each lane by constant shifts, as q5_K's do, which a
  /// loop over the block's lanes would make variable.
  static Value q5Partials(OpBuilder &b, Location loc, Value x, Value codes) {
    constexpr int64_t lanesPerBlock = 8, nibbleWords = PackedMatmulOp::kBlockSize / 8;
    return groupedBlockPartials(b, loc, x, codes, PackedMatmulOp::kQ5_KWordsPerBlock, 1, {}, {},
                                [](OpBuilder &b, Location l, ValueRange args) -> Value {
                                  return nibbleCodeSum(b, l, args.take_front(lanesPerBlock),
                                                       args.slice(lanesPerBlock, nibbleWords),
                                                       args[lanesPerBlock + nibbleWords], args.back());
                                });
  }

  /// `sum` plus the dot products of nibble-packed weight codes with activation lanes: word o of
  /// `nibbleWords` holds in its low nibbles the codes `lanes[o]` multiplies, in its high nibbles
  /// those of `lanes[o + nibbleWords.size()]` (q4_0's lane order: one word and two lanes per step
  /// of q4_0's and q4_1's partial sums; a whole q4_K, q5_K, q5_0 or q5_1 block, 4 words and 8
  /// lanes, kernels/FormatKernels.h). The 5-bit formats' `fifths` word has in bit j code j's fifth bit: lane l (its
  /// byte i: code l + 8 i) takes bits l + 8 i, moved to bit 4 of byte i by one shift (left by 4 -
  /// l, right by l - 4) and a mask, or'ed into its nibbles.
  static Value nibbleCodeSum(OpBuilder &b, Location l, ValueRange lanes, ValueRange nibbleWords, Value fifths,
                             Value sum) {
    const int64_t words = nibbleWords.size();
    Value nibbles = i32Constant(b, l, 0x0F0F0F0F), fifthBits = fifths ? i32Constant(b, l, 0x10101010) : Value();
    auto code = [&](Value nibble, int64_t lane) -> Value {
      if (!fifths) return nibble;
      Value moved = lane < 4   ? b.create<arith::ShLIOp>(l, fifths, i32Constant(b, l, 4 - lane))
                    : lane > 4 ? b.create<arith::ShRUIOp>(l, fifths, i32Constant(b, l, lane - 4))
                               : fifths;
      return b.create<arith::OrIOp>(l, nibble, b.create<arith::AndIOp>(l, moved, fifthBits));
    };
    for (int64_t o = 0; o < words; ++o) {
      Value low = b.create<arith::AndIOp>(l, nibbleWords[o], nibbles);
      Value high =
          b.create<arith::AndIOp>(l, b.create<arith::ShRUIOp>(l, nibbleWords[o], i32Constant(b, l, 4)), nibbles);
      sum = b.create<LaneDotU8I8Op>(l, sum, code(low, o), lanes[o]);
      sum = b.create<LaneDotU8I8Op>(l, sum, code(high, o + words), lanes[o + words]);
    }
    return sum;
  }

  /// [M, N/P, K/(32 g), P] i32 sums over each group of `g` blocks of what `body` makes of a whole
  /// block: the K-quants' super-blocks (g = 8) with llama.cpp's q8_K activations, one scale per
  /// super-block, so that the blocks' sums, each weighed by its own integer scales, add up exactly
  /// in i32; q5_0's and q5_1's single blocks (g = 1). Loops m, panel, column, group and block, the
  /// last the reduction, which the schedule tiles by one (and keeps a loop where g > 1). The
  /// body's arguments: the block's 8 activation lanes of `x` [M, K/32, 8], its `wordsPerBlock`
  /// words of `codes` [N/P, K/32 * wordsPerBlock, P] for one column, the block's value of each of
  /// `perColumnBlock` ([N/P, K/32, P]) and of `perRowBlock` ([M, K/32]), and the accumulator.
  static Value groupedBlockPartials(OpBuilder &b, Location loc, Value x, Value codes, int64_t wordsPerBlock,
                                    int64_t blocksPerGroup, ValueRange perColumnBlock, ValueRange perRowBlock,
                                    BodyBuilder body) {
    MLIRContext *ctx = b.getContext();
    constexpr int64_t lanesPerBlock = 8;
    ArrayRef<int64_t> packed = rankedType(codes).getShape();
    const int64_t m = rankedType(x).getDimSize(0), groups = rankedType(x).getDimSize(1) / blocksPerGroup;
    Value init = zeros(b, loc, {m, packed[0], groups, packed[2]}, b.getI32Type());
    AffineExpr mDim, panel, column, group, sub;
    bindDims(ctx, mDim, panel, column, group, sub);
    AffineMap perRow = AffineMap::get(5, 0, {mDim, group, sub}, ctx);
    AffineMap perColumn = AffineMap::get(5, 0, {panel, group, sub, column}, ctx);
    SmallVector<Value> inputs;
    SmallVector<AffineMap> maps;
    Value lanes = splitDim(b, loc, x, 1, {groups, blocksPerGroup});
    for (int64_t lane = 0; lane < lanesPerBlock; ++lane) {
      inputs.push_back(sliceAt(b, loc, lanes, 3, lane));
      maps.push_back(perRow);
    }
    Value words = splitDim(b, loc, codes, 1, {groups, blocksPerGroup, wordsPerBlock});
    for (int64_t w = 0; w < wordsPerBlock; ++w) {
      inputs.push_back(sliceAt(b, loc, words, 3, w));
      maps.push_back(perColumn);
    }
    for (Value value : perColumnBlock) {
      inputs.push_back(splitDim(b, loc, value, 1, {groups, blocksPerGroup}));
      maps.push_back(perColumn);
    }
    for (Value value : perRowBlock) {
      inputs.push_back(splitDim(b, loc, value, 1, {groups, blocksPerGroup}));
      maps.push_back(perRow);
    }
    SmallVector<IteratorType> iterators(4, IteratorType::parallel);
    iterators.push_back(IteratorType::reduction);
    Value partials = buildGeneric(b, loc, init, inputs, maps, AffineMap::get(5, 0, {mDim, panel, group, column}, ctx),
                                  iterators, body);
    gpt::codegen::markBlockPartials(partials.getDefiningOp(), blocksPerGroup);
    return partials;
  }

  /// q4_K and q5_K: [M, N/P, K/256, P] i32 sums per super-block of sc * sum(code_x * code_w) over
  /// its 8 sub-blocks (groupedBlockPartials), sc the sub-block's 6-bit scale (llama.cpp's q4_K x
  /// q8_K), exact in i32 (below 2^26), from the sub-blocks' (sc | m << 8) bits `subScales` [N/P,
  /// K/32, P].
  static Value subBlockScaledPartials(OpBuilder &b, Location loc, Value x, Value codes, Value subScales,
                                      int64_t wordsPerBlock) {
    constexpr int64_t lanesPerBlock = 8;
    return groupedBlockPartials(
        b, loc, x, codes, wordsPerBlock, kSubBlocks, {subScales}, {},
        [wordsPerBlock](OpBuilder &b, Location l, ValueRange args) -> Value {
          constexpr int64_t nibbleWords = PackedMatmulOp::kBlockSize / 8;
          Value fifths = wordsPerBlock > nibbleWords ? args[lanesPerBlock + nibbleWords] : Value();
          Value sum = nibbleCodeSum(b, l, args.take_front(lanesPerBlock), args.slice(lanesPerBlock, nibbleWords),
                                    fifths, i32Constant(b, l, 0));
          Value sc = b.create<arith::AndIOp>(l, scaleMinBits(b, l, args[lanesPerBlock + wordsPerBlock]),
                                             i32Constant(b, l, 0xFF));
          return b.create<arith::AddIOp>(l, args.back(), b.create<arith::MulIOp>(l, sum, sc));
        });
  }

  /// A q4_K or q5_K sub-block's scale-min pair (an f16 element of the scales) as the i32 of its
  /// 16 bits: sc in bits 0-7, m in bits 8-15.
  static Value scaleMinBits(OpBuilder &b, Location l, Value pair) {
    return b.create<arith::ExtUIOp>(l, b.getI32Type(), b.create<arith::BitcastOp>(l, b.getI16Type(), pair));
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
  /// scales [N/P, K/16, P] (block b's scale in row 2 b, its min in row 2 b + 1) read as two
  /// [N/P, K/32, P] views (loops m, panel, column, block).
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
    const int64_t blocks = rankedType(scalesAndMins).getDimSize(1) / 2;
    Value pairs = splitDim(b, loc, scalesAndMins, 1, {blocks, 2});
    Value scales = sliceAt(b, loc, pairs, 2, 0), mins = sliceAt(b, loc, pairs, 2, 1);
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

  /// The min term of q4_K's and q5_K's scaled sum: the super-blocks' dmin rows [N/P, K/256, P], the
  /// sub-blocks' (sc | m << 8) bits [N/P, K/32, P] and the activations' code sums [M, K/32].
  struct SuperBlockMins {
    Value dmin, subScales, codeSums;
  };

  /// The K-quants: [M, N/P, P] sums over super-blocks of d_x * d * partial (groupedBlockPartials),
  /// less, for q4_K and q5_K, d_x * dmin * the sum over its sub-blocks of m * sum(code_x) (exact in
  /// f32: below 2^22), from the super-blocks' d rows `d` [N/P, K/256, P] and the activations' scales
  /// per super-block `xScales` [M, K/256] (loops m, panel, column, super-block).
  static Value scaledSuperBlocks(OpBuilder &b, Location loc, Value partials, Value d, Value xScales,
                                 std::optional<SuperBlockMins> mins, Value init) {
    MLIRContext *ctx = b.getContext();
    constexpr int64_t subBlocks = PackedMatmulOp::kSuperBlockSize / PackedMatmulOp::kBlockSize;
    const int64_t superBlocks = rankedType(partials).getDimSize(2);
    AffineExpr mDim, panel, column, superDim;
    bindDims(ctx, mDim, panel, column, superDim);
    AffineMap perRowSuper = AffineMap::get(4, 0, {mDim, superDim}, ctx);
    AffineMap perColumnSuper = AffineMap::get(4, 0, {panel, superDim, column}, ctx);
    SmallVector<Value> inputs = {partials, d};
    SmallVector<AffineMap> maps = {AffineMap::get(4, 0, {mDim, panel, superDim, column}, ctx), perColumnSuper};
    if (mins) {
      inputs.push_back(mins->dmin);
      maps.push_back(perColumnSuper);
    }
    inputs.push_back(xScales);
    maps.push_back(perRowSuper);
    if (mins) {
      Value subScalesBySuper = splitDim(b, loc, mins->subScales, 1, {superBlocks, subBlocks});
      Value codeSums = splitDim(b, loc, mins->codeSums, 1, {superBlocks, subBlocks});
      for (int64_t sub = 0; sub < subBlocks; ++sub) {
        inputs.push_back(sliceAt(b, loc, subScalesBySuper, 2, sub));
        maps.push_back(perColumnSuper);
        inputs.push_back(sliceAt(b, loc, codeSums, 2, sub));
        maps.push_back(perRowSuper);
      }
    }
    SmallVector<IteratorType> iterators = {IteratorType::parallel, IteratorType::parallel, IteratorType::parallel,
                                           IteratorType::reduction};
    const bool withMins = mins.has_value();
    return buildGeneric(
        b, loc, init, inputs, maps, AffineMap::get(4, 0, {mDim, panel, column}, ctx), iterators,
        [withMins](OpBuilder &b, Location l, ValueRange args) -> Value {
          Type f32 = b.getF32Type();
          Value dx = args[withMins ? 3 : 2];
          Value minSum;
          for (int64_t sub = 0; withMins && sub < subBlocks; ++sub) {
            Value bits = scaleMinBits(b, l, args[4 + 2 * sub]);
            Value m = b.create<arith::UIToFPOp>(l, f32, b.create<arith::ShRUIOp>(l, bits, i32Constant(b, l, 8)));
            Value codeSum = args[5 + 2 * sub];
            minSum = minSum ? b.create<math::FmaOp>(l, m, codeSum, minSum).getResult()
                            : b.create<arith::MulFOp>(l, m, codeSum).getResult();
          }
          Value scale = b.create<arith::MulFOp>(l, b.create<arith::ExtFOp>(l, f32, args[1]), dx);
          Value minScale =
              withMins ? b.create<arith::MulFOp>(l, b.create<arith::ExtFOp>(l, f32, args[2]), dx) : Value();
          // The scaled partial first, then the min term: each fma updates the accumulator in place.
          Value withScaled = b.create<math::FmaOp>(l, b.create<arith::SIToFPOp>(l, f32, args[0]), scale, args.back());
          if (!withMins) return withScaled;
          return b.create<math::FmaOp>(l, minSum, b.create<arith::NegFOp>(l, minScale), withScaled);
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

  /// q6_K: [M, N/P, K/256, P] i32 sums per super-block (groupedBlockPartials) of sc_r * (sum(code_x
  /// * c) - 32 sum(code_x)) over each block's two runs r: the true codes c - 32, weighed by the
  /// runs' int8 scales, exact in i32 (below 2^29), from the activation lanes of `x` (lanes 0-3 run
  /// 0's, 4-7 run 1's) and its compensations (32 times each run's code sum), the weight's 6 lanes
  /// per block (3 per run) and `runScales` [N/P, K/32, P].
  /// Each run's 4 code lanes are nibbles of its lanes 0 and 1 with their top bits from lane 2
  /// (kernels/FormatKernels.h's q6_KRunWords), each multiplied with one activation lane by lane_dot_u8i8.
  static Value q6Partials(OpBuilder &b, Location loc, const QuantizedActivations &x, Value codes, Value runScales) {
    constexpr int64_t wordsPerBlock = 2 * PackedMatmulOp::kQ6_KWordsPerRun;
    const int64_t blocks = rankedType(x.lanes).getDimSize(1);
    Value pairs = splitDim(b, loc, x.compensations, 1, {blocks, 2});
    return groupedBlockPartials(
        b, loc, x.lanes, codes, wordsPerBlock, kSubBlocks, {runScales},
        {sliceAt(b, loc, pairs, 2, 0), sliceAt(b, loc, pairs, 2, 1)},
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
          // 32 times each run's code sum, an integer below 2^17 (exact in f32).
          Type i32 = b.getI32Type();
          Value true0 = b.create<arith::SubIOp>(l, first, b.create<arith::FPToSIOp>(l, i32, args[15]));
          Value true1 = b.create<arith::SubIOp>(l, second, b.create<arith::FPToSIOp>(l, i32, args[16]));
          Value scaled = b.create<arith::AddIOp>(l, b.create<arith::MulIOp>(l, true0, scale0),
                                                 b.create<arith::MulIOp>(l, true1, scale1));
          return b.create<arith::AddIOp>(l, args[17], scaled);
        });
  }
};

} // namespace

void populateMatmulLoweringPatterns(RewritePatternSet &patterns) {
  patterns.add<MatmulLowering, PackedMatmulLowering>(patterns.getContext());
}

} // namespace gpt::conversion
