// The bounds of the unsigned code bytes of the lane dots (see CodeByteBounds.h).
#include "cc/codegen/cpu/CodeByteBounds.h"

#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Matchers.h"

#include <algorithm>

namespace gpt::codegen {
using namespace mlir;

/// The bits an i32 lane of `value` can have set, from the constants, masks, ors and constant
/// shifts that made it (every bit where something else did): what bounds the unsigned codes of a
/// block format (a nibble `& 0x0F0F0F0F`, a 5-bit code with its fifth bit or'ed in, q6_K's 6 bits).
uint32_t possiblySetBits(Value value, int depth) {
  constexpr uint32_t kAny = ~0u;
  auto vector = dyn_cast<VectorType>(value.getType());
  if (depth > 12 || !(vector ? vector.getElementType() : value.getType()).isInteger(32)) return kAny;
  DenseIntElementsAttr splatValue;
  IntegerAttr scalarValue;
  if (matchPattern(value, m_Constant(&splatValue)))
    return splatValue.isSplat() ? static_cast<uint32_t>(splatValue.getSplatValue<APInt>().getZExtValue()) : kAny;
  if (matchPattern(value, m_Constant(&scalarValue))) return static_cast<uint32_t>(scalarValue.getInt());
  Operation *op = value.getDefiningOp();
  if (!op) return kAny;
  auto of = [&](Value operand) { return possiblySetBits(operand, depth + 1); };
  if (isa<arith::AndIOp>(op)) return of(op->getOperand(0)) & of(op->getOperand(1));
  if (isa<arith::OrIOp, arith::XOrIOp>(op)) return of(op->getOperand(0)) | of(op->getOperand(1));
  if (isa<arith::ShLIOp, arith::ShRUIOp>(op)) {
    // By a constant only: the bits an unknown amount can have set do not bound the shift.
    DenseIntElementsAttr splatAmount;
    IntegerAttr scalarAmount;
    int64_t amount = -1;
    if (matchPattern(op->getOperand(1), m_Constant(&splatAmount)) && splatAmount.isSplat())
      amount = splatAmount.getSplatValue<APInt>().getZExtValue();
    else if (matchPattern(op->getOperand(1), m_Constant(&scalarAmount)))
      amount = scalarAmount.getInt();
    if (amount < 0 || amount >= 32) return kAny;
    return isa<arith::ShLIOp>(op) ? of(op->getOperand(0)) << amount : of(op->getOperand(0)) >> amount;
  }
  // Lanes moved, not changed.
  if (isa<vector::BroadcastOp, vector::ExtractOp, vector::ExtractStridedSliceOp, vector::ShapeCastOp>(op))
    return of(op->getOperand(0));
  return kAny;
}

/// The largest byte of an i32 lane of `value` as an unsigned number (255 where unknown).
int64_t largestUnsignedByte(Value value) {
  const uint32_t bits = possiblySetBits(value);
  int64_t largest = 0;
  for (int64_t byte = 0; byte < 4; ++byte) largest = std::max<int64_t>(largest, (bits >> (8 * byte)) & 0xFF);
  return largest;
}

bool multipliesNarrowCodes(Operation *op) {
  bool any = false, allNarrow = true;
  op->walk([&](transformer::LaneDotU8I8Op dot) {
    any = true;
    allNarrow = allNarrow && largestUnsignedByte(dot.getLhs()) < 128;
  });
  return any && allNarrow;
}

} // namespace gpt::codegen
