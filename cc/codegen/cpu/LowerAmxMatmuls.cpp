// --gpt-lower-amx-matmuls: bf16 and q8_0 packed matmuls marked gpt.amx_tile, on buffers, to loops
// over AMX tiles (see Passes.td).
#include "cc/codegen/cpu/Passes.h"

#include "cc/codegen/common/CodegenAttributes.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

namespace gpt::codegen {
using namespace mlir;

#define GEN_PASS_DEF_LOWERAMXMATMULS
#include "cc/codegen/cpu/Passes.h.inc"

namespace {

/// Rows of a tile register, and its 32-bit columns (64 bytes).
constexpr int64_t kTile = 16;
/// Tile registers (tmm0 .. tmm7).
constexpr int64_t kTileRegisters = 8;

/// The static strides and offset of `type` (offset: ShapedType::kDynamic when not static), when
/// every stride is static and the innermost is 1.
std::optional<std::pair<SmallVector<int64_t>, int64_t>> rowMajorStrides(MemRefType type) {
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(getStridesAndOffset(type, strides, offset)) || strides.empty() || strides.back() != 1 ||
      llvm::any_of(strides, ShapedType::isDynamic))
    return std::nullopt;
  return std::make_pair(strides, offset);
}

/// `memref` (offset `offset`) viewed as a row-major [rows, rowStride] memref of the same buffer:
/// the lowering of amx.tile_load/tile_store in MLIR 19 takes a tile's row stride from the size of
/// the memref's last dim, not from its stride.
Value rowView(OpBuilder &b, Location loc, Value memref, int64_t offset, int64_t rows, int64_t rowStride) {
  auto type = cast<MemRefType>(memref.getType());
  OpFoldResult at = b.getIndexAttr(offset);
  if (ShapedType::isDynamic(offset)) at = b.create<memref::ExtractStridedMetadataOp>(loc, memref).getOffset();
  auto layout = StridedLayoutAttr::get(b.getContext(), offset, {rowStride, 1});
  auto view = MemRefType::get({rows, rowStride}, type.getElementType(), layout);
  return b.create<memref::ReinterpretCastOp>(loc, view, memref, at,
                                             ArrayRef<OpFoldResult>{b.getIndexAttr(rows), b.getIndexAttr(rowStride)},
                                             ArrayRef<OpFoldResult>{b.getIndexAttr(rowStride), b.getIndexAttr(1)});
}

/// Whether `tile` is made of 16 x 16 tiles, at least one each way, whose accumulators (rows x
/// columns) and operands (a row and a column of tiles) fit in the tile registers together.
bool fitsTileRegisters(const AmxTile &tile) {
  const int64_t rowTiles = tile.rows / kTile, columnTiles = tile.columns / kTile;
  return tile.rows % kTile == 0 && tile.columns % kTile == 0 && rowTiles >= 1 && columnTiles >= 1 &&
         rowTiles * columnTiles + rowTiles + columnTiles <= kTileRegisters;
}

/// Whether a q8_0 matmul's buffers have the ranks and element types unsupportedQ8 describes.
bool hasQ8BufferTypes(MemRefType sums, MemRefType dw, MemRefType dx, MemRefType out, MemRefType lanes,
                      MemRefType codes) {
  return sums.getRank() == 4 && dw.getRank() == 3 && dx.getRank() == 2 && out.getRank() == 3 && lanes.getRank() == 3 &&
         codes.getRank() == 4 && dw.getElementType().isF16() && dx.getElementType().isF32() &&
         out.getElementType().isF32() && lanes.getElementType().isInteger(32) && codes.getElementType().isInteger(32);
}

/// Why `op` (a bf16 packed matmul on buffers: activation lanes [M, K/2] i32, weight lanes
/// [N/P, K/2, P] i32, output [M, N/P, P] f32) cannot take `tile`, or an empty string.
std::string unsupported(linalg::GenericOp op, const AmxTile &tile) {
  if (op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1 || !op.hasPureBufferSemantics())
    return "expected two input buffers and one output buffer";
  auto a = dyn_cast<MemRefType>(op.getDpsInputs()[0].getType());
  auto b = dyn_cast<MemRefType>(op.getDpsInputs()[1].getType());
  auto c = dyn_cast<MemRefType>(op.getDpsInits()[0].getType());
  if (!a || !b || !c || !a.hasStaticShape() || !b.hasStaticShape() || !c.hasStaticShape() || a.getRank() != 2 ||
      b.getRank() != 3 || c.getRank() != 3 || !a.getElementType().isInteger(32) || !b.getElementType().isInteger(32) ||
      !c.getElementType().isF32())
    return "expected static [M, K/2] i32, [N/P, K/2, P] i32 and [M, N/P, P] f32 buffers";
  if (!rowMajorStrides(a) || !rowMajorStrides(b) || !rowMajorStrides(c))
    return "expected buffers with static strides, the innermost 1";
  if (!fitsTileRegisters(tile) || tile.kWords % kTile != 0)
    return "the block needs more tile registers than there are, or is not made of 16 x 16 tiles";
  if (a.getDimSize(0) % tile.rows != 0 || a.getDimSize(1) % tile.kWords != 0 || b.getDimSize(2) % tile.columns != 0 ||
      tile.chunks < 1 || b.getDimSize(0) % tile.chunks != 0)
    return "the matmul does not divide into whole blocks";
  auto bStrides = rowMajorStrides(b)->first;
  if (bStrides[0] % bStrides[1] != 0) return "the weight's panel stride is not a whole number of rows";
  return "";
}

/// The linalg.fill of +0 that initializes `op`'s output, when the output is a buffer allocated for
/// it and nothing else touches the buffer between the fill and `op`: the first K step can then
/// start from a small block of zeros in L1 instead of the output, and the fill goes.
linalg::FillOp zeroFillOfOutput(linalg::GenericOp op) {
  Value out = op.getDpsInits()[0];
  if (!isa_and_nonnull<memref::AllocOp, memref::AllocaOp>(out.getDefiningOp())) return {};
  linalg::FillOp fill;
  for (Operation *user : out.getUsers()) {
    if (user == op.getOperation()) continue;
    Operation *at = op->getBlock()->findAncestorOpInBlock(*user);
    if (!at) return {};
    if (op->isBeforeInBlock(at)) continue; // reads the result
    auto candidate = dyn_cast<linalg::FillOp>(user);
    if (!candidate || fill) return {};
    fill = candidate;
  }
  if (!fill || fill.getOutputs()[0] != out || !matchPattern(fill.getInputs()[0], m_PosZeroFloat())) return {};
  return fill;
}

Value index(OpBuilder &b, Location loc, int64_t value) { return b.create<arith::ConstantIndexOp>(loc, value); }

/// An scf.for from `from` to `to` by `step` whose body `body` builds.
void forLoop(OpBuilder &b, Location loc, Value from, Value to, int64_t step,
             function_ref<void(OpBuilder &, Value)> body) {
  b.create<scf::ForOp>(loc, from, to, index(b, loc, step), ValueRange{},
                       [&](OpBuilder &b, Location, Value iv, ValueRange) {
                         body(b, iv);
                         b.create<scf::YieldOp>(loc);
                       });
}

/// A rows x columns block of f32 zeros, allocated in the frame of `op`'s allocation scope (not in a
/// loop that would grow the stack) and filled at the rewriter's insertion point.
Value zeroBlock(RewriterBase &rewriter, linalg::GenericOp op, const AmxTile &tile) {
  Location loc = op.getLoc();
  Value zeros;
  {
    Operation *scope = op->getParentWithTrait<OpTrait::AutomaticAllocationScope>();
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToStart(&scope->getRegion(0).front());
    zeros = rewriter.create<memref::AllocaOp>(loc, MemRefType::get({tile.rows, tile.columns}, rewriter.getF32Type()),
                                              rewriter.getI64IntegerAttr(64));
  }
  Value zero = rewriter.create<arith::ConstantOp>(loc, rewriter.getF32FloatAttr(0.0f));
  rewriter.create<linalg::FillOp>(loc, zero, zeros);
  return zeros;
}

/// Replaces `op` by loops over its panels (split into tile.chunks pieces of an scf.forall), the
/// column blocks of a panel, the row blocks and the K steps, each step accumulating into
/// rows x columns of f32 in tile registers.
void lowerToTiles(RewriterBase &rewriter, linalg::GenericOp op, const AmxTile &tile) {
  Location loc = op.getLoc();
  linalg::FillOp zeroFill = zeroFillOfOutput(op);
  if (zeroFill) rewriter.eraseOp(zeroFill);
  rewriter.setInsertionPoint(op);
  Value aBuffer = op.getDpsInputs()[0], bBuffer = op.getDpsInputs()[1], cBuffer = op.getDpsInits()[0];
  auto aType = cast<MemRefType>(aBuffer.getType()), bType = cast<MemRefType>(bBuffer.getType()),
       cType = cast<MemRefType>(cBuffer.getType());
  auto [aStrides, aOffset] = *rowMajorStrides(aType);
  auto [bStrides, bOffset] = *rowMajorStrides(bType);
  auto [cStrides, cOffset] = *rowMajorStrides(cType);
  const int64_t rows = aType.getDimSize(0), kWords = aType.getDimSize(1), panels = bType.getDimSize(0),
                width = bType.getDimSize(2);
  // A panel's weight lanes are rows panelRows apart in the [rows, P] view of the weight.
  const int64_t panelRows = bStrides[0] / bStrides[1];
  Value activations = rowView(rewriter, loc, aBuffer, aOffset, rows, aStrides[0]);
  Value weights = rowView(rewriter, loc, bBuffer, bOffset, panels * panelRows, bStrides[1]);
  Value out = rowView(rewriter, loc, cBuffer, cOffset, rows, cStrides[0]);

  auto lanes = VectorType::get({kTile, 2 * kTile}, rewriter.getBF16Type());
  auto sums = VectorType::get({kTile, kTile}, rewriter.getF32Type());
  const int64_t rowTiles = tile.rows / kTile, columnTiles = tile.columns / kTile;
  // A block of zeros the first K step loads its accumulators from, one distinct tile each.
  // (amx.tile_zero is Pure in MLIR 19: CSE would merge the block's tile_zero ops into one tile
  // that LLVM must then copy for each accumulator, and LICM would hoist it out of the loops.)
  Value zeros = zeroFill ? zeroBlock(rewriter, op, tile) : Value();

  auto panelLoop = [&](OpBuilder &builder, Location loc, Value first, Value last) {
    auto forEach = [&](OpBuilder &b, Value from, Value to, int64_t step, function_ref<void(OpBuilder &, Value)> body) {
      forLoop(b, loc, from, to, step, body);
    };
    forEach(builder, first, last, 1, [&](OpBuilder &bb, Value panel) {
      Value panelColumn = bb.create<arith::MulIOp>(loc, panel, index(bb, loc, cStrides[1]));
      Value panelRow = bb.create<arith::MulIOp>(loc, panel, index(bb, loc, panelRows));
      forEach(bb, index(bb, loc, 0), index(bb, loc, width), tile.columns, [&](OpBuilder &bb, Value column) {
        Value outColumn = bb.create<arith::AddIOp>(loc, panelColumn, column);
        forEach(bb, index(bb, loc, 0), index(bb, loc, rows), tile.rows, [&](OpBuilder &bb, Value row) {
          // K words [k0, k0 + tile.kWords): accumulators loaded from the output (or zeros, for
          // the first step of a zero-filled output), updated, stored back.
          auto kStep = [&](OpBuilder &bb, Value k0, bool fromZero) {
            auto plus = [&](Value base, int64_t offset) -> Value {
              return offset == 0 ? base : bb.create<arith::AddIOp>(loc, base, index(bb, loc, offset)).getResult();
            };
            SmallVector<Value> acc;
            for (int64_t i = 0; i < rowTiles; ++i)
              for (int64_t j = 0; j < columnTiles; ++j)
                acc.push_back(
                    fromZero ? bb.create<amx::TileLoadOp>(
                                   loc, sums, zeros, ValueRange{index(bb, loc, kTile * i), index(bb, loc, kTile * j)})
                             : bb.create<amx::TileLoadOp>(
                                   loc, sums, out, ValueRange{plus(row, kTile * i), plus(outColumn, kTile * j)}));
            for (int64_t step = 0; step < tile.kWords; step += kTile) {
              Value k = plus(k0, step), weightRow = bb.create<arith::AddIOp>(loc, panelRow, k);
              SmallVector<Value> x, w;
              for (int64_t i = 0; i < rowTiles; ++i)
                x.push_back(bb.create<amx::TileLoadOp>(loc, lanes, activations, ValueRange{plus(row, kTile * i), k}));
              for (int64_t j = 0; j < columnTiles; ++j)
                w.push_back(
                    bb.create<amx::TileLoadOp>(loc, lanes, weights, ValueRange{weightRow, plus(column, kTile * j)}));
              for (int64_t i = 0; i < rowTiles; ++i)
                for (int64_t j = 0; j < columnTiles; ++j) {
                  Value &sum = acc[i * columnTiles + j];
                  sum = bb.create<amx::TileMulFOp>(loc, sums, x[i], w[j], sum);
                }
            }
            for (int64_t i = 0; i < rowTiles; ++i)
              for (int64_t j = 0; j < columnTiles; ++j)
                bb.create<amx::TileStoreOp>(loc, out, ValueRange{plus(row, kTile * i), plus(outColumn, kTile * j)},
                                            acc[i * columnTiles + j]);
          };
          Value kBegin = index(bb, loc, 0);
          if (zeroFill) {
            kStep(bb, kBegin, /*fromZero=*/true);
            kBegin = index(bb, loc, tile.kWords);
          }
          forEach(bb, kBegin, index(bb, loc, kWords), tile.kWords,
                  [&](OpBuilder &bb, Value k0) { kStep(bb, k0, /*fromZero=*/false); });
        });
      });
    });
  };

  if (tile.chunks == 1) {
    panelLoop(rewriter, loc, index(rewriter, loc, 0), index(rewriter, loc, panels));
  } else {
    const int64_t perChunk = panels / tile.chunks;
    rewriter.create<scf::ForallOp>(loc, ArrayRef<OpFoldResult>{rewriter.getIndexAttr(tile.chunks)}, ValueRange{},
                                   std::nullopt, [&](OpBuilder &b, Location loc, ValueRange ivs) {
                                     Value first = b.create<arith::MulIOp>(loc, ivs[0], index(b, loc, perChunk));
                                     panelLoop(b, loc, first,
                                               b.create<arith::AddIOp>(loc, first, index(b, loc, perChunk)));
                                     b.create<scf::InParallelOp>(loc);
                                   });
  }
  rewriter.eraseOp(op);
}

/// The q8_0 block partial sums `op` (a marked scaled-block matmul) reads as its input 0, on
/// buffers: the generic marked gpt.block_partials that writes that buffer, when there is one.
linalg::GenericOp partialsProducer(linalg::GenericOp op) {
  if (op.getNumDpsInputs() < 1) return {};
  for (Operation *user : op.getDpsInputs()[0].getUsers())
    if (auto producer = dyn_cast<linalg::GenericOp>(user); producer && isBlockPartials(producer) &&
                                                           producer.getNumDpsInits() == 1 &&
                                                           producer.getDpsInits()[0] == op.getDpsInputs()[0])
      return producer;
  return {};
}

/// Whether an op other than `op`, `partials` and a fill touches `op`'s block sums.
bool blockSumsUsedElsewhere(linalg::GenericOp op, linalg::GenericOp partials) {
  return llvm::any_of(op.getDpsInputs()[0].getUsers(), [&](Operation *user) {
    return user != op.getOperation() && user != partials.getOperation() && !isa<linalg::FillOp>(user);
  });
}

/// Why `op` (a q8_0 scaled-block matmul on buffers: block sums [M, N/P, K/32, P] i32 written by
/// `partials`, weight scales [N/P, K/32, P] f16, activation scales [M, K/32] f32, compensations
/// [M, K/32] f32, output [M, N/P, P] f32; `partials` reads activation lanes [M, K/32, 8] i32
/// and weight lanes [N/P, K/32, 8, P] i32) cannot take `tile`, or an empty string.
std::string unsupportedQ8(linalg::GenericOp op, linalg::GenericOp partials, const AmxTile &tile) {
  if (op.getNumDpsInputs() != 4 || op.getNumDpsInits() != 1 || !op.hasPureBufferSemantics() ||
      !partials.hasPureBufferSemantics() || !isSignedInt8BlockPartials(partials))
    return "expected q8_0 block sums of signed codes and a scaled sum over blocks, on buffers";
  auto type = [](Value v) { return dyn_cast<MemRefType>(v.getType()); };
  MemRefType sums = type(op.getDpsInputs()[0]), dw = type(op.getDpsInputs()[1]), dx = type(op.getDpsInputs()[2]),
             out = type(op.getDpsInits()[0]), lanes = type(partials.getDpsInputs()[0]),
             codes = type(partials.getDpsInputs()[1]);
  for (MemRefType t : {sums, dw, dx, out, lanes, codes})
    if (!t || !t.hasStaticShape()) return "expected static buffers";
  if (!hasQ8BufferTypes(sums, dw, dx, out, lanes, codes))
    return "expected [M, K/32, 8] i32, [N/P, K/32, 8, P] i32, [N/P, K/32, P] f16, [M, K/32] f32 and [M, N/P, P] "
           "f32 buffers";
  const int64_t rows = out.getDimSize(0), panels = out.getDimSize(1), width = out.getDimSize(2),
                blocks = lanes.getDimSize(1);
  const int64_t lanesPerBlock = transformer::PackedMatmulOp::kBlockSize / 4;
  if (lanes.getDimSize(0) != rows || lanes.getDimSize(2) != lanesPerBlock ||
      codes.getShape() != ArrayRef<int64_t>{panels, blocks, lanesPerBlock, width} ||
      dw.getShape() != ArrayRef<int64_t>{panels, blocks, width} || dx.getShape() != ArrayRef<int64_t>{rows, blocks})
    return "the buffers' shapes do not agree";
  for (MemRefType t : {dw, dx, out, lanes, codes})
    if (!rowMajorStrides(t)) return "expected buffers with static strides, the innermost 1";
  auto laneStrides = rowMajorStrides(lanes)->first, codeStrides = rowMajorStrides(codes)->first;
  if (laneStrides[1] != lanesPerBlock || codeStrides[1] != lanesPerBlock * codeStrides[2] ||
      codeStrides[0] % codeStrides[2] != 0)
    return "the activation or weight lanes of a row are not contiguous";
  if (!fitsTileRegisters(tile) || tile.kWords % lanesPerBlock != 0 || blocks % (tile.kWords / lanesPerBlock) != 0)
    return "the block needs more tile registers than there are, or is not made of 16 x 16 tiles and whole blocks "
           "of K";
  if (rows % tile.rows != 0 || width % tile.columns != 0 || tile.chunks < 1 || panels % tile.chunks != 0)
    return "the matmul does not divide into whole blocks";
  if (blockSumsUsedElsewhere(op, partials)) return "its block sums are used elsewhere";
  return "";
}

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
  Value zeros;
  Value sums;   // flat i32, viewed per op
  Value totals; // flat f32, viewed per op
};

