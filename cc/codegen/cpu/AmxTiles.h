// Internal to the AMX lowering: the tile registers' shape, the buffer views and loops that the bf16
// lowering (LowerAmxMatmuls.cpp) and the q8_0 one (LowerAmxQ8Matmuls.cpp) both build, and the q8_0
// lowering's entry points, which the pass calls.
#ifndef GPT_CC_CODEGEN_CPU_AMXTILES_H
#define GPT_CC_CODEGEN_CPU_AMXTILES_H

#include "cc/codegen/common/CodegenAttributes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"

#include <optional>
#include <string>
#include <utility>

namespace gpt::codegen::amx_tiles {

/// Rows of a tile register, and its 32-bit columns (64 bytes).
constexpr int64_t kTile = 16;
/// Tile registers (tmm0 .. tmm7).
constexpr int64_t kTileRegisters = 8;

/// The static strides and offset of `type` (offset: ShapedType::kDynamic when not static), when
/// every stride is static and the innermost is 1.
std::optional<std::pair<llvm::SmallVector<int64_t>, int64_t>> rowMajorStrides(mlir::MemRefType type);

/// `memref` (offset `offset`) viewed as a row-major [rows, rowStride] memref of the same buffer:
/// the lowering of amx.tile_load/tile_store in MLIR 19 takes a tile's row stride from the size of
/// the memref's last dim, not from its stride.
mlir::Value rowView(mlir::OpBuilder &b, mlir::Location loc, mlir::Value memref, int64_t offset, int64_t rows,
                    int64_t rowStride);

/// Whether `tile` is made of 16 x 16 tiles, at least one each way, whose accumulators (rows x
/// columns) and operands (a row and a column of tiles) fit in the tile registers together.
bool fitsTileRegisters(const AmxTile &tile);

/// The linalg.fill of +0 that initializes `op`'s output, when the output is a buffer allocated for
/// it and nothing else touches the buffer between the fill and `op`: the first K step can then
/// start from a small block of zeros in L1 instead of the output, and the fill goes.
mlir::linalg::FillOp zeroFillOfOutput(mlir::linalg::GenericOp op);

/// The index constant `value`.
mlir::Value index(mlir::OpBuilder &b, mlir::Location loc, int64_t value);

/// An scf.for from `from` to `to` by `step` whose body `body` builds.
void forLoop(mlir::OpBuilder &b, mlir::Location loc, mlir::Value from, mlir::Value to, int64_t step,
             llvm::function_ref<void(mlir::OpBuilder &, mlir::Value)> body);

// -- the q8_0 lowering (LowerAmxQ8Matmuls.cpp) --------------------------------------------------

/// Buffers a function's q8_0 AMX matmuls share, in the frame of its allocation scope:
/// - i32 zeros each block's accumulators load, a distinct 16 x 16 block for each (amx.tile_zero
///   is Pure in MLIR 19, and loads of one address are merged too: CSE would leave one tile that
///   LLVM copies through memory for each accumulator, see lowerToTiles);
/// - per thread's chunk, the block sums the tiles hand to vector code ([rows, columns + 16] i32:
///   the padding keeps a row of sums and the same row of totals apart modulo 4 KiB, where a load
///   would wait on an unrelated store), and the f32 totals of the output block over K
///   ([rows, columns]): contiguous, in L1, where the output's rows (N floats apart, a multiple
///   of 4 KiB for GPT-2's 3072) would share cache sets.
struct Q8Scratch {
  mlir::Value zeros;
  mlir::Value sums;   // flat i32, viewed per op
  mlir::Value totals; // flat f32, viewed per op
};

/// The q8_0 block partial sums `op` (a marked scaled-block matmul) reads as its input 0, on
/// buffers: the generic marked gpt.block_partials that writes that buffer, when there is one.
mlir::linalg::GenericOp partialsProducer(mlir::linalg::GenericOp op);

/// Why `op` (a q8_0 scaled-block matmul on buffers: block sums [M, N/P, K/32, P] i32 written by
/// `partials`, weight scales [N/P, K/32, P] f16, activation scales [M, K/32] f32, compensations
/// [M, K/32] f32, output [M, N/P, P] f32; `partials` reads activation lanes [M, K/32, 8] i32
/// and weight lanes [N/P, K/32, 8, P] i32) cannot take `tile`, or an empty string.
std::string unsupportedQ8(mlir::linalg::GenericOp op, mlir::linalg::GenericOp partials, const AmxTile &tile);

/// The 32-bit words of block sums and of totals a q8_0 matmul of `tile` takes in its scope's scratch.
std::pair<int64_t, int64_t> q8ScratchWords(const AmxTile &tile);

/// A scratch of `sumsWords` and `totalsWords` (the most any q8_0 matmul there takes), allocated at
/// the start of the allocation scope `scope`.
Q8Scratch allocateQ8Scratch(mlir::RewriterBase &rewriter, mlir::Operation *scope, int64_t sumsWords,
                            int64_t totalsWords);

/// Replaces `op` and `partials` by loops over AMX tiles (see LowerAmxQ8Matmuls.cpp).
void lowerQ8ToTiles(mlir::RewriterBase &rewriter, mlir::linalg::GenericOp op, mlir::linalg::GenericOp partials,
                    const AmxTile &tile, const Q8Scratch &scratch);

} // namespace gpt::codegen::amx_tiles

#endif // GPT_CC_CODEGEN_CPU_AMXTILES_H
