// Recovery of transformer.gelu from the tanh GELU written out op by op (as an imported
// nanoGPT or HF `gelu_new` computes it), registered as a canonicalization of transformer.mul.
#ifndef GPT_CC_DIALECT_RECOVERGELU_H
#define GPT_CC_DIALECT_RECOVERGELU_H

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace mlir::transformer {

/// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x * x * x))) -> gelu(x), in any order of
/// the commutative operands and either association of the products.
void populateRecoverGeluPatterns(RewritePatternSet &patterns);

} // namespace mlir::transformer

#endif // GPT_CC_DIALECT_RECOVERGELU_H
