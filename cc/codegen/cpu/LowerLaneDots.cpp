// --gpt-lower-lane-dots: transformer.lane_dot_* to vdpbf16ps / vpdpbusd, or to plain arithmetic
// on a CPU without them, and the code unpacking's byte-local shifts and masks to vgf2p8affineqb
// where the CPU has GFNI (see Passes.td).
#include "cc/codegen/cpu/Passes.h"

#include "cc/codegen/cpu/CodeByteBounds.h"

#include "cc/codegen/common/CodegenAttributes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <algorithm>
#include <optional>

namespace gpt::codegen {
using namespace mlir;
using mlir::transformer::LaneDotBf16Op;
using mlir::transformer::LaneDotU8I8Op;

#define GEN_PASS_DEF_LOWERLANEDOTS
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

/// 32-bit lanes per zmm register: one instruction's worth.
constexpr int64_t kLanes = 16;

/// A constant of `type` (i32 or f32, scalar or vector) with every lane `value`.
Value splat(OpBuilder &b, Location loc, Type type, Attribute value) {
  if (auto vector = dyn_cast<VectorType>(type))
    return b.create<arith::ConstantOp>(loc, DenseElementsAttr::get(vector, value));
  return b.create<arith::ConstantOp>(loc, cast<TypedAttr>(value));
}
Value i32Splat(OpBuilder &b, Location loc, Type type, int64_t value) {
  return splat(b, loc, type, b.getI32IntegerAttr(static_cast<int32_t>(value)));
}

/// Rewrites `op` piece by piece: `emit` builds the result of each `pieceLanes`-lane piece of each
/// row (innermost dim) from the pieces of `operands` (vectors of op's result shape: a lane dot's
/// accumulator, lhs and rhs), and the pieces are reassembled. Fails unless the result is a vector
/// whose rows are a multiple of `pieceLanes`. Rows are taken with vector.extract, which folds
/// through the broadcasts and inserts the vectorizer made.
using PieceEmitter = llvm::function_ref<Value(PatternRewriter &, Location, ValueRange pieces)>;
LogicalResult rewritePerPiece(PatternRewriter &rewriter, Operation *op, ValueRange operands, int64_t pieceLanes,
                              PieceEmitter emit) {
  auto type = dyn_cast<VectorType>(op->getResult(0).getType());
  if (!type || type.isScalable() || type.getShape().back() % pieceLanes != 0) return failure();
  Location loc = op->getLoc();
  ArrayRef<int64_t> leading = type.getShape().drop_back();
  const int64_t rowLanes = type.getShape().back();
  int64_t rows = 1;
  for (int64_t size : leading) rows *= size;
  Value result = rewriter.create<arith::ConstantOp>(loc, type, rewriter.getZeroAttr(type));
  for (int64_t row = 0; row < rows; ++row) {
    // The row's position in the leading dims, innermost fastest.
    SmallVector<int64_t> position(leading.size());
    for (int64_t dim = leading.size() - 1, rest = row; dim >= 0; rest /= leading[dim], --dim)
      position[dim] = rest % leading[dim];
    auto rowOf = [&](Value v) { return leading.empty() ? v : rewriter.create<vector::ExtractOp>(loc, v, position); };
    SmallVector<Value> operandRows;
    for (Value operand : operands) operandRows.push_back(rowOf(operand));
    Value rowResult = rowOf(result);
    for (int64_t offset = 0; offset < rowLanes; offset += pieceLanes) {
      SmallVector<Value> pieces;
      for (Value operandRow : operandRows)
        pieces.push_back(rewriter.create<vector::ExtractStridedSliceOp>(
            loc, operandRow, ArrayRef<int64_t>{offset}, ArrayRef<int64_t>{pieceLanes}, ArrayRef<int64_t>{1}));
      Value pieceResult = emit(rewriter, loc, pieces);
      rowResult = rewriter.create<vector::InsertStridedSliceOp>(loc, pieceResult, rowResult, ArrayRef<int64_t>{offset},
                                                                ArrayRef<int64_t>{1});
    }
    result = leading.empty() ? rowResult : rewriter.create<vector::InsertOp>(loc, rowResult, result, position);
  }
  rewriter.replaceOp(op, result);
  return success();
}

/// Calls `intrinsic` (accumulator, lhs, rhs) on each `pieceLanes`-lane piece, its i32 lane
/// operands bitcast to `pieceOperandType`.
LogicalResult callPerPiece(PatternRewriter &rewriter, Operation *op, StringRef intrinsic, int64_t pieceLanes,
                           VectorType pieceOperandType) {
  return rewritePerPiece(
      rewriter, op, op->getOperands(), pieceLanes, [&](PatternRewriter &b, Location loc, ValueRange pieces) {
        Value acc = pieces[0];
        Value x = b.create<vector::BitCastOp>(loc, pieceOperandType, pieces[1]);
        Value y = b.create<vector::BitCastOp>(loc, pieceOperandType, pieces[2]);
        return b.create<LLVM::CallIntrinsicOp>(loc, TypeRange{acc.getType()}, intrinsic, ValueRange{acc, x, y})
            .getResult(0);
      });
}

/// lane_dot_u8i8 on `pieceLanes` i32 lanes with vpmaddwd (`intrinsic`: i16 pairs multiplied and
/// added into i32, exact): each lane's unsigned bytes 0, 2 and 1, 3 zero-extended into 16-bit
/// halves, its signed bytes likewise sign-extended, then two vpmaddwd (bytes 0 and 2, bytes 1 and
/// 3) added to the accumulator. The sums are exact, as vpdpbusd's are, so the results are
/// bit-identical. For unsigned bytes of any size (q8_0's offset codes): vpmaddubsw, which
/// lowerI16Chain uses for the codes below 128, could saturate its i16 pair sums here.
Value pairDotU8I8(PatternRewriter &b, Location loc, StringRef intrinsic, Value acc, Value lhs, Value rhs) {
  auto laneType = cast<VectorType>(acc.getType());
  auto halves = VectorType::get({2 * laneType.getShape().back()}, b.getI16Type());
  auto i32s = [&](int64_t v) { return i32Splat(b, loc, laneType, v); };
  auto i16s = [&](int64_t v) { return splat(b, loc, halves, b.getI16IntegerAttr(static_cast<int16_t>(v))); };
  Value evenUnsigned = b.create<arith::AndIOp>(loc, lhs, i32s(0x00FF00FF));
  Value oddUnsigned = b.create<arith::AndIOp>(loc, b.create<arith::ShRUIOp>(loc, lhs, i32s(8)), i32s(0x00FF00FF));
  Value signedHalves = b.create<vector::BitCastOp>(loc, halves, rhs);
  Value evenSigned = b.create<arith::ShRSIOp>(loc, b.create<arith::ShLIOp>(loc, signedHalves, i16s(8)), i16s(8));
  Value oddSigned = b.create<arith::ShRSIOp>(loc, signedHalves, i16s(8));
  auto pairDot = [&](Value unsignedLanes, Value signedLanes) -> Value {
    Value x = b.create<vector::BitCastOp>(loc, halves, unsignedLanes);
    return b.create<LLVM::CallIntrinsicOp>(loc, TypeRange{laneType}, intrinsic, ValueRange{x, signedLanes})
        .getResult(0);
  };
  Value sum = b.create<arith::AddIOp>(loc, acc, pairDot(evenUnsigned, evenSigned));
  return b.create<arith::AddIOp>(loc, sum, pairDot(oddUnsigned, oddSigned));
}

struct LowerLaneDotBf16 : OpRewritePattern<LaneDotBf16Op> {
  LowerLaneDotBf16(MLIRContext *context, bool useInstruction)
      : OpRewritePattern(context), useInstruction(useInstruction) {}

