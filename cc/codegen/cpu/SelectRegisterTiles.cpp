// --gpt-select-register-tiles: records the register tile of every matmul it can tile evenly.
#include "cc/codegen/cpu/Passes.h"

#include "cc/codegen/cpu/CodeByteBounds.h"

#include "cc/TargetParameters.h"
#include "cc/codegen/common/CodegenAttributes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/MathExtras.h"

#include <limits>

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_SELECTREGISTERTILES
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

/// One row of the tile table: ops of this kind whose result dims are multiples of the tile get
/// it. The first matching row wins, so each op kind lists its tiles from the largest down.
/// Adding a tile shape is adding a row: the schedule applies whatever tile an op carries.
struct TileChoice {
  enum class Kind {
    PackedMatmul,
    BlockPackedMatmul,
    // Block-quantized matmuls whose codes are below 128 (CodeByteBounds.h): blocks of 32 (q4_0,
    // q4_1, q5_0, q5_1), and super-blocks (the K-quants).
    NarrowBlockPackedMatmul,
    NarrowSuperBlockPackedMatmul,
    Matmul,
    BatchMatmul,
    Elementwise
  };
  Kind kind;
  SmallVector<int64_t> tile;        // loop order of the op: ([batch,] M, N, K), or (M, panel, column, K)
  SmallVector<int64_t> interchange; // the tiled loops' order, outermost first; empty: the op's own
  int64_t splitDim;                 // the parallel loop split across threads
};

using Kind = TileChoice::Kind;

/// The kinds of packed matmuls (transformer.packed_matmul's generics), which can take an epilogue.
bool packedKind(Kind kind) {
  return kind == Kind::PackedMatmul || kind == Kind::BlockPackedMatmul || kind == Kind::NarrowBlockPackedMatmul ||
         kind == Kind::NarrowSuperBlockPackedMatmul;
}

