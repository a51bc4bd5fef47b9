// Result-type rules of the transformer ops, shared by the op verifiers and by shape inference,
// so that what the verifier accepts and what inference produces can never disagree.
#ifndef GPT_CC_DIALECT_SHAPEFUNCTIONS_H
#define GPT_CC_DIALECT_SHAPEFUNCTIONS_H

#include "cc/kernels/WeightFormats.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeRange.h"
#include "mlir/Support/LogicalResult.h"

#include <optional>

namespace mlir::transformer {

/// Produces the diagnostic an error is reported on (usually `op.emitOpError()`).
using EmitErrorFn = llvm::function_ref<InFlightDiagnostic()>;

// Each function returns the result type implied by the operand types, or emits an error
// naming the offending shapes and fails. An unranked operand gives an unranked result.

/// numpy broadcasting: shapes aligned on trailing dims, each pair equal or one of them 1.
FailureOr<TensorType> inferBroadcastType(Type lhs, Type rhs, EmitErrorFn emitError);
/// Same shape as the input; `minRank` is the smallest rank the op accepts.
FailureOr<TensorType> inferSameShapeType(Type input, int64_t minRank, EmitErrorFn emitError);
/// The last two dims swapped.
FailureOr<TensorType> inferTransposeType(Type input, EmitErrorFn emitError);
/// [..., M, K] x [..., K, N] (or x [K, N]) -> [..., M, N].
FailureOr<TensorType> inferMatmulType(Type lhs, Type rhs, EmitErrorFn emitError);
/// [..., M, K] x [N/P, rows, P] (a weight packed in column panels) -> [..., N], the weight and
/// its scales shaped as `format`'s row says: f32 [N/P, K, P]; else i32 lanes [N/P, K * codeBits /
/// 32, P] (kernels/WeightFormats.h), and for the block formats f16 scales [N/P, K / blockValues *
/// scaleRows, P] (the others take none: `scales` null).
FailureOr<TensorType> inferPackedMatmulType(Type lhs, Type rhs, Type scales, const gpt::WeightFormatTraits &format,
                                            EmitErrorFn emitError);
/// Input shape; weight and bias must be rank-1 of the size of the input's last dim.
FailureOr<TensorType> inferLayerNormType(Type input, Type weight, Type bias, EmitErrorFn emitError);

/// Input shape; weight must be rank-1 of the size of the input's last dim.
FailureOr<TensorType> inferRmsNormType(Type input, Type weight, EmitErrorFn emitError);
/// Two operands of one shape (no broadcasting) -> that shape.
FailureOr<TensorType> inferSameShapesType(Type lhs, Type rhs, EmitErrorFn emitError);

/// [V, D] table gathered by [T] ids -> [T, D].
FailureOr<TensorType> inferEmbeddingType(Type table, Type ids, EmitErrorFn emitError);
/// A [D, V'] packed weight of `format` (q8_0 or q6_k: lanes [V'/P, D * codeBits / 32, P], scales
/// [V'/P, D / blockValues * scaleRows, P]) gathered as a [V', D] table by [T] ids -> [T, D].
FailureOr<TensorType> inferPackedEmbeddingType(Type codes, Type scales, Type ids, const gpt::WeightFormatTraits &format,
                                               EmitErrorFn emitError);
/// The last dim narrowed to `size`, after checking that [offset, offset + size) fits in it.
FailureOr<TensorType> inferSliceType(Type input, int64_t offset, int64_t size, EmitErrorFn emitError);
/// [T, H*d] -> [H, T, d], or [T, H, d] when `tokenMajor`.
FailureOr<TensorType> inferSplitHeadsType(Type input, int64_t numHeads, bool tokenMajor, EmitErrorFn emitError);
/// [H, T, d] (or [T, H, d] when `tokenMajor`) -> [T, H*d].
FailureOr<TensorType> inferMergeHeadsType(Type input, bool tokenMajor, EmitErrorFn emitError);
/// [H, T, d] with an even d and one position per row t -> the same shape.
FailureOr<TensorType> inferRopeType(Type input, Type positions, EmitErrorFn emitError);
/// Which of an attention's operands and result are token-major, [T, H, d] instead of [H, T, d].
struct AttentionLayout {
  bool query = false, key = false, value = false, result = false;
};
/// q [H, Tq, d], k [Hkv, Tk, d], v [Hkv, Tk, dv] -> [H, Tq, dv] (Hkv divides H: grouped-query
/// attention), each of them [T, H, ...] where `layout` says token-major.
FailureOr<TensorType> inferAttentionType(Type query, Type key, Type value, AttentionLayout layout,
                                         EmitErrorFn emitError);
/// A [H, T, d] type as [T, H, d] or back: the first two dims swapped. Other types are returned as is.
Type swapHeadsAndTokens(Type type);

/// The head_dim of a KV cache whose rows are `width` elements of `element`: `width` itself, or
/// for a q8_0 cache (i8) the d of a row of d int8 codes followed by d / 32 fp16 scales as bytes
/// (width = d * 17/16, d a multiple of 32); std::nullopt for an i8 width that is no such row.
/// Dynamic stays dynamic.
std::optional<int64_t> kvCacheHeadDim(Type element, int64_t width);

/// update [H, T, d] written into cache [H, M, d] (T <= M) -> the cache's type. A q8_0 cache (i8)
/// is [H, M, d * 17/16] (kvCacheHeadDim), and so are its pools and attention's i8 keys and values.
FailureOr<TensorType> inferCacheUpdateType(Type update, Type cache, EmitErrorFn emitError);

/// update [H, T, d] written into pool [N, H, S, d] at slots [T] -> the pool's type.
FailureOr<TensorType> inferPagedCacheWriteType(Type update, Type pool, Type slots, EmitErrorFn emitError);
/// query [H, T, d] over pools [N, H, S, d] through block_tables [B, M], with sequences and
/// positions [T] -> [H, T, d].
FailureOr<TensorType> inferPagedAttentionType(Type query, Type keyPool, Type valuePool, Type blockTables,
                                              Type sequences, Type positions, EmitErrorFn emitError);

/// Fails with an error unless `declared` is compatible with `inferred` (equal where both are known).
LogicalResult verifyCompatibleResult(Type declared, TensorType inferred, EmitErrorFn emitError);

/// `input`'s dims in the order `permutation` lists them (a permutation of 0 .. rank - 1).
FailureOr<TensorType> inferPermuteType(Type input, ArrayRef<int64_t> permutation, EmitErrorFn emitError);
/// Inputs of one rank, equal dims except `dim`, which the result has the sum of.
FailureOr<TensorType> inferConcatType(TypeRange inputs, int64_t dim, EmitErrorFn emitError);
/// The input's shape with its last dim (a rank >= 1 input's) reduced to 1.
FailureOr<TensorType> inferMeanType(Type input, EmitErrorFn emitError);
} // namespace mlir::transformer

#endif // GPT_CC_DIALECT_SHAPEFUNCTIONS_H
