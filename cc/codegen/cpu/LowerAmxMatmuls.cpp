// --gpt-lower-amx-matmuls: bf16 and q8_0 packed matmuls marked gpt.amx_tile, on buffers, to loops
// over AMX tiles (see Passes.td). The bf16 lowering and the pass are here, the q8_0 lowering in
// LowerAmxQ8Matmuls.cpp.
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

#define GEN_PASS_DEF_LOWERAMXMATMULS
#include "cc/codegen/cpu/Passes.h.inc"

namespace amx_tiles {

std::optional<std::pair<SmallVector<int64_t>, int64_t>> rowMajorStrides(MemRefType type) {
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(getStridesAndOffset(type, strides, offset)) || strides.empty() || strides.back() != 1 ||
      llvm::any_of(strides, ShapedType::isDynamic))
    return std::nullopt;
  return std::make_pair(strides, offset);
}

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

bool fitsTileRegisters(const AmxTile &tile) {
  const int64_t rowTiles = tile.rows / kTile, columnTiles = tile.columns / kTile;
  return tile.rows % kTile == 0 && tile.columns % kTile == 0 && rowTiles >= 1 && columnTiles >= 1 &&
         rowTiles * columnTiles + rowTiles + columnTiles <= kTileRegisters;
}

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

void forLoop(OpBuilder &b, Location loc, Value from, Value to, int64_t step,
             function_ref<void(OpBuilder &, Value)> body) {
  b.create<scf::ForOp>(loc, from, to, index(b, loc, step), ValueRange{},
                       [&](OpBuilder &b, Location, Value iv, ValueRange) {
                         body(b, iv);
                         b.create<scf::YieldOp>(loc);
                       });
}

} // namespace amx_tiles

namespace {
using namespace amx_tiles;

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
        auto [sums, totals] = q8ScratchWords(tile);
        sumsWords = std::max(sumsWords, sums);
        totalsWords = std::max(totalsWords, totals);
      }
    }
    for (auto [scope, words] : scratchWords)
      scratch[scope] = allocateQ8Scratch(rewriter, scope, words.first, words.second);
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
} // namespace gpt::codegen
