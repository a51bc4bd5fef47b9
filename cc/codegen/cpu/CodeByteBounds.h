// What the IR says about the unsigned code bytes a transformer.lane_dot_u8i8 multiplies: read by
// --gpt-lower-lane-dots (which dots vpmaddubsw can sum in 16 bits) and by
// --gpt-select-register-tiles (how many rows a block-quantized matmul's tile takes on AVX2).
#ifndef GPT_CC_CODEGEN_CPU_CODEBYTEBOUNDS_H
#define GPT_CC_CODEGEN_CPU_CODEBYTEBOUNDS_H

#include "mlir/IR/Value.h"

#include <cstdint>

namespace gpt::codegen {

/// The bits an i32 lane of `value` can have set, from the constants, masks, ors and constant
/// shifts that made it (every bit where something else did): what bounds the unsigned codes of a
/// block format (a nibble `& 0x0F0F0F0F`, a 5-bit code with its fifth bit or'ed in, q6_K's 6 bits).
uint32_t possiblySetBits(mlir::Value value, int depth = 0);

/// The largest byte of an i32 lane of `value` as an unsigned number (255 where unknown).
int64_t largestUnsignedByte(mlir::Value value);

/// True when every transformer.lane_dot_u8i8 in `op`'s regions multiplies unsigned bytes below
/// 128 (the 4-, 5- and 6-bit codes of the block formats and K-quants; not q8_0's offset codes),
/// and there is at least one: dots that vpmaddubsw takes, whose 16-bit sums add up in chains.
bool multipliesNarrowCodes(mlir::Operation *op);

} // namespace gpt::codegen

#endif // GPT_CC_CODEGEN_CPU_CODEBYTEBOUNDS_H