/// The tile table for a target's register file (`tiles`) and packed weights in panels of
/// `panelWidth` columns (the builder packs them in the target's panel width; IR from elsewhere may
/// have another). Accumulators take at most half the registers; the rest hold the weight lanes and
/// the broadcast activations (AVX-512's 32 zmm: 8 rows x 2 registers of a 32-wide panel; AVX2's
/// 16 ymm: 4 rows x 2 registers of a 16-wide panel, or 2 rows x 4 registers of a 32-wide one).
SmallVector<TileChoice> tileTable(const target::TileParameters &tiles, int64_t panelWidth, bool byteProductChains) {
  const int64_t packedRows = tiles.rowsFor(panelWidth);
  SmallVector<TileChoice> table;
  // Matmuls against panel-packed weights (transformer.packed_matmul): `packedRows` rows x one
  // panel of accumulators, the panel loop outermost so that one panel (K x panelWidth floats)
  // stays in cache across all of M; the weight panel is read from consecutive addresses. Then
  // halves of that, so that a batched step of 4 or 2 tokens takes all its rows in one tile (each
  // panel read once, the rows' multiply-adds overlapping), down to decode's one row.
  for (int64_t rows = packedRows; rows > 1; rows /= 2)
    table.push_back({Kind::PackedMatmul, {rows, 1, panelWidth, 1}, {1, 0, 2, 3}, 1});
  // Decode's one row over two panels at once: twice the independent accumulators (4 FMA chains on
  // AVX-512 instead of 2, each output still summed in K order, so the same bits), which keeps
  // more of the weight stream in flight (f32 and bf16 decode 5-19% faster; docs/PERFORMANCE.md).
  // Then one panel, where the panels do not pair up.
  table.push_back({Kind::PackedMatmul, {1, 2, panelWidth, 1}, {1, 0, 2, 3}, 1});
  table.push_back({Kind::PackedMatmul, {1, 1, panelWidth, 1}, {1, 0, 2, 3}, 1});
  // Block-quantized packed matmuls keep two accumulators per output, the block's i32 sums and
  // the f32 total: half the rows, so that both fit with the weight lanes and the broadcast
  // activations.
  //
  // Where that is one row (AVX2's 16 ymm) and the dots are vpmaddubsw chains (AVX2 without VNNI,
  // --gpt-lower-lane-dots), the formats whose codes are below 128 take more rows anyway: a row's
  // share of a weight word's unpacking (a mask, a shift) and of the chain's widening is most of
  // its work, so the rows' spills cost less than unpacking each word once per row. Measured on a
  // Zen 3 (SmolLM2-1.7B, pp512, docs/JOURNAL.md): blocks of 32 in 4 rows, q4_0 10-20% and q5_0
  // 35% faster; K-quants, which keep a super-block's sub-block sums and scales besides, in 2 rows,
  // q6_k 30% and q4_k 1-6% (no faster in 4). q8_0's offset codes keep one row: two vpmaddwd a
  // byte pair and their widened halves leave no registers to share (one row 1.1-1.4x faster than
  // 2 or 4). Targets with vpdpbusd (Alder Lake's AVX-VNNI) or NEON's dot products were not
  // measured and keep one row.
  if (packedRows / 2 == 1 && byteProductChains) {
    table.push_back({Kind::NarrowBlockPackedMatmul, {4, 1, panelWidth, 1}, {1, 0, 2, 3}, 1});
    table.push_back({Kind::NarrowBlockPackedMatmul, {2, 1, panelWidth, 1}, {1, 0, 2, 3}, 1});
    table.push_back({Kind::NarrowSuperBlockPackedMatmul, {2, 1, panelWidth, 1}, {1, 0, 2, 3}, 1});
  }
  if (packedRows >= 2) table.push_back({Kind::BlockPackedMatmul, {packedRows / 2, 1, panelWidth, 1}, {1, 0, 2, 3}, 1});
  // Then every smaller row count down to 2 (AVX-512: 3 and 2 rows), so that a verification step
  // of a few rows that do not divide by the largest tile (3, 6, 9 tokens) still unpacks each
  // weight word once for several rows: in one-row tiles every row unpacked the whole weight
  // matrix again (each row cost a fifth of a decode step of a 4-bit SmolLM2; tools/bench/bench_speculative.py).
  // Each output is summed in the same order whatever the tile, so the rows' bits are decode's.
  for (int64_t rows = packedRows / 2 - 1; rows > 1; --rows)
    table.push_back({Kind::BlockPackedMatmul, {rows, 1, panelWidth, 1}, {1, 0, 2, 3}, 1});
  // One row: two panels at once where they pair up, as for f32 decode above. The block's lane
  // dot products are chains of dependent vpdpbusd; two panels give the core twice the chains and
  // the weight stream twice the loads in flight (q4_k decode at 1.7B 16.4 -> 19 tokens/s on an
  // AVX-512 Xeon; docs/PERFORMANCE.md), each output still summed in the same order. AVX2's 16
  // registers hold one panel's accumulators only.
  if (packedRows / 2 != 1) {
    table.push_back({Kind::BlockPackedMatmul, {1, 2, panelWidth, 1}, {1, 0, 2, 3}, 1});
    table.push_back({Kind::BlockPackedMatmul, {1, 1, panelWidth, 1}, {1, 0, 2, 3}, 1});
  }
  // Plain matmuls (attention's q . k^T per key block and p . v): as many rows of 32 columns as
  // fit, or one row (decode); narrower for attention's small heads and short blocks.
  for (int64_t width : tiles.matmulTileWidths) table.push_back({Kind::Matmul, {tiles.rowsFor(width), width, 1}, {}, 1});
  for (int64_t width : tiles.matmulTileWidths) table.push_back({Kind::Matmul, {1, width, 1}, {}, 1});
  // Batched matmuls (a transformer.matmul with a batch dim on both sides), split by batch.
  table.push_back({Kind::BatchMatmul, {1, 8, 8, 1}, {}, 0});
  table.push_back({Kind::BatchMatmul, {1, 1, 8, 1}, {}, 0});
  return table;
}

