// --gpt-lower-lane-dots: transformer.lane_dot_* to vdpbf16ps / vpdpbusd, or to plain arithmetic
// on a CPU without them (see Passes.td).
#include "cc/codegen/Passes.h"

#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace gpt::codegen {
using namespace mlir;
using mlir::transformer::LaneDotBf16Op;
using mlir::transformer::LaneDotU8I8Op;

#define GEN_PASS_DEF_LOWERLANEDOTS
#include "cc/codegen/Passes.h.inc"

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

/// Calls `intrinsic` on each 16-lane piece of each row (innermost dim) of the operands,
/// bitcasting the i32 lane operands to `pieceLaneType`, and reassembles the result. Fails unless
/// the operands are vectors whose rows are a multiple of 16 lanes. Rows are taken with
/// vector.extract, which folds through the broadcasts and inserts the vectorizer made.
LogicalResult callPerPiece(PatternRewriter &rewriter, Operation *op, StringRef intrinsic, VectorType pieceLaneType) {
  auto type = dyn_cast<VectorType>(op->getResult(0).getType());
  if (!type || type.isScalable() || type.getShape().back() % kLanes != 0) return failure();
  Location loc = op->getLoc();
  ArrayRef<int64_t> leading = type.getShape().drop_back();
  const int64_t rowLanes = type.getShape().back();
  int64_t rows = 1;
  for (int64_t size : leading) rows *= size;
  auto pieceType = VectorType::get({kLanes}, type.getElementType());
  Value result = rewriter.create<arith::ConstantOp>(loc, type, rewriter.getZeroAttr(type));
  for (int64_t row = 0; row < rows; ++row) {
    // The row's position in the leading dims, innermost fastest.
    SmallVector<int64_t> position(leading.size());
    for (int64_t dim = leading.size() - 1, rest = row; dim >= 0; rest /= leading[dim], --dim)
      position[dim] = rest % leading[dim];
    auto rowOf = [&](Value v) { return leading.empty() ? v : rewriter.create<vector::ExtractOp>(loc, v, position); };
    Value accumulator = rowOf(op->getOperand(0)), lhs = rowOf(op->getOperand(1)), rhs = rowOf(op->getOperand(2));
    Value rowResult = leading.empty() ? result : rewriter.create<vector::ExtractOp>(loc, result, position);
    for (int64_t offset = 0; offset < rowLanes; offset += kLanes) {
      auto piece = [&](Value v) {
        return rewriter.create<vector::ExtractStridedSliceOp>(loc, v, ArrayRef<int64_t>{offset},
                                                              ArrayRef<int64_t>{kLanes}, ArrayRef<int64_t>{1});
      };
      Value a = rewriter.create<vector::BitCastOp>(loc, pieceLaneType, piece(lhs));
      Value b = rewriter.create<vector::BitCastOp>(loc, pieceLaneType, piece(rhs));
      auto call = rewriter.create<LLVM::CallIntrinsicOp>(loc, TypeRange{pieceType}, intrinsic,
                                                         ValueRange{piece(accumulator), a, b});
      rowResult = rewriter.create<vector::InsertStridedSliceOp>(loc, call.getResult(0), rowResult,
                                                                ArrayRef<int64_t>{offset}, ArrayRef<int64_t>{1});
    }
    result = leading.empty() ? rowResult : rewriter.create<vector::InsertOp>(loc, rowResult, result, position);
  }
  rewriter.replaceOp(op, result);
  return success();
}

struct LowerLaneDotBf16 : OpRewritePattern<LaneDotBf16Op> {
  LowerLaneDotBf16(MLIRContext *context, bool useInstruction)
      : OpRewritePattern(context), useInstruction(useInstruction) {}

  LogicalResult matchAndRewrite(LaneDotBf16Op op, PatternRewriter &rewriter) const override {
    if (useInstruction && succeeded(callPerPiece(rewriter, op, "llvm.x86.avx512bf16.dpbf16ps.512",
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

struct LowerLaneDotU8I8 : OpRewritePattern<LaneDotU8I8Op> {
  LowerLaneDotU8I8(MLIRContext *context, bool useInstruction)
      : OpRewritePattern(context), useInstruction(useInstruction) {}

  LogicalResult matchAndRewrite(LaneDotU8I8Op op, PatternRewriter &rewriter) const override {
    if (useInstruction && succeeded(callPerPiece(rewriter, op, "llvm.x86.avx512.vpdpbusd.512",
                                                 VectorType::get({kLanes}, rewriter.getI32Type()))))
      return success();
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

  bool useInstruction;
};

class LowerLaneDotsPass : public impl::LowerLaneDotsBase<LowerLaneDotsPass> {
public:
  using LowerLaneDotsBase::LowerLaneDotsBase;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<LowerLaneDotBf16>(&getContext(), avx512bf16);
    patterns.add<LowerLaneDotU8I8>(&getContext(), vnni);
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns)))) signalPassFailure();
  }
};

} // namespace
} // namespace gpt::codegen