/// Padding of a row of block sums, in 32-bit words (see Q8Scratch).
constexpr int64_t kSumsPadding = 16;
/// Panels of a q8_0 matmul that take a row block in turn (measured on GPT-2 small's shapes: 8 is
/// about 6% faster than 1).
constexpr int64_t kPanelGroup = 8;

/// `flat` viewed as a row-major [rows, columns] memref.
Value matrixView(OpBuilder &b, Location loc, Value flat, int64_t rows, int64_t columns) {
  auto element = cast<MemRefType>(flat.getType()).getElementType();
  return b.create<memref::ReinterpretCastOp>(loc, MemRefType::get({rows, columns}, element), flat, b.getIndexAttr(0),
                                             ArrayRef<OpFoldResult>{b.getIndexAttr(rows), b.getIndexAttr(columns)},
                                             ArrayRef<OpFoldResult>{b.getIndexAttr(columns), b.getIndexAttr(1)});
}

/// Replaces `op` and `partials` by loops over its panels (an scf.forall of tile.chunks pieces),
/// the column blocks of a panel, the row blocks and the blocks of K. A row x column block of the
/// output is copied to the chunk's totals; each block of K then loads zeros into the (rows / 16)
/// x (columns / 16) accumulator tiles, runs `tdpbssd` on the activation and weight codes
/// (amx.tile_muli, signed by signed: no +128 offset, no compensation), stores the i32 sums, and
/// adds them to the totals, `total += float(sum) * (d_w * d_x)` with one fma: the same float
/// operations in the same order as the vector code's (its sum, sum' - 128 * sum(code_x), is the
/// same integer, exact in f32), so the results are the same bits. The totals go back at the end.
/// Each loop's body is a method; the fields are what every body reads.
class Q8TileLowering {
public:
  /// Views of `op`'s buffers and the scratch, created at the rewriter's insertion point.
  Q8TileLowering(RewriterBase &rewriter, linalg::GenericOp op, linalg::GenericOp partials, const AmxTile &tile,
                 const Q8Scratch &scratch, bool zeroFill)
      : loc(op.getLoc()), tile(tile), scratch(scratch), zeroFill(zeroFill) {
    dw = op.getDpsInputs()[1], dx = op.getDpsInputs()[2], out = op.getDpsInits()[0];
    Value lanes = partials.getDpsInputs()[0], codes = partials.getDpsInputs()[1];
    auto lanesType = cast<MemRefType>(lanes.getType()), codesType = cast<MemRefType>(codes.getType()),
         outType = cast<MemRefType>(out.getType());
    auto [laneStrides, laneOffset] = *rowMajorStrides(lanesType);
    auto [codeStrides, codeOffset] = *rowMajorStrides(codesType);
    rows = outType.getDimSize(0), panels = outType.getDimSize(1), width = outType.getDimSize(2);
    blocks = lanesType.getDimSize(1);
    // Rows of the [rows, P] view of the weight lanes between two panels.
    panelRows = codeStrides[0] / codeStrides[2];
    activations = rowView(rewriter, loc, lanes, laneOffset, rows, laneStrides[0]);
    weights = rowView(rewriter, loc, codes, codeOffset, panels * panelRows, codeStrides[2]);
    // Blocks of K whose sums go through the totals together.
    group = tile.kWords / blockWords;
    sums = matrixView(rewriter, loc, scratch.sums, group * tile.chunks * tile.rows, tile.columns + kSumsPadding);
    totals = matrixView(rewriter, loc, scratch.totals, tile.chunks * tile.rows, tile.columns);
    // Activations: 16 rows x one block (8 words, 32 bytes); weights: the block's 8 lane rows x 16
    // columns (64 bytes).
    xTile = VectorType::get({kTile, 4 * blockWords}, rewriter.getI8Type());
    wTile = VectorType::get({blockWords, 4 * kTile}, rewriter.getI8Type());
    sumTile = VectorType::get({kTile, kTile}, rewriter.getI32Type());
    i32Row = VectorType::get({kTile}, rewriter.getI32Type());
    f32Row = VectorType::get({kTile}, rewriter.getF32Type());
    f16Row = VectorType::get({kTile}, rewriter.getF16Type());
  }