/// True for the ops a row of the table may describe: named matmuls, and the linalg.generic that
/// --transformer-to-linalg emits for a packed matmul (marked `gpt.packed_matmul`).
bool isCandidate(linalg::LinalgOp op, const TileChoice &choice) {
  Operation *partials = op.getNumDpsInputs() > 0 ? op.getDpsInputs()[0].getDefiningOp() : nullptr;
  const bool blockQuantized = isBlockPartials(partials);
  const bool packed = isa<linalg::GenericOp>(op) && isPackedMatmul(op);
  switch (choice.kind) {
  case Kind::PackedMatmul:
    return packed && !blockQuantized;
  case Kind::BlockPackedMatmul:
    return packed && blockQuantized;
  case Kind::NarrowBlockPackedMatmul:
  case Kind::NarrowSuperBlockPackedMatmul:
    return packed && blockQuantized && multipliesNarrowCodes(partials) &&
           (blocksPerStep(partials) > 1) == (choice.kind == Kind::NarrowSuperBlockPackedMatmul);
  case Kind::Matmul:
    return isa<linalg::MatmulOp>(op);
  case Kind::BatchMatmul:
    return isa<linalg::BatchMatmulOp>(op);
  case Kind::Elementwise:
    return false; // chosen by elementwiseChoice, not from the table
  }
  return false;
}

/// True when every parallel dim of the static result divides by its tile size.
bool tilesEvenly(linalg::LinalgOp op, ArrayRef<int64_t> tile) {
  auto result = dyn_cast<RankedTensorType>(op.getDpsInits()[0].getType());
  if (!result || !result.hasStaticShape()) return false;
  for (auto [dim, size] : llvm::zip(result.getShape(), tile.drop_back()))
    if (dim % size != 0) return false;
  return true;
}

/// The number of contiguous pieces to split `op` into for `threads` threads: the largest of
/// tiles.threadChunkCounts not above `threads` that leaves every piece a whole number of tiles
/// along the table's split dimension, or 1 for ops smaller than target::kMinParallelWork.
int64_t parallelChunks(const target::TileParameters &tiles, linalg::LinalgOp op, const TileChoice &choice,
                       int64_t threads) {
  // Inside an scf.forall (the attention's loop over heads) the threads are already busy.
  if (op->getParentOfType<scf::ForallOp>()) return 1;
  // Saturating: the product of huge (legal) static dims must not wrap to a small one.
  int64_t work = 1;
  auto scaleWork = [&work](int64_t factor) {
    if (llvm::MulOverflow(work, factor, work)) work = std::numeric_limits<int64_t>::max();
  };
  for (int64_t range : op.getStaticLoopRanges()) {
    if (ShapedType::isDynamic(range)) return 1;
    scaleWork(range);
  }
  // A block-quantized matmul's loops step over blocks (or super-blocks): the partial sums fused
  // into each step do that many weights' multiply-adds. (An elementwise generic may have no
  // input: a fill.)
  if (op.getNumDpsInputs() > 0 && isBlockPartials(op.getDpsInputs()[0].getDefiningOp()))
    scaleWork(transformer::PackedMatmulOp::kBlockSize * blocksPerStep(op.getDpsInputs()[0].getDefiningOp()));
  if (work < target::kMinParallelWork) return 1;
  auto shape = cast<RankedTensorType>(op.getDpsInits()[0].getType()).getShape();
  int64_t extent = shape[choice.splitDim], unit = choice.tile[choice.splitDim];
  for (int64_t chunks : tiles.threadChunkCounts)
    if (chunks <= threads && extent % (chunks * unit) == 0) return chunks;
  return 1;
}

/// Pieces per thread an op split for threads is cut into where its split dimension allows, tried
/// largest first: the threads take them on demand (--gpt-share-loops-dynamically), so a thread
/// that runs slower takes fewer. With one piece per thread, every op of a decode step waited for
/// the slower of two threads, about 20% behind on a 2-vCPU VM.
constexpr int64_t kPiecesPerThread[] = {4, 2};

/// The same for an op of one row of register tiles (a decode step's matrix-vector products), which
/// streams its weights once and is over in tens of microseconds: a thread that takes the last
/// piece keeps the other waiting for half a piece on average, so the pieces are smaller. With 4 a
/// thread, the threads of a 1.7B model's decode step spun 6% (the caller) and 10% (the other) of
/// it in the regions' closing barriers; with 16, 3% and 7.5%.
constexpr int64_t kMatvecPiecesPerThread[] = {16, 8, 4, 2};

