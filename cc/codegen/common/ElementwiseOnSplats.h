// Elementwise vector ops whose every operand is one value broadcast (a splat) computed once, before
// the broadcast: transform.apply_patterns.gpt.elementwise_on_splats (TransformOps.td).
#ifndef GPT_CC_CODEGEN_COMMON_ELEMENTWISEONSPLATS_H
#define GPT_CC_CODEGEN_COMMON_ELEMENTWISEONSPLATS_H

#include "mlir/IR/PatternMatch.h"

namespace gpt::codegen {

/// Adds two patterns:
/// - `vector.transpose` of a `vector.broadcast` of a one-element vector (vector<1xT>) is a
///   broadcast of that vector to the transposed shape;
/// - an elementwise op (arith, math) on vectors whose operands are each a broadcast from a vector
///   of one shape (every such broadcast's source has it) or a splat constant, at least one a
///   broadcast, computes on that shape and broadcasts its result.
/// Linalg's vectorizer reads a value indexed by the outer loop only (a row's RMSNorm statistic)
/// as a broadcast along the vector's minor dim, which the transfer lowering
/// turns into a broadcast to [N, 1] and a transpose; `reduction_to_contract`'s reordering then
/// moves the elementwise ops that use it (the norm's scale, its rsqrt) before that transpose, onto
/// the [N, 1] vector, which lowers to N scalar ops and N extract/insert pairs per vector. And a
/// register tile of R rows reads a column's value (a K-quant's per-column scale and min bits) as
/// a [P] vector broadcast to [R, P]: the ops that decode it ran R times per tile (R copies that
/// only LLVM's CSE merged, late), about 6% of a Q4_K_M prefill program's compile time.
void populateElementwiseOnSplatsPatterns(mlir::RewritePatternSet &patterns);

} // namespace gpt::codegen

#endif // GPT_CC_CODEGEN_COMMON_ELEMENTWISEONSPLATS_H