  int64_t panelCount() const { return panels; }

  /// Panels [first, last) of the thread's chunk `chunk`.
  void panelLoop(OpBuilder &builder, Value chunk, Value first, Value last) {
    Value chunkRow = builder.create<arith::MulIOp>(loc, chunk, index(builder, loc, tile.rows));
    // Up to kPanelGroup panels (their weights in L2) take each row block in turn, which stays in
    // L1 between them: the activation tiles' 16 rows are K bytes apart, a line each.
    int64_t panelGroup = kPanelGroup;
    while ((panels / tile.chunks) % panelGroup != 0) panelGroup /= 2;
    forEach(builder, first, last, panelGroup, [&](OpBuilder &bb, Value firstPanel) {
      forEach(bb, index(bb, loc, 0), index(bb, loc, rows), tile.rows, [&](OpBuilder &bb, Value row) {
        forEach(bb, firstPanel, plus(bb, firstPanel, panelGroup), 1, [&](OpBuilder &bb, Value panel) {
          Value panelRow = bb.create<arith::MulIOp>(loc, panel, index(bb, loc, panelRows));
          forEach(bb, index(bb, loc, 0), index(bb, loc, width), tile.columns, [&](OpBuilder &bb, Value column) {
            outputBlock(bb, OutputBlock{chunkRow, row, panel, panelRow, column, index(bb, loc, 0)});
          });
        });
      });
    });
  }

private:
  /// Where the block being computed is: its chunk's first row of totals, its first row, its panel
  /// (and that panel's first row of weight lanes) and its first column in the panel; c0 is 0.
  struct OutputBlock {
    Value chunkRow, row, panel, panelRow, column, c0;
  };

