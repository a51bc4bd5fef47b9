// Recovery of transformer ops from their math written out op by op, as an imported model computes
// it (a PyTorch graph's attention, nanoGPT's or HF's `gelu_new`, HF Llama's and Qwen2's RMSNorm,
// HF's repeat_kv): each registered as a canonicalization of the op its written-out form ends in,
// so that the fused op and its lowering serve imported programs too.
#ifndef GPT_CC_DIALECT_RECOVERWRITTENOUTOPS_H
#define GPT_CC_DIALECT_RECOVERWRITTENOUTOPS_H

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
/// (a mask computed from the inputs) is left as written (RecoverAttention.cpp).
void populateRecoverAttentionPatterns(RewritePatternSet &patterns);

/// causal_attention(q, repeat(k), repeat(v)) -> causal_attention(q, k, v), grouped-query attention
/// over the Hkv heads that HF's repeat_kv copied n times each into [Hkv * n, T, d] (imported as
/// reshape to [Hkv, 1, T, d], broadcast to [Hkv, n, T, d], reshape back), both operands
/// head-major. Registered as a canonicalization of transformer.causal_attention (RecoverAttention.cpp).
void populateFoldRepeatedHeadsPatterns(RewritePatternSet &patterns);

/// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x * x * x))) -> gelu(x), in any order of
/// the commutative operands and either association of the products (RecoverGelu.cpp).
void populateRecoverGeluPatterns(RewritePatternSet &patterns);

/// x * rsqrt(mean(x * x) + eps) -> rms_norm(x, ones, eps), then weight * rms_norm(x, ones, eps)
/// -> rms_norm(x, weight, eps) for a rank-1 weight of the last dimension's size; in any order of
/// the commutative operands (RecoverRmsNorm.cpp).
void populateRecoverRmsNormPatterns(RewritePatternSet &patterns);

} // namespace mlir::transformer

#endif // GPT_CC_DIALECT_RECOVERWRITTENOUTOPS_H
