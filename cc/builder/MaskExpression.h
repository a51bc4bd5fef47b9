// GPTConfig's attention mask expression built as causal_attention's region (MaskSyntax.h parses it).
#ifndef GPT_CC_BUILDER_MASKEXPRESSION_H
#define GPT_CC_BUILDER_MASKEXPRESSION_H

#include "cc/builder/MaskSyntax.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Region.h"

#include <string>

namespace gpt {

/// Fills the empty `region` with the expression's block: arguments (i, j : index), arith ops,
/// transformer.yield of the i1 result. `text` must pass checkMaskExpression (MaskSyntax.h).
void buildMaskExpression(mlir::OpBuilder &b, mlir::Location loc, mlir::Region &region, const std::string &text);

} // namespace gpt

#endif // GPT_CC_BUILDER_MASKEXPRESSION_H