/// `chunks` (one per thread) cut into pieces per thread (kPiecesPerThread, or kMatvecPiecesPerThread
/// for one row of tiles) where the split dimension holds that many whole tiles, else `chunks`.
int64_t balancedPieces(linalg::LinalgOp op, const TileChoice &choice, int64_t chunks) {
  if (chunks <= 1) return chunks;
  ArrayRef<int64_t> shape = cast<RankedTensorType>(op.getDpsInits()[0].getType()).getShape();
  bool oneRowOfTiles = true;
  for (auto [dim, extent] : llvm::enumerate(shape))
    if (static_cast<int64_t>(dim) != choice.splitDim && extent > choice.tile[dim]) oneRowOfTiles = false;
  ArrayRef<int64_t> perThreadCounts = oneRowOfTiles ? ArrayRef<int64_t>(kMatvecPiecesPerThread) : kPiecesPerThread;
  const int64_t extent = shape[choice.splitDim];
  for (int64_t perThread : perThreadCounts)
    if (extent % (chunks * perThread * choice.tile[choice.splitDim]) == 0) return chunks * perThread;
  return chunks;
}

/// Records `choice`'s tile on `op`, and its split for `chunks` threads when there are several.
void markTile(linalg::LinalgOp op, const TileChoice &choice, int64_t chunks) {
  setRegisterTile(op, LoopTile{choice.tile, choice.interchange});
  if (chunks <= 1) return;
  SmallVector<int64_t> piecesPerLoop(choice.splitDim + 1, 0);
  piecesPerLoop.back() = balancedPieces(op, choice, chunks);
  setParallelChunks(op, piecesPerLoop);
}

/// Elementwise generics (every loop parallel, one static result of rank 2 or 3, no gather):
/// one vector of the largest of 32, 16, 8 lanes that divides the innermost dim, split across
/// threads along dim 1 like matmuls. Vectorized, GELU's tanh and softmax's exp become
/// polynomial approximations on whole vectors instead of one libm call per element.
std::optional<TileChoice> elementwiseChoice(const target::TileParameters &tiles, linalg::LinalgOp op) {
  if (!isa<linalg::GenericOp>(op) || isPackedMatmul(op) || op.getNumReductionLoops() != 0 || op.getNumDpsInits() != 1)
    return std::nullopt;
  auto result = dyn_cast<RankedTensorType>(op.getDpsInits()[0].getType());
  if (!result || !result.hasStaticShape() || result.getRank() < 2 || result.getRank() > 3) return std::nullopt;
  // A gather (tensor.extract in the body: the embedding lookup) does not vectorize as plain loads.
  if (!op->getRegion(0).getOps<tensor::ExtractOp>().empty()) return std::nullopt;
  for (int64_t width : tiles.elementwiseWidths) {
    if (result.getShape().back() % width != 0) continue;
    SmallVector<int64_t> tile(result.getRank(), 1);
    tile.back() = width;
    return TileChoice{Kind::Elementwise, tile, {}, 1};
  }
  return std::nullopt;
}

/// Row reductions (a rank-2 generic reducing its innermost loop into one value per row, whose body
/// ends by combining the accumulator with addf or maximumf: LayerNorm's mean and variance,
/// attention's row max and sum): the largest of 32, 16, 8 lanes dividing the row length. The
/// schedule keeps that many partial results in a vector across the row and reduces it once at
/// the end of the row.
std::optional<int64_t> rowReductionWidth(const target::TileParameters &tiles, linalg::LinalgOp op) {
  if (!isa<linalg::GenericOp>(op) || op.getNumLoops() != 2 || op.getNumReductionLoops() != 1 ||
      op.getIteratorTypesArray()[1] != utils::IteratorType::reduction || op.getNumDpsInits() != 1)
    return std::nullopt;
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (ShapedType::isDynamic(ranges[0]) || ShapedType::isDynamic(ranges[1])) return std::nullopt;
  // The reduction must be a plain combiner of the accumulator, which the schedule's partial
  // reduction can split (its neutral element: 0 for addf, -inf for maximumf).
  Block &body = op->getRegion(0).front();
  Operation *combiner = body.getTerminator()->getOperand(0).getDefiningOp();
  if (!combiner || !isa<arith::AddFOp, arith::MaximumFOp>(combiner) ||
      !llvm::is_contained(combiner->getOperands(), body.getArguments().back()))
    return std::nullopt;
  for (int64_t width : tiles.elementwiseWidths)
    if (ranges[1] % width == 0) return width;
  return std::nullopt;
}

