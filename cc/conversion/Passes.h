// The conversion of the `transformer` dialect to linalg on tensors: the pass and its patterns.
#ifndef GPT_CC_CONVERSION_PASSES_H
#define GPT_CC_CONVERSION_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace gpt::conversion {

#define GEN_PASS_DECL
#include "cc/conversion/Passes.h.inc"

/// Patterns rewriting every transformer op into linalg/tensor/arith/math on static-shaped tensors:
/// the union of the op families below.
void populateTransformerToLinalgPatterns(mlir::RewritePatternSet &patterns);

// One op family each (see the file of the same name).
/// constant, add, mul, neg, relu, gelu, rope (ElementwiseLowering.cpp).
void populateElementwiseLoweringPatterns(mlir::RewritePatternSet &patterns);
/// matmul, packed_matmul (MatmulLowering.cpp).
void populateMatmulLoweringPatterns(mlir::RewritePatternSet &patterns);
/// layer_norm, softmax (NormalizationLowering.cpp).
void populateNormalizationLoweringPatterns(mlir::RewritePatternSet &patterns);
/// transpose, slice, split_heads, merge_heads, embedding, cache_update (ShapeLowering.cpp).
void populateShapeLoweringPatterns(mlir::RewritePatternSet &patterns);
/// permute, reshape, broadcast, concat of imported graphs (ImportedShapeLowering.cpp).
void populateImportedShapeLoweringPatterns(mlir::RewritePatternSet &patterns);
/// causal_attention (AttentionLowering.cpp).
void populateAttentionLoweringPatterns(mlir::RewritePatternSet &patterns);
/// paged_cache_write and paged_attention (the batched step's paged KV pool).
void populatePagedAttentionLoweringPatterns(mlir::RewritePatternSet &patterns);

#define GEN_PASS_REGISTRATION
#include "cc/conversion/Passes.h.inc"

} // namespace gpt::conversion

#endif // GPT_CC_CONVERSION_PASSES_H
