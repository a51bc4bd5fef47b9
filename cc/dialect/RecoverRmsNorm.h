// Recovery of transformer.rms_norm from RMSNorm written out op by op (as an imported HF Llama or
// Qwen2 computes it), registered as canonicalizations of transformer.mul.
#ifndef GPT_CC_DIALECT_RECOVERRMSNORM_H
#define GPT_CC_DIALECT_RECOVERRMSNORM_H

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace mlir::transformer {

/// x * rsqrt(mean(x * x) + eps) -> rms_norm(x, ones, eps), then weight * rms_norm(x, ones, eps)
/// -> rms_norm(x, weight, eps) for a rank-1 weight of the last dimension's size; in any order of
/// the commutative operands.
void populateRecoverRmsNormPatterns(RewritePatternSet &patterns);

} // namespace mlir::transformer

#endif // GPT_CC_DIALECT_RECOVERRMSNORM_H