/// Rows and 32-bit columns of an AMX tile register (16 x 64 bytes).
constexpr int64_t kAmxTileSize = 16;

/// Pieces for threads of an AMX matmul of `panels` panels and `loops` iterations (in 32-bit words
/// of K): the largest count of tiles.threadChunkCounts not above `threads` that divides the
/// panels, or 1 for a small op or one inside an scf.forall.
int64_t amxChunks(const target::TileParameters &tiles, linalg::LinalgOp op, ArrayRef<int64_t> loops, int64_t panels,
                  int64_t threads) {
  int64_t work = 1;
  for (int64_t factor : loops)
    if (llvm::MulOverflow(work, factor, work)) work = std::numeric_limits<int64_t>::max();
  if (work < target::kMinParallelWork || op->getParentOfType<scf::ForallOp>()) return 1;
  for (int64_t chunks : tiles.threadChunkCounts)
    if (chunks <= threads && panels % chunks == 0) return chunks;
  return 1;
}

/// The AMX block of a bf16 packed matmul with a multiple of 16 rows (prefill, not decode's one
/// row) on a target with amx-bf16: 2 x 2 accumulator tiles of 16 x 16 f32 (1 x 2 for an odd
/// multiple of 16 rows) over one 32-wide panel, fed by 2 (1) tiles of activation lanes and 2 of
/// weight lanes: all 8 tile registers. The weight lanes are already the pair layout tdpbf16ps
/// multiplies (each 32-bit word 2 K rows of one column), and so are the activation lanes, which
/// pair the same rows. The accumulators stay in registers for up to 8 tile steps (128 K words),
/// then go through the output: MLIR 19 cannot carry a tile in a loop's arguments. Threads split
/// the panels, as a register tile's do.
std::optional<AmxTile> amxChoice(const target::TileParameters &tiles, linalg::LinalgOp op, int64_t threads) {
  if (!isa<linalg::GenericOp>(op) || !isPackedMatmul(op) || op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1 ||
      op->getRegion(0).getOps<transformer::LaneDotBf16Op>().empty())
    return std::nullopt;
  auto lhs = dyn_cast<RankedTensorType>(op.getDpsInputs()[0].getType());
  auto rhs = dyn_cast<RankedTensorType>(op.getDpsInputs()[1].getType());
  if (!lhs || !rhs || !lhs.hasStaticShape() || !rhs.hasStaticShape() || lhs.getRank() != 2 || rhs.getRank() != 3)
    return std::nullopt;
  const int64_t rows = lhs.getDimSize(0), kWords = lhs.getDimSize(1), panels = rhs.getDimSize(0),
                width = rhs.getDimSize(2);
  if (rows < kAmxTileSize || rows % kAmxTileSize != 0 || kWords % kAmxTileSize != 0 ||
      (width != kAmxTileSize && width != 2 * kAmxTileSize))
    return std::nullopt;
  AmxTile tile;
  tile.rows = rows % (2 * kAmxTileSize) == 0 ? 2 * kAmxTileSize : kAmxTileSize;
  tile.columns = width;
  const int64_t steps = kWords / kAmxTileSize;
  int64_t unroll = 8;
  while (steps % unroll != 0) unroll /= 2;
  tile.kWords = unroll * kAmxTileSize;
  tile.chunks = amxChunks(tiles, op, {rows, panels, width, kWords}, panels, threads);
  return tile;
}

