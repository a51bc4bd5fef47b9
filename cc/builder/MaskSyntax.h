// The text of GPTConfig's attention mask expression: parsed and checked, in plain C++ (the
// runtime validates a config with it); MaskExpression.h builds it into IR.
#ifndef GPT_CC_BUILDER_MASKSYNTAX_H
#define GPT_CC_BUILDER_MASKSYNTAX_H

#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

/// A mask expression is written as an s-expression over the query position `i` and the key
/// position `j` (python/gpt/masks.py writes them), e.g. prefix-LM with a prefix of 4:
///   (or (lt j 4) (le j i))
/// Integers: i, j, decimal literals, (add a b), (sub a b), (mul a b), (div a n) and (mod a n)
/// (floor division and Python's modulo, n a positive literal), (min a b), (max a b).
/// Booleans: (eq a b), (ne a b), (lt a b), (le a b), (gt a b), (ge a b) (signed), (and p q ...),
/// (or p q ...), (not p). The whole expression is a boolean: whether key j is visible from
/// query i.
/// One parsed node: a leaf (`i`, `j`, a literal) or an operator applied to its arguments.
struct MaskNode {
  std::string name; ///< "i", "j", a literal's digits, or the operator
  int64_t literal = 0;
  bool isLiteral = false;
  std::vector<MaskNode> arguments;
  bool isBoolean = false; ///< set by the type check
};

/// The expression's tree, checked; throws std::invalid_argument naming what is wrong.
MaskNode parseMaskExpression(const std::string &text);

/// An empty string when `text` is such an expression, else what is wrong with it.
std::string checkMaskExpression(const std::string &text);

/// Whether `name` is one of the comparisons: eq, ne, lt, le, gt, ge.
bool isMaskComparison(const std::string &name);

} // namespace gpt

#endif // GPT_CC_BUILDER_MASKSYNTAX_H
