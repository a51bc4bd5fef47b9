// The `gpt.*` attributes through which code generation decisions travel in the IR: every name,
// and a typed accessor for each. Passes and the Transform-dialect extension read and write them
// only through this header; the schedule names them in its text.
#ifndef GPT_CC_CODEGEN_COMMON_CODEGENATTRIBUTES_H
#define GPT_CC_CODEGEN_COMMON_CODEGENATTRIBUTES_H

#include "cc/codegen/common/TargetDescription.h"

#include "mlir/IR/Operation.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace gpt::codegen {

namespace attr {
/// Unit: the linalg.generic of a `transformer.packed_matmul` (loops M, panel, column, K; for a
/// block-quantized weight K is the block loop, over the partial sums below). Written by
/// --transformer-to-linalg; elementwise fusion leaves such an op whole.
constexpr llvm::StringLiteral kPackedMatmul = "gpt.packed_matmul";
/// Unit, or i64: the generic computing a block-quantized packed matmul's per-block partial sums
/// (loops M, panel, column, block, index in block), which the schedule fuses into the matmul's
/// block loop. An i64 counts the blocks of 32 weights one step of that loop covers where it is
/// more than one (a q4_K or q5_K super-block's 8: loops M, panel, column, super-block, sub-block).
constexpr llvm::StringLiteral kBlockPartials = "gpt.block_partials";
/// Unit: a generic quantizing a block-quantized packed matmul's activations (their per-block
/// scales, code sums and lanes), in the shapes the matmul reads them; fusion leaves it whole.
constexpr llvm::StringLiteral kQuantizesActivations = "gpt.quantizes_activations";
/// i64 array: tile sizes per loop of the op's register tile (0: the loop is not tiled).
constexpr llvm::StringLiteral kRegisterTile = "gpt.register_tile";
/// i64 array: the order of the tiled loops, outermost first, when it is not the op's own.
constexpr llvm::StringLiteral kTileInterchange = "gpt.tile_interchange";
/// i64 array: pieces per loop the op is split into for threads (tile_using_forall's num_threads).
constexpr llvm::StringLiteral kParallelChunks = "gpt.parallel_chunks";
/// i64: lanes of the vector of partial results a row reduction keeps across its row.
constexpr llvm::StringLiteral kRowReductionTile = "gpt.row_reduction_tile";
/// On the elementwise generic a packed matmul is fused into: its tile (i64 array), which of its
/// inputs the matmul is (i64), and how many pieces it is split into for threads (i64, 1 or 2).
constexpr llvm::StringLiteral kEpilogueTile = "gpt.epilogue_tile";
constexpr llvm::StringLiteral kEpilogueOperand = "gpt.epilogue_operand";
constexpr llvm::StringLiteral kEpilogueChunks = "gpt.epilogue_chunks";
/// Dictionary on the module: the CPU the code is generated for, as IREE's executable target
/// carries it (`{cpu = "znver3", triple = "x86_64-pc-linux-gnu", vector_bits = 256,
/// vector_registers = 16, features = ["avx2", "fma"]}`). Register tiles are sized from its
/// register file and dot products chosen from its features; the JIT writes it from
/// CompileOptions(target_cpu=...), and without it the passes take their options.
constexpr llvm::StringLiteral kTarget = "gpt.target";
/// i64 array, on a packed matmul computed inside its epilogue's tiles: how its loops are tiled
/// there, 1 for each reduction loop (one K step at a time) and 0 for the parallel ones.
constexpr llvm::StringLiteral kReductionStep = "gpt.reduction_step";
/// On a bf16 or q8_0 packed matmul computed with AMX tiles instead of a register tile (targets
/// with amx-bf16, amx-int8): i64 array [rows, columns, k words] of one block of accumulator tiles
/// (rows and columns multiples of 16) and the 32-bit words of K between two trips of the
/// accumulators through memory (bf16: the 16 x 16 f32 tiles stay in tile registers that long, 2
/// products per word; q8_0: the f32 totals take that many words' blocks of 8 in one trip, the
/// i32 tiles one block each), and i64 pieces for threads (split by panel).
/// --gpt-lower-amx-matmuls applies it after bufferization.
constexpr llvm::StringLiteral kAmxTile = "gpt.amx_tile";
constexpr llvm::StringLiteral kAmxChunks = "gpt.amx_chunks";
} // namespace attr

/// The attributes whose ops the schedule must have vectorized by the end of it.
constexpr llvm::StringLiteral kVectorizedMarkers[] = {attr::kRegisterTile, attr::kRowReductionTile,
                                                      attr::kEpilogueTile};

/// True when `name` is one of the attributes above: a Transform-dialect script that names
/// another one has a typo.
bool isCodegenAttribute(llvm::StringRef name);

/// The `gpt.target` of the outermost module around `op` (or `op` itself), if it has one.
std::optional<TargetDescription> getTarget(mlir::Operation *op);
void setTarget(mlir::Operation *module, const TargetDescription &target);

/// Tile sizes per loop and, when not the op's own, the order of the tiled loops.
struct LoopTile {
  llvm::SmallVector<int64_t> sizes;
  llvm::SmallVector<int64_t> interchange; // empty: loops in the op's order
};

/// A block of AMX accumulator tiles (see attr::kAmxTile).
struct AmxTile {
  int64_t rows = 0;
  int64_t columns = 0;
  int64_t kWords = 0; // K words between two round trips of the accumulators through memory
  int64_t chunks = 1; // pieces for threads, split by panel
};

/// An elementwise generic that computes a packed matmul inside its own tiles.
struct EpilogueFusion {
  LoopTile tile;
  int64_t matmulOperand = 0; // which input of the generic the matmul is
  int64_t chunks = 1;        // pieces for threads, split by panel
};

bool isPackedMatmul(mlir::Operation *op);
void markPackedMatmul(mlir::Operation *op);
bool isBlockPartials(mlir::Operation *op);
/// Marks `op` as block partial sums whose every step of the matmul's block loop covers
/// `blocksPerStep` blocks of 32 weights.
void markBlockPartials(mlir::Operation *op, int64_t blocksPerStep = 1);
/// The blocks of 32 weights one step of the matmul's block loop covers, for block partials.
int64_t blocksPerStep(mlir::Operation *partials);
bool quantizesActivations(mlir::Operation *op);
void markQuantizesActivations(mlir::Operation *op);

/// Reads the tile recorded under `name` (kRegisterTile or kEpilogueTile), with kTileInterchange.
std::optional<LoopTile> getLoopTile(mlir::Operation *op, llvm::StringRef name);
void setRegisterTile(mlir::Operation *op, const LoopTile &tile);

std::optional<llvm::SmallVector<int64_t>> getParallelChunks(mlir::Operation *op);
void setParallelChunks(mlir::Operation *op, llvm::ArrayRef<int64_t> chunksPerLoop);

std::optional<int64_t> getRowReductionTile(mlir::Operation *op);
void setRowReductionTile(mlir::Operation *op, int64_t lanes);

std::optional<EpilogueFusion> getEpilogueFusion(mlir::Operation *op);
void setReductionStep(mlir::Operation *op, llvm::ArrayRef<int64_t> sizes);
void setEpilogueFusion(mlir::Operation *op, const EpilogueFusion &fusion);

std::optional<AmxTile> getAmxTile(mlir::Operation *op);
void setAmxTile(mlir::Operation *op, const AmxTile &tile);

} // namespace gpt::codegen

#endif // GPT_CC_CODEGEN_COMMON_CODEGENATTRIBUTES_H