  LogicalResult matchAndRewrite(LaneDotBf16Op op, PatternRewriter &rewriter) const override {
    if (useInstruction && succeeded(callPerPiece(rewriter, op, "llvm.x86.avx512bf16.dpbf16ps.512", kLanes,
                                                 VectorType::get({2 * kLanes}, rewriter.getBF16Type()))))
      return success();
    // A bf16 is the top half of the f32 it widens to: the high value masked in place, the low
    // one shifted up. The products are exact in f32; each add rounds once, high pair first.
    Location loc = op.getLoc();
    Type laneType = op.getLhs().getType(), floatType = op.getType();
    auto widen = [&](Value lane, bool high) -> Value {
      Value bits =
          high ? rewriter.create<arith::AndIOp>(loc, lane, i32Splat(rewriter, loc, laneType, 0xFFFF0000)).getResult()
               : rewriter.create<arith::ShLIOp>(loc, lane, i32Splat(rewriter, loc, laneType, 16)).getResult();
      return rewriter.create<arith::BitcastOp>(loc, floatType, bits);
    };
    Value lhsHigh = widen(op.getLhs(), true), rhsHigh = widen(op.getRhs(), true);
    Value sum = rewriter.create<math::FmaOp>(loc, lhsHigh, rhsHigh, op.getAccumulator());
    Value lhsLow = widen(op.getLhs(), false), rhsLow = widen(op.getRhs(), false);
    rewriter.replaceOpWithNewOp<math::FmaOp>(op, lhsLow, rhsLow, sum);
    return success();
  }