  void forEach(OpBuilder &b, Value from, Value to, int64_t step, function_ref<void(OpBuilder &, Value)> body) {
    forLoop(b, loc, from, to, step, body);
  }
  Value plus(OpBuilder &b, Value base, int64_t offset) {
    return offset == 0 ? base : b.create<arith::AddIOp>(loc, base, index(b, loc, offset)).getResult();
  }

  /// One output block: to the totals, the blocks of K group by group, back to the output.
  void outputBlock(OpBuilder &bb, const OutputBlock &at) {
    copyRows(bb, at, /*toTotals=*/true);
    forEach(bb, at.c0, index(bb, loc, blocks), group, [&](OpBuilder &bb, Value first) {
      SmallVector<Value> groupBlocks;
      for (int64_t g = 0; g < group; ++g) {
        groupBlocks.push_back(plus(bb, first, g));
        tileSums(bb, at, groupBlocks.back(), g);
      }
      scaleSums(bb, at, groupBlocks);
    });
    copyRows(bb, at, /*toTotals=*/false);
  }

  /// The output block to the totals (zeros for a zero-filled output) or back, per row and 16 columns.
  void copyRows(OpBuilder &bb, const OutputBlock &at, bool toTotals) {
    forEach(bb, at.c0, index(bb, loc, tile.rows), 1, [&](OpBuilder &rb, Value r) {
      Value m = rb.create<arith::AddIOp>(loc, at.row, r), totalRow = rb.create<arith::AddIOp>(loc, at.chunkRow, r);
      for (int64_t j = 0; j < tile.columns / kTile; ++j) {
        SmallVector<Value> outAt = {m, at.panel, plus(rb, at.column, kTile * j)},
                           totalAt = {totalRow, index(rb, loc, kTile * j)};
        if (toTotals && zeroFill)
          rb.create<vector::StoreOp>(
              loc, rb.create<arith::ConstantOp>(loc, DenseElementsAttr::get(f32Row, rb.getF32FloatAttr(0.0f))), totals,
              totalAt);
        else if (toTotals)
          rb.create<vector::StoreOp>(loc, rb.create<vector::LoadOp>(loc, f32Row, out, outAt), totals, totalAt);
        else
          rb.create<vector::StoreOp>(loc, rb.create<vector::LoadOp>(loc, f32Row, totals, totalAt), out, outAt);
      }
    });
  }