/// The AMX block of a q8_0 packed matmul (the scaled sum over blocks of 32 whose block partial
/// sums are signed int8 codes times signed int8 codes, isSignedInt8BlockPartials) with a multiple
/// of 16 rows, on a target with amx-int8: 2 x 2 (1 x 2) accumulator tiles of 16 x 16 i32 over one
/// panel, each the sums of one block (8 words of K: `tdpbssd` on 16 x 32-byte tiles of activation
/// codes and 8 x 64-byte tiles of weight codes, both in the lane layout in which they lie), fed by
/// 2 (1) activation tiles and 2 weight tiles: all 8 tile registers. Every block's sums then go
/// through memory, to be scaled by their block's d_w * d_x in vector code.
std::optional<AmxTile> amxQ8Choice(const target::TileParameters &tiles, linalg::LinalgOp op, int64_t threads) {
  if (!isa<linalg::GenericOp>(op) || !isPackedMatmul(op) || op.getNumDpsInputs() != 4 || op.getNumDpsInits() != 1 ||
      !isSignedInt8BlockPartials(op.getDpsInputs()[0].getDefiningOp()))
    return std::nullopt;
  // The partial sums [M, N/P, K/32, P].
  auto partials = dyn_cast<RankedTensorType>(op.getDpsInputs()[0].getType());
  if (!partials || !partials.hasStaticShape() || partials.getRank() != 4) return std::nullopt;
  const int64_t rows = partials.getDimSize(0), panels = partials.getDimSize(1), blocks = partials.getDimSize(2),
                width = partials.getDimSize(3);
  if (rows < kAmxTileSize || rows % kAmxTileSize != 0 || (width != kAmxTileSize && width != 2 * kAmxTileSize))
    return std::nullopt;
  AmxTile tile;
  tile.rows = rows % (2 * kAmxTileSize) == 0 ? 2 * kAmxTileSize : kAmxTileSize;
  tile.columns = width;
  // Up to 4 blocks' sums go through the output's totals together (one load and store of the
  // totals per 4 blocks, not per block).
  int64_t group = 4;
  while (blocks % group != 0) group /= 2;
  const int64_t blockWords = transformer::PackedMatmulOp::kBlockSize / 4;
  tile.kWords = group * blockWords;
  tile.chunks = amxChunks(tiles, op, {rows, panels, width, blocks, blockWords}, panels, threads);
  return tile;
}

/// The elementwise generic that can take a packed matmul as its epilogue: the matmul's only
/// user, of the same shape, all loops parallel, reading the matmul through an identity map as
/// input 0 or 1 (the operand positions the schedule handles). Returns that input's position.
std::optional<unsigned> epilogueOperand(linalg::LinalgOp matmul, linalg::GenericOp &epilogue) {
  Value result = matmul->getResult(0);
  if (!result.hasOneUse()) return std::nullopt;
  auto user = dyn_cast<linalg::GenericOp>(*result.getUsers().begin());
  if (!user || isPackedMatmul(user) || user.getNumReductionLoops() != 0 || user.getNumDpsInits() != 1 ||
      user->getResult(0).getType() != result.getType() || !user.getRegion().getOps<tensor::ExtractOp>().empty())
    return std::nullopt;
  for (OpOperand *input : user.getDpsInputOperands())
    if (input->get() == result && input->getOperandNumber() < 2 && user.getMatchingIndexingMap(input).isIdentity()) {
      epilogue = user;
      return input->getOperandNumber();
    }
  return std::nullopt;
}

/// Marks `op` with the first choice of `table` that fits it: with its epilogue's fusion where the
/// epilogue can drive the matmul's tiles, else a plain register tile. Leaves it unmarked when none fits.
void markFirstFittingChoice(const target::TileParameters &tiles, linalg::LinalgOp op, ArrayRef<TileChoice> table,
                            int64_t threads) {
  for (const TileChoice &choice : table) {
    if (!isCandidate(op, choice) || !tilesEvenly(op, choice.tile)) continue;
    // Epilogue fusion: the bias/GELU/residual generic after a packed matmul drives the
    // loops, and the schedule computes each matmul tile inside them, so the accumulator
    // goes through the epilogue in registers and is written once, split into pieces for
    // threads as the matmul alone would be.
    linalg::GenericOp epilogue;
    int64_t chunks = parallelChunks(tiles, op, choice, threads);
    // Two panels per tile, but not at the cost of threads: where the panels do not split into
    // whole pairs per thread, one panel per tile.
    if (choice.kind == Kind::PackedMatmul && choice.tile[1] > 1) {
      TileChoice onePanel = choice;
      onePanel.tile[1] = 1;
      if (chunks < parallelChunks(tiles, op, onePanel, threads)) continue;
    }
    if (packedKind(choice.kind))
      if (std::optional<unsigned> operand = epilogueOperand(op, epilogue)) {
        // The epilogue's loops are the matmul's parallel ones: (M, panel, column).
        int64_t parallel = op.getNumParallelLoops();
        LoopTile tile{SmallVector<int64_t>(ArrayRef<int64_t>(choice.tile).take_front(parallel)),
                      SmallVector<int64_t>(ArrayRef<int64_t>(choice.interchange).take_front(parallel))};
        setEpilogueFusion(epilogue, EpilogueFusion{tile, *operand, balancedPieces(op, choice, chunks)});
        SmallVector<int64_t> step(parallel, 0);
        step.append(op.getNumReductionLoops(), 1);
        setReductionStep(op, step);
        return;
      }
    markTile(op, choice, chunks);
    return;
  }
}

