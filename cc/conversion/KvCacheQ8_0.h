// The q8_0 KV cache's rows as the lowerings write and read them: llama.cpp's block_q8_0 per 32
// values (int8 codes and an fp16 scale), kept in an i8 tensor as ShapeFunctions.h's
// kvCacheHeadDim lays them out.
#ifndef GPT_CC_CONVERSION_KVCACHEQ8_0_H
#define GPT_CC_CONVERSION_KVCACHEQ8_0_H

#include "mlir/IR/Builders.h"

namespace gpt::conversion {

/// Whether `cache`, a KV cache tensor (or a slice of one), stores q8_0 rows (element type i8).
bool isQ8_0Cache(mlir::Value cache);

/// `row`, a vector<d x f32> of one key or value (d a multiple of 32), quantized into `cache`'s
/// row at `rowIndices` (every index but the last): per block of 32 values, with amax = max|x|,
/// the codes round_even(x * 127 / amax) (0 when amax is 0) go to bytes 32 b .. 32 b + 31 and the
/// scale fp16(amax / 127) to bytes d + 2 b, d + 2 b + 1 (little-endian, as the f16's bits lie in
/// memory). As llama.cpp's quantize_row_q8_0 (AVX: its rounding is to nearest even). Returns
/// the written tensor (in place after bufferization).
mlir::Value writeQ8_0Row(mlir::OpBuilder &b, mlir::Location loc, mlir::Value row, mlir::Value cache,
                         mlir::ValueRange rowIndices);

/// `rows`, an [n, d * 17/16] i8 tensor of q8_0 rows, dequantized (code * scale, exact in f32)
/// into a new [n, d] f32 tensor, row by row and block by block in vectors of 32.
mlir::Value dequantizedQ8_0Rows(mlir::OpBuilder &b, mlir::Location loc, mlir::Value rows);

} // namespace gpt::conversion

#endif // GPT_CC_CONVERSION_KVCACHEQ8_0_H