  /// The sums of the group's block g (g < group) in rows [g * chunks * rows, ...) of `sums`.
  Value sumsRowOf(OpBuilder &b, const OutputBlock &at, int64_t g) {
    return plus(b, at.chunkRow, g * tile.chunks * tile.rows);
  }

  /// The i32 sums of K block `block` (the group's g-th) over the output block, by tdpbssd, to `sums`.
  void tileSums(OpBuilder &bb, const OutputBlock &at, Value block, int64_t g) {
    const int64_t rowTiles = tile.rows / kTile, columnTiles = tile.columns / kTile;
    Value sumsRow = sumsRowOf(bb, at, g);
    Value k = bb.create<arith::MulIOp>(loc, block, index(bb, loc, blockWords));
    Value weightRow = bb.create<arith::AddIOp>(loc, at.panelRow, k);
    SmallVector<Value> x, w;
    for (int64_t i = 0; i < rowTiles; ++i)
      x.push_back(bb.create<amx::TileLoadOp>(loc, xTile, activations, ValueRange{plus(bb, at.row, kTile * i), k}));
    for (int64_t j = 0; j < columnTiles; ++j)
      w.push_back(
          bb.create<amx::TileLoadOp>(loc, wTile, weights, ValueRange{weightRow, plus(bb, at.column, kTile * j)}));
    // All the accumulators live at once, each in its own tile register: tile registers are
    // not renamed, so one register reused for each sum in turn would make its load wait
    // for the previous sum's store, and the products run one after the other.
    SmallVector<Value> acc;
    for (int64_t n = 0; n < rowTiles * columnTiles; ++n)
      acc.push_back(
          bb.create<amx::TileLoadOp>(loc, sumTile, scratch.zeros, ValueRange{at.c0, index(bb, loc, kTile * n)}));
    for (int64_t i = 0; i < rowTiles; ++i)
      for (int64_t j = 0; j < columnTiles; ++j) {
        Value &sum = acc[i * columnTiles + j];
        // Signed by signed bytes: tdpbssd.
        sum = bb.create<amx::TileMulIOp>(loc, sumTile, x[i], w[j], sum, /*isZextLhs=*/false,
                                         /*isZextRhs=*/false);
      }
    for (int64_t i = 0; i < rowTiles; ++i)
      for (int64_t j = 0; j < columnTiles; ++j)
        bb.create<amx::TileStoreOp>(loc, sums, ValueRange{plus(bb, sumsRow, kTile * i), index(bb, loc, kTile * j)},
                                    acc[i * columnTiles + j]);
  }

