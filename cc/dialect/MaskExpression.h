// A causal_attention mask expression (its `visible` region) evaluated at compile time.
#ifndef GPT_CC_DIALECT_MASKEXPRESSION_H
#define GPT_CC_DIALECT_MASKEXPRESSION_H

#include "mlir/IR/Region.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>

namespace mlir::transformer {

/// The region's arith ops flattened into straight-line instructions over 64-bit registers, so
/// that the tile classification can evaluate it for millions of (query, key) pairs quickly.
class MaskEvaluator {
public:
  /// std::nullopt when the region uses an op or a type (not index or i1) this evaluator does not
  /// know: the classification then leaves the tiles unclassified (every one visited and masked).
  static std::optional<MaskEvaluator> compile(Region &expression);

  /// Whether key `j` is visible from the query at position `i`; std::nullopt where the
  /// expression has no value (a division by zero).
  std::optional<bool> operator()(int64_t i, int64_t j) const;

  struct Instruction {
    int opcode;    ///< what the op computes (MaskExpression.cpp)
    int predicate; ///< arith::CmpIPredicate of a cmpi
    int a, b, c;   ///< operand registers
    int64_t constant;
  };

private:
  llvm::SmallVector<Instruction> program; ///< register 0: i, 1: j, then one per instruction
  int result = 0;
  mutable llvm::SmallVector<int64_t> registers;
};

} // namespace mlir::transformer

#endif // GPT_CC_DIALECT_MASKEXPRESSION_H
