// --gpt-lower-amx-matmuls' q8_0 half: a scaled-block matmul and its block partial sums, marked
// gpt.amx_tile, on buffers, to loops over AMX tiles that multiply signed codes (see Passes.td).
#include "cc/codegen/cpu/AmxTiles.h"
#include "cc/codegen/cpu/Passes.h"

#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Matchers.h"

namespace gpt::codegen {
using namespace mlir;

namespace amx_tiles {
namespace {

/// Whether a q8_0 matmul's buffers have the ranks and element types unsupportedQ8 describes.
bool hasQ8BufferTypes(MemRefType sums, MemRefType dw, MemRefType dx, MemRefType out, MemRefType lanes,
                      MemRefType codes) {
  return sums.getRank() == 4 && dw.getRank() == 3 && dx.getRank() == 2 && out.getRank() == 3 && lanes.getRank() == 3 &&
         codes.getRank() == 4 && dw.getElementType().isF16() && dx.getElementType().isF32() &&
         out.getElementType().isF32() && lanes.getElementType().isInteger(32) && codes.getElementType().isInteger(32);
}

/// Whether an op other than `op`, `partials` and a fill touches `op`'s block sums.
bool blockSumsUsedElsewhere(linalg::GenericOp op, linalg::GenericOp partials) {
  return llvm::any_of(op.getDpsInputs()[0].getUsers(), [&](Operation *user) {
    return user != op.getOperation() && user != partials.getOperation() && !isa<linalg::FillOp>(user);
  });
}

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

} // namespace

linalg::GenericOp partialsProducer(linalg::GenericOp op) {
  if (op.getNumDpsInputs() < 1) return {};
  for (Operation *user : op.getDpsInputs()[0].getUsers())
    if (auto producer = dyn_cast<linalg::GenericOp>(user); producer && isBlockPartials(producer) &&
                                                           producer.getNumDpsInits() == 1 &&
                                                           producer.getDpsInits()[0] == op.getDpsInputs()[0])
      return producer;
  return {};
}

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

std::pair<int64_t, int64_t> q8ScratchWords(const AmxTile &tile) {
  const int64_t blockWords = transformer::PackedMatmulOp::kBlockSize / 4;
  return {tile.kWords / blockWords * tile.chunks * tile.rows * (tile.columns + kSumsPadding),
          tile.chunks * tile.rows * tile.columns};
}

Q8Scratch allocateQ8Scratch(RewriterBase &rewriter, Operation *scope, int64_t sumsWords, int64_t totalsWords) {
  rewriter.setInsertionPointToStart(&scope->getRegion(0).front());
  Location loc = scope->getLoc();
  auto i32 = rewriter.getI32Type();
  auto aligned = rewriter.getI64IntegerAttr(64);
  Value zeros =
      rewriter.create<memref::AllocaOp>(loc, MemRefType::get({kTile, kTile * kTileRegisters / 2}, i32), aligned);
  Value zero = rewriter.create<arith::ConstantOp>(loc, rewriter.getI32IntegerAttr(0));
  rewriter.create<linalg::FillOp>(loc, zero, zeros);
  return {zeros, rewriter.create<memref::AllocaOp>(loc, MemRefType::get({sumsWords}, i32), aligned),
          rewriter.create<memref::AllocaOp>(loc, MemRefType::get({totalsWords}, rewriter.getF32Type()), aligned)};
}

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

} // namespace amx_tiles

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