  /// A group of blocks' sums, scaled, added to the totals row by row: each 16 totals loaded once
  /// per group, updated by one fma per block in K order, stored once.
  void scaleSums(OpBuilder &bb, const OutputBlock &at, ArrayRef<Value> groupBlocks) {
    const int64_t columnTiles = tile.columns / kTile;
    SmallVector<Value> weightScales; // [g][j]
    for (Value block : groupBlocks)
      for (int64_t j = 0; j < columnTiles; ++j) {
        Value half =
            bb.create<vector::LoadOp>(loc, f16Row, dw, ValueRange{at.panel, block, plus(bb, at.column, kTile * j)});
        weightScales.push_back(bb.create<arith::ExtFOp>(loc, f32Row, half));
      }
    forEach(bb, at.c0, index(bb, loc, tile.rows), 1, [&](OpBuilder &rb, Value r) {
      Value m = rb.create<arith::AddIOp>(loc, at.row, r), totalRow = rb.create<arith::AddIOp>(loc, at.chunkRow, r);
      SmallVector<Value> activationScales;
      for (Value block : groupBlocks)
        activationScales.push_back(
            rb.create<vector::BroadcastOp>(loc, f32Row, rb.create<memref::LoadOp>(loc, dx, ValueRange{m, block})));
      for (int64_t j = 0; j < columnTiles; ++j) {
        SmallVector<Value> totalAt = {totalRow, index(rb, loc, kTile * j)};
        Value total = rb.create<vector::LoadOp>(loc, f32Row, totals, totalAt);
        for (int64_t g = 0; g < static_cast<int64_t>(groupBlocks.size()); ++g) {
          Value sumsAt = rb.create<arith::AddIOp>(loc, sumsRowOf(rb, at, g), r);
          Value blockSum = rb.create<arith::SIToFPOp>(
              loc, f32Row, rb.create<vector::LoadOp>(loc, i32Row, sums, ValueRange{sumsAt, totalAt[1]}));
          Value scale = rb.create<arith::MulFOp>(loc, weightScales[g * columnTiles + j], activationScales[g]);
          total = rb.create<math::FmaOp>(loc, blockSum, scale, total);
        }
        rb.create<vector::StoreOp>(loc, total, totals, totalAt);
      }
    });
  }

