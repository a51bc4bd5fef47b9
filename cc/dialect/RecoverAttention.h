// Recovery of transformer.causal_attention from attention written out op by op (as an imported
// PyTorch graph computes it), registered as a canonicalization of transformer.matmul, and of
// grouped-query attention from repeated key/value heads.
#ifndef GPT_CC_DIALECT_RECOVERATTENTION_H
#define GPT_CC_DIALECT_RECOVERATTENTION_H

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace mlir::transformer {

/// softmax(where(mask, scale * q @ transpose(k), fill)) @ v -> causal_attention(q, k, v), for
/// q, k, v of rank 3 ([H, T, d]; leading dims of a higher rank are collapsed into H by
/// transformer.reshape), a splat scale > 0 (or none: 1), a splat fill <= -1e30 (-inf,
/// finfo.min) and either order of where's values (the fill in the true branch masks where the
/// condition holds). The mask is analysed where it is built: an `arith.constant` i1 [T, T] that
/// is lower-triangular, or an `arith.cmpi` of two index tensors (`tensor.generate` yielding the
/// row and the column index) that keeps `col <= row`, is causal and becomes the plain op; any
/// other constant mask whose every row keeps a key becomes its `mask` operand; anything else
/// (a mask computed from the inputs) is left as written.
void populateRecoverAttentionPatterns(RewritePatternSet &patterns);

/// causal_attention(q, repeat(k), repeat(v)) -> causal_attention(q, k, v), grouped-query attention
/// over the Hkv heads that HF's repeat_kv copied n times each into [Hkv * n, T, d] (imported as
/// reshape to [Hkv, 1, T, d], broadcast to [Hkv, n, T, d], reshape back), both operands
/// head-major. Registered as a canonicalization of transformer.causal_attention.
void populateFoldRepeatedHeadsPatterns(RewritePatternSet &patterns);

} // namespace mlir::transformer

#endif // GPT_CC_DIALECT_RECOVERATTENTION_H
