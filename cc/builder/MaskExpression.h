// GPTConfig's attention mask expression: its text, checked and built as causal_attention's region.
#ifndef GPT_CC_BUILDER_MASKEXPRESSION_H
#define GPT_CC_BUILDER_MASKEXPRESSION_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Region.h"

#include <string>

namespace gpt {

/// A mask expression is written as an s-expression over the query position `i` and the key
/// position `j` (python/gpt/masks.py writes them), e.g. prefix-LM with a prefix of 4:
///   (or (lt j 4) (le j i))
/// Integers: i, j, decimal literals, (add a b), (sub a b), (mul a b), (div a n) and (mod a n)
/// (floor division and Python's modulo, n a positive literal), (min a b), (max a b).
/// Booleans: (eq a b), (ne a b), (lt a b), (le a b), (gt a b), (ge a b) (signed), (and p q ...),
/// (or p q ...), (not p). The whole expression is a boolean: whether key j is visible from
/// query i.
///
/// An empty string when `text` is such an expression, else what is wrong with it.
std::string checkMaskExpression(const std::string &text);

/// Fills the empty `region` with the expression's block: arguments (i, j : index), arith ops,
/// transformer.yield of the i1 result. `text` must pass checkMaskExpression.
void buildMaskExpression(mlir::OpBuilder &b, mlir::Location loc, mlir::Region &region, const std::string &text);

} // namespace gpt

#endif // GPT_CC_BUILDER_MASKEXPRESSION_H