  Location loc;
  AmxTile tile;
  Q8Scratch scratch;
  // A zero-filled output (the matmul's own init): the totals start from zeros, the output is
  // only written, and its fill goes (a pass over M x N floats fewer, and no read of them).
  bool zeroFill;
  Value dw, dx, out, activations, weights, sums, totals;
  VectorType xTile, wTile, sumTile, i32Row, f32Row, f16Row;
  int64_t rows = 0, panels = 0, width = 0, blocks = 0, panelRows = 0, group = 0;
  static constexpr int64_t blockWords = transformer::PackedMatmulOp::kBlockSize / 4;
};

/// Lowers `op` and `partials` with Q8TileLowering: one panel loop, or one per thread's chunk.
void lowerQ8ToTiles(RewriterBase &rewriter, linalg::GenericOp op, linalg::GenericOp partials, const AmxTile &tile,
                    const Q8Scratch &scratch) {
  Location loc = op.getLoc();
  linalg::FillOp zeroFill = zeroFillOfOutput(op);
  if (zeroFill) rewriter.eraseOp(zeroFill);
  Value sumsBuffer = op.getDpsInputs()[0];
  rewriter.setInsertionPoint(op);
  Q8TileLowering lowering(rewriter, op, partials, tile, scratch, bool(zeroFill));
  const int64_t panels = lowering.panelCount();
  if (tile.chunks == 1) {
    lowering.panelLoop(rewriter, index(rewriter, loc, 0), index(rewriter, loc, 0), index(rewriter, loc, panels));
  } else {
    const int64_t perChunk = panels / tile.chunks;
    rewriter.create<scf::ForallOp>(loc, ArrayRef<OpFoldResult>{rewriter.getIndexAttr(tile.chunks)}, ValueRange{},
                                   std::nullopt, [&](OpBuilder &b, Location loc, ValueRange ivs) {
                                     Value first = b.create<arith::MulIOp>(loc, ivs[0], index(b, loc, perChunk));
                                     lowering.panelLoop(b, ivs[0], first,
                                                        b.create<arith::AddIOp>(loc, first, index(b, loc, perChunk)));
                                     b.create<scf::InParallelOp>(loc);
                                   });
  }
  rewriter.eraseOp(op);
  // The block sums are computed above, in tiles: their generic, its zero fill and its buffer go.
  for (Operation *user : llvm::make_early_inc_range(sumsBuffer.getUsers())) rewriter.eraseOp(user);
  if (Operation *alloc = sumsBuffer.getDefiningOp(); alloc && isa<memref::AllocOp, memref::AllocaOp>(alloc))
    rewriter.eraseOp(alloc);
}

