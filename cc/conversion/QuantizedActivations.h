// Activations converted for the low-precision weights' dot products: rounded to bf16 lanes, or
// quantized per block of 32 to int8 codes as llama.cpp quantizes them (per super-block of 256 for
// q4_K and q5_K, as its q8_K; MatmulLowering.cpp's packed_matmul multiplies them).
#ifndef GPT_CC_CONVERSION_QUANTIZEDACTIVATIONS_H
#define GPT_CC_CONVERSION_QUANTIZEDACTIVATIONS_H

#include "mlir/IR/Builders.h"

namespace gpt::conversion {

/// A row of activations quantized per block of 32 along K, as llama.cpp quantizes them for its
/// int8 dot products: per block, d = max|x| / 127 and code = round_even(x * min(1 / d, FLT_MAX))
/// in [-127, 127] (0 where d = 0).
struct QuantizedActivations {
  mlir::Value lanes;         ///< [M, K/32, 8] i32: lane q of a block holds the codes of x[32 b + q + 8 i], i < 4
  mlir::Value scales;        ///< [M, K/32] f32: d ([M, K/256] per super-block)
  mlir::Value compensations; ///< [M, K/32] f32: offset * sum of the block's codes (exact in f32)
};

/// The activations a bf16 weight multiplies: [M, K] f32 as [M, K/2] lanes of two bf16, lane r
/// holding x[m, r] (rounded to nearest even) in its low half and x[m, r + K/2] in its high half.
/// Two contiguous halves of each row, so the conversion reads whole vectors.
mlir::Value bf16Lanes(mlir::OpBuilder &b, mlir::Location loc, mlir::Value lhs);

/// Quantizes `lhs` [M, K]; `offset` is what the weight's unsigned codes add to each true code
/// (128 for q8_0, 8 for q4_0), which the compensations take back out of the integer sums. (A format
/// with mins passes 1: its codes are the true ones, and its compensation, the plain sum of the activation
/// codes, is what each block's min multiplies.)
QuantizedActivations quantizeActivations(mlir::OpBuilder &b, mlir::Location loc, mlir::Value lhs, int64_t offset);

/// q4_K's and q5_K's activations, quantized as llama.cpp's q8_K: one scale per super-block of 256
/// (d = max|x| / 127 over the 256, the codes rounded as quantizeActivations rounds them), so that
/// a super-block's 8 block sums, each times its weight sub-block's integer scale, add up in i32
/// (MatmulLowering.cpp's superBlockPartials). `lanes` [M, K/32, 8] as quantizeActivations lays them
/// out, `scales` [M, K/256] f32, and `compensations` [M, K/32] f32, each block's plain code sum
/// (what the weight's sub-block min multiplies; exact in f32).
QuantizedActivations quantizeActivationsPerSuperBlock(mlir::OpBuilder &b, mlir::Location loc, mlir::Value lhs);

/// q6_K's activations: quantized per super-block of 256 as quantizeActivationsPerSuperBlock does
/// (llama.cpp's q8_K; `scales` [M, K/256]), laid out per run of 16 weights, so that no lane mixes
/// two runs (each has its own weight scale): `lanes` [M, K/32, 8], lane 4 h + l of block b holding
/// the codes of x[32 b + 16 h + l + 4 i] in byte i, and `compensations` [M, K/16] f32, 32 times
/// each run's code sum (exact in f32).
QuantizedActivations quantizeActivationRuns(mlir::OpBuilder &b, mlir::Location loc, mlir::Value lhs);

} // namespace gpt::conversion

#endif // GPT_CC_CONVERSION_QUANTIZEDACTIVATIONS_H