class SelectRegisterTilesPass : public impl::SelectRegisterTilesBase<SelectRegisterTilesPass> {
public:
  using SelectRegisterTilesBase::SelectRegisterTilesBase;

  void runOnOperation() override {
    // The module's gpt.target, when it has one, else AVX-512's register file (the default tiles).
    int64_t bits = 512, registers = 32;
    std::optional<TargetDescription> target = getTarget(getOperation());
    if (target) {
      bits = target->vectorBits;
      registers = target->vectorRegisters;
    }
    if (bits < 128 || bits % 32 != 0 || registers < 8) {
      getOperation().emitError("gpt-select-register-tiles: unsupported register file in gpt.target (vector_bits = ")
          << bits << ", vector_registers = " << registers << ")";
      return signalPassFailure();
    }
    const target::TileParameters tiles = target::tileParameters(bits, registers);
    // AVX2 without vpdpbusd: --gpt-lower-lane-dots sums the narrow codes' dots in vpmaddubsw chains
    // (without AVX2, as on Sandy Bridge's 256-bit AVX, in plain arithmetic: not measured).
    const bool byteProductChains =
        target && target->isX86() && target->has("avx2") && !target->has("avxvnni") && !target->has("avx512vnni");
    // One table per panel width the module's packed weights have (the builder's: the target's).
    llvm::SmallDenseMap<int64_t, SmallVector<TileChoice>, 2> tables;
    auto tableFor = [&](linalg::LinalgOp op) -> const SmallVector<TileChoice> & {
      int64_t panelWidth = tiles.panelWidth;
      auto result = dyn_cast<RankedTensorType>(op.getDpsInits()[0].getType());
      if (isPackedMatmul(op) && result && result.getRank() == 3 && !result.isDynamicDim(2))
        panelWidth = result.getDimSize(2);
      auto [it, inserted] = tables.try_emplace(panelWidth);
      if (inserted) it->second = tileTable(tiles, panelWidth, byteProductChains);
      return it->second;
    };
    // bf16 and q8_0 prefill matmuls on AMX tiles where the target has them (only the module's
    // target says so).
    const bool amxBf16 = target && target->isX86() && target->has("amx-bf16");
    const bool amxInt8 = target && target->isX86() && target->has("amx-int8");
    getOperation().walk([&](linalg::LinalgOp op) {
      if (getEpilogueFusion(op)) return; // its packed matmul was fused into it
      // An op with an empty loop computes nothing: no tile (its loops run zero times).
      if (llvm::is_contained(op.getStaticLoopRanges(), 0)) return;
      if (std::optional<int64_t> width = rowReductionWidth(tiles, op)) {
        setRowReductionTile(op, *width);
        return;
      }
      // No register tile: --gpt-lower-amx-matmuls lowers it after bufferization (a q8_0 matmul
      // together with its block partial sums, which then stay a plain generic until then).
      std::optional<AmxTile> amx;
      if (amxBf16) amx = amxChoice(tiles, op, threads);
      if (!amx && amxInt8) amx = amxQ8Choice(tiles, op, threads);
      if (amx) {
        setAmxTile(op, *amx);
        return;
      }
      if (std::optional<TileChoice> choice = elementwiseChoice(tiles, op)) {
        markTile(op, *choice, parallelChunks(tiles, op, *choice, threads));
        return;
      }
      markFirstFittingChoice(tiles, op, tableFor(op), threads);
    });
  }
};

} // namespace
} // namespace gpt::codegen