  bool useInstruction;
};

/// The int8 dot-product instructions a target has, best first.
struct Int8Dots {
  bool vnni512 = false;    // AVX512-VNNI: vpdpbusd on 16 lanes
  bool vnni256 = false;    // AVX-VNNI (VEX) or AVX512-VNNI with VL: vpdpbusd on 8 lanes
  int64_t pmaddwdBits = 0; // vpmaddwd on 512 (AVX512-BW) or 256 (AVX2) bits; 0: none
};

/// The i16 pair sums of vpmaddubsw are exact while two products of an unsigned byte of at most `u`
/// and a signed one (at most 128 in magnitude) fit: 2 * 128 * u <= 32767, so u <= 127.
constexpr int64_t kLargestPairSum = 32767;

/// The bound of the i16 pair sums of each lane dot whose unsigned bytes are below 128 (the block
/// formats' 4-, 5- and 6-bit codes; not q8_0's offset codes, up to 255), taken before any pattern
/// runs: the GFNI patterns below rewrite the masks the bounds are read from.
using PairSumBounds = llvm::DenseMap<Operation *, int64_t>;
PairSumBounds pairSumBounds(Operation *root) {
  PairSumBounds bounds;
  root->walk([&](LaneDotU8I8Op op) {
    const int64_t bound = 2 * 128 * largestUnsignedByte(op.getLhs());
    if (bound <= kLargestPairSum) bounds[op] = bound;
  });
  return bounds;
}

/// The lane dot that takes `op`'s result as its accumulator, where that is its only use and both
/// can be summed in 16 bits.
LaneDotU8I8Op nextInChain(LaneDotU8I8Op op, const PairSumBounds &bounds) {
  if (!bounds.count(op) || !op->hasOneUse()) return nullptr;
  auto next = dyn_cast<LaneDotU8I8Op>(*op->getUsers().begin());
  return next && next.getAccumulator() == op.getResult() && bounds.count(next) ? next : nullptr;
}

/// The lane dots ending at `last` (one whose result no such lane dot takes) that vpmaddubsw can
/// sum in i16, first to last, each the accumulator of the next; empty when `last` cannot be.
SmallVector<LaneDotU8I8Op> chainEndingAt(LaneDotU8I8Op last, const PairSumBounds &bounds) {
  SmallVector<LaneDotU8I8Op> chain;
  if (!bounds.count(last) || nextInChain(last, bounds)) return chain;
  chain.push_back(last);
  while (auto previous = chain.back().getAccumulator().getDefiningOp<LaneDotU8I8Op>()) {
    if (nextInChain(previous, bounds) != chain.back()) break;
    chain.push_back(previous);
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

/// A chain of lane dots on `pieceLanes` i32 lanes with vpmaddubsw (`bytePairs`: unsigned bytes by
/// signed ones, pairs summed in i16) and vpmaddwd by ones (`wordPairs`: i16 pairs summed into i32),
/// as llama.cpp's AVX2 dots: consecutive dots' i16 sums added in i16 while their bound stays below
/// 32768 (8 of a 4-bit code's, 4 of a 5-bit one's, 2 of a 6-bit one's), then one vpmaddwd per
/// group. Exact, so bit-identical to vpdpbusd, in 1 to 2 multiplies per 32 bytes where
/// pairDotU8I8 takes two and six shifts and masks.
LogicalResult lowerI16Chain(PatternRewriter &rewriter, ArrayRef<LaneDotU8I8Op> chain, const PairSumBounds &bounds,
                            int64_t pieceLanes, StringRef bytePairs, StringRef wordPairs) {
  SmallVector<Value> operands = {LaneDotU8I8Op(chain.front()).getAccumulator()};
  for (LaneDotU8I8Op dot : chain) {
    operands.push_back(dot.getLhs());
    operands.push_back(dot.getRhs());
  }
  auto bytes = VectorType::get({4 * pieceLanes}, rewriter.getI8Type());
  auto words = VectorType::get({2 * pieceLanes}, rewriter.getI16Type());
  return rewritePerPiece(
      rewriter, chain.back(), operands, pieceLanes, [&](PatternRewriter &b, Location loc, ValueRange pieces) -> Value {
        Value ones = splat(b, loc, words, b.getI16IntegerAttr(1));
        Value sum = pieces[0];
        Value group; // the i16 sums of the dots since the last vpmaddwd
        int64_t groupBound = 0;
        auto flush = [&] {
          Value pairs =
              b.create<LLVM::CallIntrinsicOp>(loc, TypeRange{sum.getType()}, wordPairs, ValueRange{group, ones})
                  .getResult(0);
          sum = b.create<arith::AddIOp>(loc, sum, pairs);
          group = nullptr;
          groupBound = 0;
        };
        for (auto [i, dot] : llvm::enumerate(chain)) {
          const int64_t bound = bounds.lookup(dot);
          if (group && groupBound + bound > kLargestPairSum) flush();
          Value x = b.create<vector::BitCastOp>(loc, bytes, pieces[1 + 2 * i]);
          Value y = b.create<vector::BitCastOp>(loc, bytes, pieces[2 + 2 * i]);
          Value products =
              b.create<LLVM::CallIntrinsicOp>(loc, TypeRange{words}, bytePairs, ValueRange{x, y}).getResult(0);
          group = group ? b.create<arith::AddIOp>(loc, group, products).getResult() : products;
          groupBound += bound;
        }
        flush();
        return sum;
      });
}

struct LowerLaneDotU8I8 : OpRewritePattern<LaneDotU8I8Op> {
  LowerLaneDotU8I8(MLIRContext *context, Int8Dots dots, PairSumBounds bounds)
      : OpRewritePattern(context), dots(dots), bounds(std::move(bounds)) {}

  LogicalResult matchAndRewrite(LaneDotU8I8Op op, PatternRewriter &rewriter) const override {
    auto i32Lanes = [&](int64_t lanes) { return VectorType::get({lanes}, rewriter.getI32Type()); };
    if (dots.vnni512 && succeeded(callPerPiece(rewriter, op, "llvm.x86.avx512.vpdpbusd.512", kLanes, i32Lanes(kLanes))))
      return success();
    if (dots.vnni256 &&
        succeeded(callPerPiece(rewriter, op, "llvm.x86.avx512.vpdpbusd.256", kLanes / 2, i32Lanes(kLanes / 2))))
      return success();
    if (dots.pmaddwdBits == 512 || dots.pmaddwdBits == 256) {
      const int64_t lanes = dots.pmaddwdBits / 32;
      const bool wide = lanes == kLanes;
      const StringRef bytePairs = wide ? "llvm.x86.avx512.pmaddubs.w.512" : "llvm.x86.avx2.pmadd.ub.sw";
      const StringRef wordPairs = wide ? "llvm.x86.avx512.pmaddw.d.512" : "llvm.x86.avx2.pmadd.wd";
      auto type = dyn_cast<VectorType>(op.getType());
      if (type && !type.isScalable() && type.getShape().back() % lanes == 0) {
        // A dot inside a chain is lowered with the chain's last one.
        if (nextInChain(op, bounds)) return failure();
        SmallVector<LaneDotU8I8Op> chain = chainEndingAt(op, bounds);
        if (!chain.empty() && succeeded(lowerI16Chain(rewriter, chain, bounds, lanes, bytePairs, wordPairs)))
          return success();
      }
      if (succeeded(rewritePerPiece(rewriter, op, op->getOperands(), lanes,
                                    [&](PatternRewriter &b, Location loc, ValueRange pieces) {
                                      return pairDotU8I8(b, loc, wordPairs, pieces[0], pieces[1], pieces[2]);
                                    })))
        return success();
    }
    // Byte i of the unsigned operand: shifted down and masked; of the signed one: shifted to the
    // top, then arithmetically down.
    Location loc = op.getLoc();
    Type type = op.getType();
    auto constant = [&](int64_t v) { return i32Splat(rewriter, loc, type, v); };
    Value sum = op.getAccumulator();
    for (int64_t i = 0; i < 4; ++i) {
      Value shifted = i == 0 ? op.getLhs() : rewriter.create<arith::ShRUIOp>(loc, op.getLhs(), constant(8 * i));
      Value unsignedByte = rewriter.create<arith::AndIOp>(loc, shifted, constant(0xFF));
      Value top = i == 3 ? op.getRhs() : rewriter.create<arith::ShLIOp>(loc, op.getRhs(), constant(24 - 8 * i));
      Value signedByte = rewriter.create<arith::ShRSIOp>(loc, top, constant(24));
      sum = rewriter.create<arith::AddIOp>(loc, sum, rewriter.create<arith::MulIOp>(loc, unsignedByte, signedByte));
    }
    rewriter.replaceOp(op, sum);
    return success();
  }

  Int8Dots dots;
  PairSumBounds bounds; // empty where the target has vpdpbusd
};

/// The qword matrix of `vgf2p8affineqb` that computes `(byte << shift) & mask` (`shift` < 0:
/// a right shift) of every byte, or nothing when a bit of `mask` would come from another byte.
/// Output bit j is the parity of row byte 7 - j of the matrix and'ed with the input byte, so the
/// row of a kept bit j selects its source bit j - shift, and every other row is zero.
std::optional<uint64_t> byteShiftMatrix(int64_t shift, uint8_t mask) {
  uint64_t matrix = 0;
  for (int64_t bit = 0; bit < 8; ++bit) {
    if (!(mask & (1u << bit))) continue;
    const int64_t source = bit - shift;
    if (source < 0 || source > 7) return std::nullopt;
    matrix |= uint64_t{1} << source << (8 * (7 - bit));
  }
  return matrix;
}

/// Whether `broadcast` fills more lanes than its source has: one value for several rows.
bool widens(vector::BroadcastOp broadcast) {
  auto source = dyn_cast<VectorType>(broadcast.getSourceType());
  return !source || source.getNumElements() < broadcast.getResultVectorType().getNumElements();
}

/// True when `words` are weight lanes shared by the rows of a tile of several: the schedule
/// broadcasts a weight read to every row of a multi-row tile (prefill), and reads decode's one-row
/// tile as it is.
bool sharedByRows(Value words) {
  auto broadcast = words.getDefiningOp<vector::BroadcastOp>();
  return broadcast && widens(broadcast);
}

/// True when `codes`, unpacked from weight lanes, reach the rows of a tile of several through a
/// broadcast (directly, or after further elementwise unpacking): the schedule's
/// elementwise_on_splats patterns move the unpacking of lanes every row shares before their
/// broadcast, so it runs once per tile on the lanes as read, as decode's does.
bool broadcastToRows(Value codes, int depth = 0) {
  for (Operation *user : codes.getUsers()) {
    if (auto broadcast = dyn_cast<vector::BroadcastOp>(user)) {
      if (widens(broadcast)) return true;
      continue;
    }
    if (depth < 3 && user->getNumResults() == 1 && isa<arith::ArithDialect>(user->getDialect()) &&
        OpTrait::hasElementwiseMappableTraits(user) && broadcastToRows(user->getResult(0), depth + 1))
      return true;
  }
  return false;
}

/// The qword `matrix` of vgf2p8affineqb as the instruction's byte operand for `lanes` i32 lanes
/// (16: the 512-bit instruction, 8: the 256-bit one).
Value affineMatrix(OpBuilder &b, Location loc, int64_t lanes, uint64_t matrix) {
  return b.create<vector::BitCastOp>(
      loc, VectorType::get({4 * lanes}, b.getI8Type()),
      b.create<arith::ConstantOp>(loc, DenseElementsAttr::get(VectorType::get({lanes / 2}, b.getI64Type()),
                                                              b.getI64IntegerAttr(static_cast<int64_t>(matrix)))));
}

/// One vgf2p8affineqb of every byte of `piece` (i32 lanes) with `matrixBytes` (affineMatrix's), no
/// byte xored in.
Value byteAffine(OpBuilder &b, Location loc, Value piece, Value matrixBytes) {
  auto pieceType = cast<VectorType>(piece.getType());
  auto bytesType = cast<VectorType>(matrixBytes.getType());
  const StringRef intrinsic =
      pieceType.getNumElements() == 16 ? "llvm.x86.vgf2p8affineqb.512" : "llvm.x86.vgf2p8affineqb.256";
  // The instruction's immediate, a byte it xors into every result byte: none.
  Value noXor = b.create<LLVM::ConstantOp>(loc, b.getI8Type(), b.getI8IntegerAttr(0));
  Value bytes = b.create<vector::BitCastOp>(loc, bytesType, piece);
  Value moved =
      b.create<LLVM::CallIntrinsicOp>(loc, TypeRange{bytesType}, intrinsic, ValueRange{bytes, matrixBytes, noXor})
          .getResult(0);
  return b.create<vector::BitCastOp>(loc, pieceType, moved);
}

/// `(x << s) & m`, `(x >> s) & m` or `x & m` on i32 lanes, `m` one byte repeated in every byte of
/// the lane: x, the shift (s, -s or 0) and that byte.
struct MaskedShift {
  Value source;
  int64_t shift;
  uint8_t byte;
};
std::optional<MaskedShift> matchMaskedShift(Value value) {
  auto andOp = value.getDefiningOp<arith::AndIOp>();
  if (!andOp) return std::nullopt;
  for (auto [shifted, mask] : {std::pair{andOp.getLhs(), andOp.getRhs()}, std::pair{andOp.getRhs(), andOp.getLhs()}}) {
    DenseIntElementsAttr maskValue, amountValue;
    if (!matchPattern(mask, m_Constant(&maskValue)) || !maskValue.isSplat()) continue;
    const uint32_t word = static_cast<uint32_t>(maskValue.getSplatValue<APInt>().getZExtValue());
    const uint8_t byte = word & 0xFF;
    if (word != byte * 0x01010101u) continue;
    Operation *shiftOp = shifted.getDefiningOp();
    if (shiftOp && isa<arith::ShLIOp, arith::ShRUIOp>(shiftOp) &&
        matchPattern(shiftOp->getOperand(1), m_Constant(&amountValue)) && amountValue.isSplat()) {
      const int64_t amount = amountValue.getSplatValue<APInt>().getSExtValue();
      return MaskedShift{shiftOp->getOperand(0), isa<arith::ShLIOp>(shiftOp) ? amount : -amount, byte};
    }
    return MaskedShift{shifted, 0, byte};
  }
  return std::nullopt;
}

/// `(x << c) & m` or `(x >> c) & m` on i32 lanes whose mask `m` repeats one byte and keeps only
/// bits that come from their own byte (the 5-bit formats' fifth bits moved to bit 4, `& 0x10101010`;
/// q6_k's top bits, `& 0x30303030`; the high nibbles, `(x >> 4) & 0x0F0F0F0F`): each byte shifted
/// and masked on its own, which one `vgf2p8affineqb` does (GFNI: Zen 4, Ice Lake, Alder Lake and
/// later) with the mask in its bit matrix, where the i32 form is a shift and an `and`. Rewritten
/// per `pieceLanes` lanes (a 512- or 256-bit instruction) of each row, and only where the words
/// are not shared by the rows of a tile (decode's one-row tiles; sharedByRows, broadcastToRows):
/// Zen 4 runs vgf2p8affineqb on the pipes vpdpbusd runs on, so in a tile of several rows, whose
/// dots keep those pipes busy, the shift and the `and` on the others are faster (SmolLM2-1.7B
/// Q5_K_M pp512 10% slower with it, decode at one thread 7% faster).
struct ByteShiftAndMaskAsAffine : OpRewritePattern<arith::AndIOp> {
  ByteShiftAndMaskAsAffine(MLIRContext *context, int64_t pieceLanes)
      : OpRewritePattern(context), pieceLanes(pieceLanes) {}

  LogicalResult matchAndRewrite(arith::AndIOp op, PatternRewriter &rewriter) const override {
    auto type = dyn_cast<VectorType>(op.getType());
    if (!type || type.isScalable() || !type.getElementType().isInteger(32) || type.getShape().back() % pieceLanes)
      return failure();
    std::optional<MaskedShift> masked = matchMaskedShift(op.getResult());
    if (!masked || masked->shift == 0 || masked->shift <= -8 || masked->shift >= 8) return failure();
    std::optional<uint64_t> matrix = byteShiftMatrix(masked->shift, masked->byte);
    if (!matrix || sharedByRows(masked->source) || broadcastToRows(op.getResult())) return failure();
    rewrite(rewriter, op, masked->source, *matrix);
    return success();
  }

private:
  void rewrite(PatternRewriter &rewriter, arith::AndIOp op, Value words, uint64_t matrix) const {
    Value matrixBytes = affineMatrix(rewriter, op.getLoc(), pieceLanes, matrix);
    // The type was checked by matchAndRewrite: the rewrite cannot fail.
    (void)rewritePerPiece(rewriter, op, ValueRange{words}, pieceLanes,
                          [&](PatternRewriter &b, Location l, ValueRange pieces) -> Value {
                            return byteAffine(b, l, pieces[0], matrixBytes);
                          });
  }

  int64_t pieceLanes;
};

/// Bits of byte i of `bits` moved by one vgf2p8affineqb: output bit `to[k]` of every byte is its
/// input bit `from[k]`, the others zero.
uint64_t bitMoveMatrix(ArrayRef<std::pair<int64_t, int64_t>> fromTo) {
  uint64_t matrix = 0;
  for (auto [from, to] : fromTo) matrix |= uint64_t{1} << from << (8 * (7 - to));
  return matrix;
}

/// The 5-bit formats' codes of one nibble word `w` and its block's fifth-bit word `f` (their lanes
/// o and o + 4, MatmulLowering.cpp's nibbleCodeSum) on a target with GFNI, in 4 instructions
/// instead of 5: the pair's fifth bits are first moved together, lane o's (bits o + 8 i) to bit 4
/// and lane o + 4's (bits o + 4 + 8 i) to bit 0 of byte i, one vgf2p8affineqb `g` shared by both
/// codes; lane o's code is then `(w & 0x0F) | (g & 0xF0)` (one vpternlogd), and lane o + 4's is
/// `(w & 0xF0) | (g & 0x0F)` with its nibbles swapped down and its fifth bit up by a second
/// vgf2p8affineqb. The nibbleCodeSum form shifts and masks `f` for each lane apart (two
/// vgf2p8affineqb) and the high nibble once more (a third), all on the pipes vpdpbusd runs on.
/// Matches either code's `or` (lane o's `(w & 0x0F) | ((f << (4 - o)) & 0x10)`, lane o + 4's
/// `((w >> 4) & 0x0F) | ((f >> o) & 0x10)`); CSE shares `g` between the two rewrites. Decode's
/// one-row tiles only, as ByteShiftAndMaskAsAffine.
struct FiveBitCodePairAsAffine : OpRewritePattern<arith::OrIOp> {
  FiveBitCodePairAsAffine(MLIRContext *context, int64_t pieceLanes)
      : OpRewritePattern(context, /*benefit=*/2), pieceLanes(pieceLanes) {}

  LogicalResult matchAndRewrite(arith::OrIOp op, PatternRewriter &rewriter) const override {
    auto type = dyn_cast<VectorType>(op.getType());
    if (!type || type.isScalable() || !type.getElementType().isInteger(32) || type.getShape().back() % pieceLanes)
      return failure();
    for (auto [nibblePart, fifthPart] : {std::pair{op.getLhs(), op.getRhs()}, std::pair{op.getRhs(), op.getLhs()}}) {
      std::optional<MaskedShift> fifthBits = matchMaskedShift(fifthPart), nibbleBits = matchMaskedShift(nibblePart);
      if (!fifthBits || fifthBits->byte != 0x10 || !nibbleBits || nibbleBits->byte != 0x0F) continue;
      Value words = nibbleBits->source, fifths = fifthBits->source;
      // Of the fifth bits: left by 4 - o (lane o), right by o (lane o + 4).
      const int64_t shift = fifthBits->shift, nibbleShift = nibbleBits->shift;
      if (sharedByRows(words) || sharedByRows(fifths) || broadcastToRows(op.getResult())) continue;
      const bool high = nibbleShift == -4;
      if (nibbleShift != 0 && !high) continue;
      // Lane o's fifth bits come by shifting left 4 - o (1 .. 4), lane o + 4's right by o (0 .. 3).
      const int64_t lane = high ? -shift : 4 - shift;
      if (lane < 0 || lane > 3) continue;
      Value together = affineMatrix(rewriter, op.getLoc(), pieceLanes, bitMoveMatrix({{lane, 4}, {lane + 4, 0}}));
      Value swapped = high ? affineMatrix(rewriter, op.getLoc(), pieceLanes,
                                          bitMoveMatrix({{4, 0}, {5, 1}, {6, 2}, {7, 3}, {0, 4}}))
                           : Value();
      (void)rewritePerPiece(rewriter, op, ValueRange{words, fifths}, pieceLanes,
                            [&](PatternRewriter &b, Location l, ValueRange pieces) -> Value {
                              Type pieceType = pieces[0].getType();
                              auto mask = [&](Value v, int64_t m) {
                                return b.create<arith::AndIOp>(l, v, i32Splat(b, l, pieceType, m)).getResult();
                              };
                              // Named apart: the order the IR is built in is the order written.
                              Value g = byteAffine(b, l, pieces[1], together);
                              Value nibbles = mask(pieces[0], high ? 0xF0F0F0F0 : 0x0F0F0F0F);
                              Value fifthBits = mask(g, high ? 0x0F0F0F0F : 0xF0F0F0F0);
                              Value merged = b.create<arith::OrIOp>(l, nibbles, fifthBits);
                              return high ? byteAffine(b, l, merged, swapped) : merged;
                            });
      return success();
    }
    return failure();
  }

private:
  int64_t pieceLanes;
};

class LowerLaneDotsPass : public impl::LowerLaneDotsBase<LowerLaneDotsPass> {
public:
  using LowerLaneDotsBase::LowerLaneDotsBase;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    // The module's gpt.target; without one, plain arithmetic.
    bool bf16Dots = false;
    Int8Dots int8Dots;
    int64_t affineLanes = 0; // 32-bit lanes of one vgf2p8affineqb, where the target has GFNI
    if (std::optional<TargetDescription> target = getTarget(getOperation())) {
      const bool x86 = target->isX86(); // the intrinsics are x86's; elsewhere plain arithmetic
      bf16Dots = x86 && target->has("avx512bf16");
      int8Dots.vnni512 = x86 && target->has("avx512vnni");
      int8Dots.vnni256 = x86 && (target->has("avxvnni") || (target->has("avx512vnni") && target->has("avx512vl")));
      int8Dots.pmaddwdBits = !x86 ? 0 : target->has("avx512bw") ? 512 : target->has("avx2") ? 256 : 0;
      if (x86 && target->has("gfni")) affineLanes = target->has("avx512bw") ? 16 : target->has("avx2") ? 8 : 0;
    }
    patterns.add<LowerLaneDotBf16>(&getContext(), bf16Dots);
    const bool pairSums = !int8Dots.vnni512 && !int8Dots.vnni256 && int8Dots.pmaddwdBits;
    patterns.add<LowerLaneDotU8I8>(&getContext(), int8Dots, pairSums ? pairSumBounds(getOperation()) : PairSumBounds());
    if (affineLanes) {
      // Before the dots are lowered, while a multi-row tile's broadcasts still show which codes its
      // rows share (broadcastToRows). First the 5-bit codes' pairs, whose shifts and masks the
      // pattern after them would take apart.
      RewritePatternSet pairs(&getContext()), shifts(&getContext());
      pairs.add<FiveBitCodePairAsAffine>(&getContext(), affineLanes);
      shifts.add<ByteShiftAndMaskAsAffine>(&getContext(), affineLanes);
      if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(pairs))) ||
          failed(applyPatternsAndFoldGreedily(getOperation(), std::move(shifts))))
        return signalPassFailure();
    }
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns)))) signalPassFailure();
  }
};

} // namespace
} // namespace gpt::codegen
