// The q8_0 KV cache's row writes and reads (see KvCacheQ8_0.h).
#include "cc/conversion/KvCacheQ8_0.h"

#include "cc/conversion/LoweringUtils.h"
#include "cc/dialect/ShapeFunctions.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace gpt::conversion {
using namespace mlir;

namespace {
constexpr int64_t kBlock = 32;     // values per q8_0 block
constexpr float kMaxCode = 127.0f; // the largest code: d = amax / 127

Value indexConstant(OpBuilder &b, Location loc, int64_t value) {
  return b.create<arith::ConstantIndexOp>(loc, value).getResult();
}

/// `rowIndices` followed by `column`.
SmallVector<Value> at(ValueRange rowIndices, Value column) {
  SmallVector<Value> indices(rowIndices);
  indices.push_back(column);
  return indices;
}
} // namespace

bool isQ8_0Cache(Value cache) { return rankedType(cache).getElementType().isInteger(8); }

Value writeQ8_0Row(OpBuilder &b, Location loc, Value row, Value cache, ValueRange rowIndices) {
  const int64_t headDim = cast<VectorType>(row.getType()).getDimSize(0), blocks = headDim / kBlock;
  Type f32 = b.getF32Type(), i8 = b.getI8Type();
  auto blockType = VectorType::get({kBlock}, f32);
  Value zero = b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(0.0f));
  Value maxCode = b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(kMaxCode));
  SmallVector<Value> scales;
  for (int64_t block = 0; block < blocks; ++block) {
    Value x = b.create<vector::ExtractStridedSliceOp>(loc, row, ArrayRef<int64_t>{block * kBlock},
                                                      ArrayRef<int64_t>{kBlock}, ArrayRef<int64_t>{1});
    Value amax = b.create<vector::ReductionOp>(loc, vector::CombiningKind::MAXIMUMF, b.create<math::AbsFOp>(loc, x));
    // 127 / amax rather than 1 / (amax / 127): llama.cpp's vectorized quantize_row_q8_0 scales so.
    Value nonzero = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::ONE, amax, zero);
    Value inverse =
        b.create<arith::SelectOp>(loc, nonzero, b.create<arith::DivFOp>(loc, maxCode, amax).getResult(), zero);
    Value scaled = b.create<arith::MulFOp>(loc, x, b.create<vector::BroadcastOp>(loc, blockType, inverse));
    Value codes =
        b.create<arith::FPToSIOp>(loc, VectorType::get({kBlock}, i8), b.create<math::RoundEvenOp>(loc, scaled));
    cache = b.create<vector::TransferWriteOp>(loc, codes, cache, at(rowIndices, indexConstant(b, loc, block * kBlock)),
                                              ArrayRef<bool>{true})
                .getResult();
    scales.push_back(b.create<arith::TruncFOp>(loc, b.getF16Type(), b.create<arith::DivFOp>(loc, amax, maxCode)));
  }
  // The scales' f16 bits as 2 bytes each: a bitcast of the vector of scales.
  Value halves = b.create<vector::FromElementsOp>(loc, VectorType::get({blocks}, b.getF16Type()), scales);
  Value bytes = b.create<vector::BitCastOp>(loc, VectorType::get({2 * blocks}, i8), halves);
  return b
      .create<vector::TransferWriteOp>(loc, bytes, cache, at(rowIndices, indexConstant(b, loc, headDim)),
                                       ArrayRef<bool>{true})
      .getResult();
}

Value dequantizedQ8_0Rows(OpBuilder &b, Location loc, Value rows) {
  RankedTensorType type = rankedType(rows);
  const int64_t count = type.getDimSize(0),
                headDim = *transformer::kvCacheHeadDim(type.getElementType(), type.getDimSize(1));
  const int64_t blocks = headDim / kBlock;
  Type f32 = b.getF32Type(), i8 = b.getI8Type();
  Value out = emptyTensor(b, loc, {count, headDim});
  auto loop = b.create<scf::ForOp>(
      loc, indexConstant(b, loc, 0), indexConstant(b, loc, count), indexConstant(b, loc, 1), ValueRange{out},
      [&](OpBuilder &nb, Location, Value r, ValueRange state) {
        Value pad = nb.create<arith::ConstantIntOp>(loc, 0, 8);
        Value scaleBytes = nb.create<vector::TransferReadOp>(loc, VectorType::get({2 * blocks}, i8), rows,
                                                             ValueRange{r, indexConstant(nb, loc, headDim)}, pad,
                                                             ArrayRef<bool>{true});
        Value halves = nb.create<vector::BitCastOp>(loc, VectorType::get({blocks}, nb.getF16Type()), scaleBytes);
        Value scales = nb.create<arith::ExtFOp>(loc, VectorType::get({blocks}, f32), halves);
        Value written = state[0];
        for (int64_t block = 0; block < blocks; ++block) {
          Value column = indexConstant(nb, loc, block * kBlock);
          Value codes = nb.create<vector::TransferReadOp>(loc, VectorType::get({kBlock}, i8), rows,
                                                          ValueRange{r, column}, pad, ArrayRef<bool>{true});
          Value values = nb.create<arith::SIToFPOp>(loc, VectorType::get({kBlock}, f32), codes);
          Value scale = nb.create<vector::ExtractOp>(loc, scales, ArrayRef<int64_t>{block});
          Value product = nb.create<arith::MulFOp>(
              loc, values, nb.create<vector::BroadcastOp>(loc, VectorType::get({kBlock}, f32), scale));
          written =
              nb.create<vector::TransferWriteOp>(loc, product, written, ValueRange{r, column}, ArrayRef<bool>{true})
                  .getResult();
        }
        nb.create<scf::YieldOp>(loc, written);
      });
  return loop.getResult(0);
}

} // namespace gpt::conversion