class LowerAmxMatmulsPass : public impl::LowerAmxMatmulsBase<LowerAmxMatmulsPass> {
public:
  void runOnOperation() override {
    SmallVector<std::pair<linalg::GenericOp, AmxTile>> marked;
    getOperation().walk([&](linalg::GenericOp op) {
      if (std::optional<AmxTile> tile = getAmxTile(op)) marked.push_back({op, *tile});
    });
    IRRewriter rewriter(&getContext());
    // One scratch per allocation scope, sized for the largest q8_0 matmul in it.
    DenseMap<Operation *, Q8Scratch> scratch;
    DenseMap<Operation *, std::pair<int64_t, int64_t>> scratchWords; // sums, totals
    SmallVector<linalg::GenericOp> partials;
    for (auto [op, tile] : marked) {
      partials.push_back(partialsProducer(op));
      std::string problem = partials.back() ? unsupportedQ8(op, partials.back(), tile) : unsupported(op, tile);
      if (!problem.empty()) {
        op.emitOpError() << "is marked '" << attr::kAmxTile << "' but cannot be lowered to AMX tiles: " << problem;
        return signalPassFailure();
      }
      if (partials.back()) {
        auto &[sumsWords, totalsWords] = scratchWords[op->getParentWithTrait<OpTrait::AutomaticAllocationScope>()];
        const int64_t blockWords = transformer::PackedMatmulOp::kBlockSize / 4;
        sumsWords =
            std::max(sumsWords, tile.kWords / blockWords * tile.chunks * tile.rows * (tile.columns + kSumsPadding));
        totalsWords = std::max(totalsWords, tile.chunks * tile.rows * tile.columns);
      }
    }
    for (auto [scope, words] : scratchWords) {
      auto [sumsWords, totalsWords] = words;
      rewriter.setInsertionPointToStart(&scope->getRegion(0).front());
      Location loc = scope->getLoc();
      auto i32 = rewriter.getI32Type();
      auto aligned = rewriter.getI64IntegerAttr(64);
      Value zeros =
          rewriter.create<memref::AllocaOp>(loc, MemRefType::get({kTile, kTile * kTileRegisters / 2}, i32), aligned);
      Value zero = rewriter.create<arith::ConstantOp>(loc, rewriter.getI32IntegerAttr(0));
      rewriter.create<linalg::FillOp>(loc, zero, zeros);
      scratch[scope] = {
          zeros, rewriter.create<memref::AllocaOp>(loc, MemRefType::get({sumsWords}, i32), aligned),
          rewriter.create<memref::AllocaOp>(loc, MemRefType::get({totalsWords}, rewriter.getF32Type()), aligned)};
    }
    for (auto [index, marked] : llvm::enumerate(marked)) {
      auto [op, tile] = marked;
      if (linalg::GenericOp producer = partials[index])
        lowerQ8ToTiles(rewriter, op, producer, tile,
                       scratch[op->getParentWithTrait<OpTrait::AutomaticAllocationScope>()]);
      else
        lowerToTiles(rewriter, op, tile);
    }
  }
};

} // namespace

bool isSignedInt8BlockPartials(Operation *op) {
  auto generic = dyn_cast_or_null<linalg::GenericOp>(op);
  if (!generic || !isBlockPartials(generic) || generic.getNumDpsInputs() != 2 || generic.getNumDpsInits() != 1)
    return false;
  // lane_dot_u8i8(acc, xori(w, 0x80808080), x): unsigned (code + 128) bytes by signed ones.
  Block &body = generic.getRegion().front();
  auto dot = dyn_cast_or_null<transformer::LaneDotU8I8Op>(body.getTerminator()->getOperand(0).getDefiningOp());
  if (!dot || dot.getAccumulator() != body.getArgument(2) || dot.getRhs() != body.getArgument(0)) return false;
  auto flip = dot.getLhs().getDefiningOp<arith::XOrIOp>();
  APInt mask;
  return flip && flip.getLhs() == body.getArgument(1) && matchPattern(flip.getRhs(), m_ConstantInt(&mask)) &&
         mask.getZExtValue() == 0x80808080u && body.getOperations().size() == 3;
}

} // namespace gpt::codegen
