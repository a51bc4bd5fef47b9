// The `transform.gpt.*` ops: upstream tiling, reduction tiling and thread splitting, with their
// sizes read from the gpt.* attributes of each payload op (see TransformOps.td).
#include "cc/codegen/common/TransformOps.h"

#include "cc/codegen/common/CodegenAttributes.h"
#include "cc/codegen/common/ElementwiseOnSplats.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/TransformOps/LinalgTransformOps.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/TilingInterface.h"

#define GET_OP_CLASSES
#include "cc/codegen/common/TransformOps.cpp.inc"

namespace gpt::codegen {
using namespace mlir;

namespace {

/// A script that names an attribute CodegenAttributes.h does not define has a typo: fail loudly
/// instead of silently matching nothing.
DiagnosedSilenceableFailure checkAttributeName(transform::TransformOpInterface op, StringRef name) {
  if (isCodegenAttribute(name)) return DiagnosedSilenceableFailure::success();
  return op.emitDefiniteFailure() << "'" << name
                                  << "' is not a gpt codegen attribute (cc/codegen/common/CodegenAttributes.h)";
}

/// The silenceable failure of `op` on one payload op: `message`, with a note at the payload op's
/// location naming its `role` ("target", "producer").
DiagnosedSilenceableFailure payloadFailure(transform::TransformOpInterface op, Location payload, const Twine &message,
                                           StringRef role = "target") {
  DiagnosedSilenceableFailure diag = op.emitSilenceableError(message);
  diag.attachNote(payload) << role;
  return diag;
}

class TransformExtension : public transform::TransformDialectExtension<TransformExtension> {
public:
  using Base::Base;

  void init() {
    registerTransformOps<
#define GET_OP_LIST
#include "cc/codegen/common/TransformOps.cpp.inc"
        >();
  }
};

} // namespace

void ApplyElementwiseOnSplatsPatternsOp::populatePatterns(RewritePatternSet &patterns) {
  populateElementwiseOnSplatsPatterns(patterns);
}

void registerTransformExtension(DialectRegistry &registry) { registry.addExtensions<TransformExtension>(); }

//===----------------------------------------------------------------------===//
// MatchAttributeOp
//===----------------------------------------------------------------------===//

DiagnosedSilenceableFailure MatchAttributeOp::apply(transform::TransformRewriter &,
                                                    transform::TransformResults &results,
                                                    transform::TransformState &state) {
  if (DiagnosedSilenceableFailure diag = checkAttributeName(*this, getName()); !diag.succeeded()) return diag;
  SmallVector<Operation *> matched;
  for (Operation *root : state.getPayloadOps(getRoot()))
    root->walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (op != root && op->hasAttr(getName())) matched.push_back(op);
    });
  results.set(cast<OpResult>(getResult()), matched);
  return DiagnosedSilenceableFailure::success();
}

//===----------------------------------------------------------------------===//
// TileByAttributeOp
//===----------------------------------------------------------------------===//

DiagnosedSilenceableFailure TileByAttributeOp::apply(transform::TransformRewriter &rewriter,
                                                     transform::TransformResults &results,
                                                     transform::TransformState &state) {
  if (DiagnosedSilenceableFailure diag = checkAttributeName(*this, getName()); !diag.succeeded()) return diag;
  SmallVector<Operation *> tiled, loops;
  for (Operation *target : state.getPayloadOps(getTarget())) {
    std::optional<LoopTile> tile = getLoopTile(target, getName());
    auto tileable = dyn_cast<TilingInterface>(target);
    if (!tile || !tileable)
      return payloadFailure(*this, target->getLoc(), "expected a tileable op with a '" + getName() + "'");
    scf::SCFTilingOptions options;
    options.setTileSizes(getAsIndexOpFoldResult(getContext(), tile->sizes));
    options.setInterchange(tile->interchange);
    rewriter.setInsertionPoint(target);
    FailureOr<scf::SCFTilingResult> result = scf::tileUsingSCF(rewriter, tileable, options);
    if (failed(result)) return emitDefaultSilenceableFailure(target);
    rewriter.replaceOp(target, result->replacements);
    tiled.append(result->tiledOps);
    for (LoopLikeOpInterface loop : result->loops) loops.push_back(loop);
  }
  results.set(cast<OpResult>(getTiled()), tiled);
  results.set(cast<OpResult>(getLoops()), loops);
  return DiagnosedSilenceableFailure::success();
}

//===----------------------------------------------------------------------===//
// TileReductionByAttributeOp
//===----------------------------------------------------------------------===//

DiagnosedSilenceableFailure TileReductionByAttributeOp::apply(transform::TransformRewriter &rewriter,
                                                              transform::TransformResults &results,
                                                              transform::TransformState &state) {
  SmallVector<Operation *> fills, partials, combines, loops;
  for (Operation *target : state.getPayloadOps(getTarget())) {
    std::optional<int64_t> lanes = getRowReductionTile(target);
    auto reduction = dyn_cast<PartialReductionOpInterface>(target);
    if (!lanes || !reduction)
      return payloadFailure(*this, target->getLoc(),
                            "expected a row reduction with a '" + attr::kRowReductionTile + "'");
    rewriter.setInsertionPoint(target);
    Builder b(getContext());
    FailureOr<scf::SCFReductionTilingResult> result =
        scf::tileReductionUsingScf(rewriter, reduction, getAsOpFoldResult(b.getI64ArrayAttr({0, *lanes})));
    if (failed(result)) return emitDefaultSilenceableFailure(target);
    for (Value init : result->initialValues) fills.push_back(init.getDefiningOp());
    llvm::append_range(partials, result->parallelTiledOps);
    llvm::append_range(combines, result->mergeOps);
    loops.push_back(result->loops.front());
  }
  results.set(cast<OpResult>(getFill()), fills);
  results.set(cast<OpResult>(getPartial()), partials);
  results.set(cast<OpResult>(getCombine()), combines);
  results.set(cast<OpResult>(getLoop()), loops);
  return DiagnosedSilenceableFailure::success();
}

//===----------------------------------------------------------------------===//
// SplitForThreadsOp
//===----------------------------------------------------------------------===//

DiagnosedSilenceableFailure SplitForThreadsOp::apply(transform::TransformRewriter &rewriter,
                                                     transform::TransformResults &results,
                                                     transform::TransformState &state) {
  SmallVector<Operation *> chunks, foralls;
  Builder b(getContext());
  for (Operation *target : state.getPayloadOps(getTarget())) {
    std::optional<SmallVector<int64_t>> pieces = getParallelChunks(target);
    // An epilogue generic is split by panel (its loops are the matmul's M, panel, column).
    if (std::optional<EpilogueFusion> fusion = getEpilogueFusion(target); !pieces && fusion)
      pieces = SmallVector<int64_t>{0, fusion->chunks};
    if (!pieces)
      return payloadFailure(*this, target->getLoc(),
                            "expected a '" + attr::kParallelChunks + "' or an '" + attr::kEpilogueChunks + "'");
    linalg::ForallTilingResult split;
    DiagnosedSilenceableFailure diag = transform::tileToForallOpImpl(
        rewriter, state, cast<transform::TransformOpInterface>(getOperation()), target,
        getAsOpFoldResult(b.getI64ArrayAttr(*pieces)), /*mixedTileSizes=*/{}, /*mapping=*/std::nullopt, split);
    if (!diag.succeeded()) return diag;
    chunks.push_back(split.tiledOp);
    foralls.push_back(split.tileOp);
  }
  results.set(cast<OpResult>(getChunks()), chunks);
  results.set(cast<OpResult>(getForall()), foralls);
  return DiagnosedSilenceableFailure::success();
}

//===----------------------------------------------------------------------===//
// GetEpilogueMatmulOp
//===----------------------------------------------------------------------===//

DiagnosedSilenceableFailure GetEpilogueMatmulOp::apply(transform::TransformRewriter &,
                                                       transform::TransformResults &results,
                                                       transform::TransformState &state) {
  SmallVector<Operation *> matmuls, fills;
  for (Operation *target : state.getPayloadOps(getTarget())) {
    std::optional<EpilogueFusion> fusion = getEpilogueFusion(target);
    Operation *producer = nullptr, *fill = nullptr;
    if (fusion && fusion->matmulOperand < target->getNumOperands())
      producer = target->getOperand(fusion->matmulOperand).getDefiningOp();
    if (auto matmul = dyn_cast_or_null<DestinationStyleOpInterface>(producer); matmul && matmul.getNumDpsInits() == 1)
      fill = matmul.getDpsInits()[0].getDefiningOp();
    if (!fill)
      return payloadFailure(*this, target->getLoc(),
                            "expected an epilogue whose '" + attr::kEpilogueOperand +
                                "' names a matmul with one init operand, both with producers");
    matmuls.push_back(producer);
    fills.push_back(fill);
  }
  results.set(cast<OpResult>(getMatmul()), matmuls);
  results.set(cast<OpResult>(getFill()), fills);
  return DiagnosedSilenceableFailure::success();
}

//===----------------------------------------------------------------------===//
// FuseIntoLoopOp
//===----------------------------------------------------------------------===//

namespace {

/// The first tensor.extract_slice of `producer`'s results nested in `loop`, or null.
tensor::ExtractSliceOp findSliceIn(Operation *producer, Operation *loop) {
  for (Operation *user : producer->getUsers())
    if (auto slice = dyn_cast<tensor::ExtractSliceOp>(user); slice && loop->isProperAncestor(slice)) return slice;
  return nullptr;
}

} // namespace

DiagnosedSilenceableFailure FuseIntoLoopOp::apply(transform::TransformRewriter &rewriter,
                                                  transform::TransformResults &results,
                                                  transform::TransformState &state) {
  auto loops = state.getPayloadOps(getLoop());
  if (!llvm::hasSingleElement(loops)) return emitDefiniteFailure() << "expected one loop";
  Operation *loop = *loops.begin();
  SmallVector<Operation *> fused;
  for (Operation *producer : state.getPayloadOps(getProducer())) {
    auto tileable = dyn_cast<TilingInterface>(producer);
    tensor::ExtractSliceOp slice = findSliceIn(producer, loop);
    if (!tileable || !slice)
      return payloadFailure(*this, producer->getLoc(),
                            "expected a tileable producer whose result the loop reads in slices", "producer");
    for (; slice; slice = findSliceIn(producer, loop)) {
      OpBuilder::InsertionGuard guard(rewriter);
      rewriter.setInsertionPoint(slice);
      unsigned resultNumber = cast<OpResult>(slice.getSource()).getResultNumber();
      FailureOr<TilingResult> tile =
          tileable.generateResultTileValue(rewriter, resultNumber, slice.getMixedOffsets(), slice.getMixedSizes());
      if (failed(tile)) return emitDefaultSilenceableFailure(producer);
      FailureOr<Value> value = tensor::ExtractSliceOp::rankReduceIfNeeded(
          rewriter, slice.getLoc(), tile->tiledValues[0], slice.getResultType().getShape());
      if (failed(value)) return emitDefaultSilenceableFailure(producer);
      rewriter.replaceOp(slice, *value);
      fused.append(tile->tiledOps);
    }
  }
  results.set(cast<OpResult>(getFused()), fused);
  results.set(cast<OpResult>(getNewLoop()), {loop});
  return DiagnosedSilenceableFailure::success();
}

void FuseIntoLoopOp::getEffects(SmallVectorImpl<MemoryEffects::EffectInstance> &effects) {
  transform::consumesHandle(getProducerMutable(), effects);
  transform::onlyReadsHandle(getLoopMutable(), effects);
  transform::producesHandle(getOperation()->getOpResults(), effects);
  transform::modifiesPayload(effects);
}

//===----------------------------------------------------------------------===//
// VectorizeBlockMatmulOp
//===----------------------------------------------------------------------===//

namespace {

/// True for `transfer_read %src[..., 0, ...] {permutation_map = (...) -> (dj, 0)} : vector<MxN>`
/// over a static source dim j of exactly M elements read from index 0: a column of M values,
/// each broadcast along its row.
bool isColumnBroadcastRead(vector::TransferReadOp read) {
  VectorType type = read.getVectorType();
  AffineMap map = read.getPermutationMap();
  if (type.getRank() != 2 || map.getNumResults() != 2 || read.getMask()) return false;
  auto row = dyn_cast<AffineDimExpr>(map.getResult(0));
  auto column = dyn_cast<AffineConstantExpr>(map.getResult(1));
  if (!row || !column || column.getValue() != 0) return false;
  auto source = dyn_cast<ShapedType>(read.getSource().getType());
  std::optional<int64_t> start = getConstantIntValue(read.getIndices()[row.getPosition()]);
  return source && source.getDimSize(row.getPosition()) == type.getDimSize(0) && start == 0;
}

/// Replaces a column-broadcast read by one broadcast read per row.
void splitIntoRowBroadcasts(RewriterBase &rewriter, vector::TransferReadOp read) {
  Location loc = read.getLoc();
  VectorType type = read.getVectorType();
  unsigned dim = cast<AffineDimExpr>(read.getPermutationMap().getResult(0)).getPosition();
  auto rowType = VectorType::get({type.getDimSize(1)}, type.getElementType());
  MLIRContext *ctx = rewriter.getContext();
  AffineMap broadcast = AffineMap::get(read.getPermutationMap().getNumDims(), 0, {getAffineConstantExpr(0, ctx)}, ctx);
  rewriter.setInsertionPoint(read);
  Value result = rewriter.create<arith::ConstantOp>(loc, type, rewriter.getZeroAttr(type));
  for (int64_t row = 0; row < type.getDimSize(0); ++row) {
    SmallVector<Value> indices(read.getIndices());
    indices[dim] = rewriter.create<arith::ConstantIndexOp>(loc, row);
    Value value = rewriter.create<vector::TransferReadOp>(loc, rowType, read.getSource(), indices,
                                                          AffineMapAttr::get(broadcast), read.getPadding(),
                                                          /*mask=*/Value(), rewriter.getBoolArrayAttr({true}));
    result = rewriter.create<vector::InsertOp>(loc, value, result, row);
  }
  rewriter.replaceOp(read, result);
}

/// The generic that replaces `generic` once its unit loops but the first (M) are dropped
/// (created where `generic` was), or null.
linalg::GenericOp dropUnitLoops(RewriterBase &rewriter, linalg::GenericOp generic) {
  // A one-row tile (decode) keeps its row dimension.
  linalg::ControlDropUnitDims control;
  control.rankReductionStrategy = linalg::ControlDropUnitDims::RankReductionStrategy::ExtractInsertSlice;
  control.controlFn = [](Operation *op) {
    SmallVector<unsigned> droppable;
    SmallVector<int64_t> ranges = cast<linalg::LinalgOp>(op).getStaticLoopRanges();
    for (unsigned loop = 1; loop < ranges.size(); ++loop)
      if (ranges[loop] == 1) droppable.push_back(loop);
    return droppable;
  };
  Operation *before = generic->getPrevNode(), *after = generic->getNextNode();
  Block *block = generic->getBlock();
  rewriter.setInsertionPoint(generic);
  if (failed(linalg::dropUnitDims(rewriter, generic, control))) return nullptr;
  linalg::GenericOp replacement;
  for (Operation *op = before ? before->getNextNode() : &block->front(); op && op != after; op = op->getNextNode())
    if (auto candidate = dyn_cast<linalg::GenericOp>(op)) replacement = candidate;
  return replacement;
}

/// Drops the unit loops of a tile, vectorizes it and reads each row's activation as a broadcast
/// value (see the op's description).
LogicalResult vectorizeFlattened(RewriterBase &rewriter, linalg::GenericOp tile) {
  linalg::GenericOp flat = dropUnitLoops(rewriter, tile);
  if (!flat) return failure();
  // The vector ops replace `flat` where it was, between its neighbours.
  Operation *before = flat->getPrevNode(), *after = flat->getNextNode();
  Block *block = flat->getBlock();
  if (failed(linalg::vectorize(rewriter, flat))) return failure();
  SmallVector<vector::TransferReadOp> columns;
  for (Operation *op = before ? before->getNextNode() : &block->front(); op && op != after; op = op->getNextNode())
    if (auto read = dyn_cast<vector::TransferReadOp>(op); read && isColumnBroadcastRead(read)) columns.push_back(read);
  for (vector::TransferReadOp read : columns) splitIntoRowBroadcasts(rewriter, read);
  return success();
}

/// For a tile of a block-quantized packed matmul (its input 0 a slice, through any chain of
/// unit-stride slices, of a `gpt.block_partials` generic), that slice taken directly of the
/// partial sums, just before the tile; null for other ops.
tensor::ExtractSliceOp partialsSliceOf(RewriterBase &rewriter, linalg::GenericOp tile) {
  if (!isPackedMatmul(tile)) return nullptr;
  SmallVector<tensor::ExtractSliceOp> chain;
  Value source = tile.getDpsInputs()[0];
  while (auto slice = source.getDefiningOp<tensor::ExtractSliceOp>()) {
    if (!slice.hasUnitStride() || slice.getSourceType().getRank() != slice.getType().getRank()) return nullptr;
    chain.push_back(slice);
    source = slice.getSource();
  }
  if (chain.empty() || !isBlockPartials(source.getDefiningOp())) return nullptr;
  // Offsets add up along the chain; the sizes are the innermost slice's.
  rewriter.setInsertionPoint(tile);
  Location loc = tile.getLoc();
  AffineExpr d0, d1;
  bindDims(rewriter.getContext(), d0, d1);
  SmallVector<OpFoldResult> offsets = chain.front().getMixedOffsets();
  for (tensor::ExtractSliceOp outer : ArrayRef(chain).drop_front())
    for (auto [offset, outerOffset] : llvm::zip(offsets, outer.getMixedOffsets()))
      offset = affine::makeComposedFoldedAffineApply(rewriter, loc, d0 + d1, {offset, outerOffset});
  SmallVector<OpFoldResult> strides(offsets.size(), rewriter.getIndexAttr(1));
  auto slice = rewriter.create<tensor::ExtractSliceOp>(loc, chain.front().getType(), source, offsets,
                                                       chain.front().getMixedSizes(), strides);
  rewriter.modifyOpInPlace(tile, [&] { tile.getDpsInputOperand(0)->set(slice); });
  return slice;
}

/// Unrolls `loop` (constant bounds) completely.
LogicalResult unrollFully(scf::ForOp loop) {
  std::optional<int64_t> lower = loop ? getConstantIntValue(loop.getLowerBound()) : std::nullopt;
  std::optional<int64_t> upper = loop ? getConstantIntValue(loop.getUpperBound()) : std::nullopt;
  std::optional<int64_t> step = loop ? getConstantIntValue(loop.getStep()) : std::nullopt;
  if (!lower || !upper || !step || *step <= 0 || *upper <= *lower) return failure();
  return loopUnrollByFactor(loop, static_cast<uint64_t>((*upper - *lower + *step - 1) / *step));
}

/// True for a tile of a packed matmul whose accumulation is not a plain add (a bf16 weight's
/// transformer.lane_dot_bf16): linalg's vectorizer only recognizes plain combiners of a
/// reduction, so such a tile is vectorized with its unit K loop dropped (all loops parallel).
bool accumulatesWithLaneDot(linalg::GenericOp tile) {
  if (!isPackedMatmul(tile)) return false;
  Operation *accumulation = tile.getBody()->getTerminator()->getOperand(0).getDefiningOp();
  return accumulation && !isa<arith::AddFOp, math::FmaOp>(accumulation);
}

/// Where `zeros` (the tensor.empty of a block's partial sums) is wholly written with one constant
/// value (the vectorized fill), replaces every unmasked read of that value (of the write, of
/// slices of it, or of a one-iteration loop's argument it starts) by the constant at the read's
/// shape, when the read is in bounds or pads with the same value, and erases the write once
/// unread. After the lane loop is unrolled the first lane's accumulator is such a read; left in
/// place, the write stayed too: bufferized into a stack buffer that each thread's outlined
/// function gets as a pointer, it cost 16 stores of zeros per block (a 4 x 32 tile) that LLVM
/// could not prove dead. The values computed are the same.
void forwardZeroFill(RewriterBase &rewriter, Value zeros) {
  for (Operation *user : llvm::make_early_inc_range(zeros.getUsers())) {
    auto write = dyn_cast<vector::TransferWriteOp>(user);
    auto tensorType = write ? dyn_cast<RankedTensorType>(write.getSource().getType()) : nullptr;
    if (!write || write.getMask() || !tensorType || write.getVectorType().getShape() != tensorType.getShape() ||
        !write.getPermutationMap().isIdentity() ||
        llvm::any_of(write.getIndices(), [](Value i) { return getConstantIntValue(i) != 0; }))
      continue;
    // The vectorized fill writes its scalar broadcast (a splat constant once canonicalized).
    Attribute fillValue;
    DenseElementsAttr splat;
    if (auto broadcast = write.getVector().getDefiningOp<vector::BroadcastOp>()) {
      if (auto scalar = broadcast.getSource().getDefiningOp<arith::ConstantOp>()) fillValue = scalar.getValue();
    } else if (matchPattern(write.getVector(), m_Constant(&splat)) && splat.isSplat()) {
      fillValue = splat.getSplatValue<Attribute>();
    }
    if (!fillValue) continue;
    // The reads of the zeros: direct or through slices (any slice of them is zeros), or, where
    // the unrolled lane loop is still a loop of one iteration (its canonicalization folds it
    // later), of the iteration argument they start.
    SmallVector<Value> zeroValues = {write.getResult()};
    while (!zeroValues.empty()) {
      Value zerosValue = zeroValues.pop_back_val();
      for (OpOperand &use : llvm::make_early_inc_range(zerosValue.getUses())) {
        Operation *owner = use.getOwner();
        if (auto slice = dyn_cast<tensor::ExtractSliceOp>(owner)) {
          zeroValues.push_back(slice.getResult());
        } else if (auto loop = dyn_cast<scf::ForOp>(owner)) {
          std::optional<int64_t> lower = getConstantIntValue(loop.getLowerBound());
          std::optional<int64_t> upper = getConstantIntValue(loop.getUpperBound());
          std::optional<int64_t> step = getConstantIntValue(loop.getStep());
          if (use.getOperandNumber() >= loop.getNumControlOperands() && lower && upper && step && *upper > *lower &&
              *upper - *lower <= *step)
            zeroValues.push_back(loop.getTiedLoopRegionIterArg(&use));
        } else if (auto read = dyn_cast<vector::TransferReadOp>(owner); read && !read.getMask()) {
          // Out of bounds it reads its padding: the same value, or not known to be.
          auto padding = read.getPadding().getDefiningOp<arith::ConstantOp>();
          if (read.hasOutOfBoundsDim() && (!padding || padding.getValue() != fillValue)) continue;
          rewriter.setInsertionPoint(read);
          rewriter.replaceOpWithNewOp<arith::ConstantOp>(read, DenseElementsAttr::get(read.getVectorType(), fillValue));
        }
      }
    }
    if (write->use_empty()) rewriter.eraseOp(write);
  }
}

/// Computes the partial sums `slice` reads right there, one K step at a time, vectorized: the
/// generic is fused at the slice, starting from zeros (the tensor.empty `zeros` they are
/// written into), its index-in-block loop is tiled by one, and that loop (`lanes`) is returned to
/// be unrolled once vectorized. Returns what failed, or an empty string.
std::string fusePartials(RewriterBase &rewriter, tensor::ExtractSliceOp slice, scf::ForOp &lanes, Value &zeros) {
  std::optional<scf::SCFFuseProducerOfSliceResult> partials = scf::tileAndFuseProducerOfSlice(rewriter, slice, {});
  if (!partials || partials->tiledOps.size() != 1) return "could not fuse the block partial sums";
  auto partialsTile = dyn_cast<linalg::GenericOp>(partials->tiledOps.front());
  if (!partialsTile) return "the fused partial sums are not a generic";
  // The tile starts from zeros of its own: a new fill of a new tensor, so that the untiled
  // partial sums and their fill, which the fused tile's init would otherwise be sliced from,
  // die (bufferized, they would be one buffer of M x N x K/32 floats).
  Location loc = partialsTile.getLoc();
  auto tileType = cast<RankedTensorType>(partialsTile.getDpsInits()[0].getType());
  rewriter.setInsertionPoint(partialsTile);
  Value empty = rewriter.create<tensor::EmptyOp>(loc, tileType.getShape(), tileType.getElementType());
  zeros = empty;
  Value zero = rewriter.create<arith::ConstantOp>(loc, rewriter.getZeroAttr(tileType.getElementType()));
  auto fill = rewriter.create<linalg::FillOp>(loc, zero, empty);
  rewriter.modifyOpInPlace(partialsTile, [&] { partialsTile.getDpsInitOperand(0)->set(fill.getResult(0)); });
  scf::SCFTilingOptions options;
  SmallVector<int64_t> step(partialsTile.getNumLoops(), 0);
  step.back() = 1;
  options.setTileSizes(getAsIndexOpFoldResult(rewriter.getContext(), step));
  rewriter.setInsertionPoint(partialsTile);
  FailureOr<scf::SCFTilingResult> tiled =
      scf::tileUsingSCF(rewriter, cast<TilingInterface>(partialsTile.getOperation()), options);
  if (failed(tiled) || tiled->tiledOps.size() != 1 || tiled->loops.size() != 1)
    return "could not tile the partial sums' index loop";
  lanes = dyn_cast<scf::ForOp>(tiled->loops.front().getOperation());
  rewriter.replaceOp(partialsTile, tiled->replacements);
  if (failed(linalg::vectorize(rewriter, fill))) return "could not vectorize the fill";
  if (failed(vectorizeFlattened(rewriter, cast<linalg::GenericOp>(tiled->tiledOps.front()))))
    return "could not vectorize the partial sums";
  return "";
}

} // namespace

DiagnosedSilenceableFailure VectorizeBlockMatmulOp::apply(transform::TransformRewriter &rewriter,
                                                          transform::TransformResults &results,
                                                          transform::TransformState &state) {
  SmallVector<Operation *> rest;
  for (Operation *target : state.getPayloadOps(getTarget())) {
    // Taken now: a rewrite that fails halfway may already have replaced (and freed) the target.
    const Location targetLoc = target->getLoc();
    auto tile = dyn_cast<linalg::GenericOp>(target);
    tensor::ExtractSliceOp slice = tile ? partialsSliceOf(rewriter, tile) : nullptr;
    if (!slice && tile && accumulatesWithLaneDot(tile)) {
      if (failed(vectorizeFlattened(rewriter, tile)))
        return payloadFailure(*this, targetLoc, "could not vectorize the lane dot products");
      continue;
    }
    if (!slice) {
      rest.push_back(target);
      continue;
    }
    scf::ForOp lanes;
    Value zeros;
    const bool wholeBlockSteps = blocksPerStep(slice.getSource().getDefiningOp()) > 1;
    std::string problem = fusePartials(rewriter, slice, lanes, zeros);
    if (problem.empty() && failed(vectorizeFlattened(rewriter, tile))) problem = "could not vectorize the scaled sum";
    // A block's 4 or 8 lane steps unrolled: decode streams the weights at the rate the core keeps
    // loads in flight, which the loop's own instructions would take slots from. (The JIT's LLVM
    // pipeline does not unroll.) A super-block's 8 sub-block steps stay a loop: each is a whole
    // block's dot products already, and unrolled, LLVM's scheduler hoisted 8 blocks' loads ahead
    // of their use and spilled.
    if (problem.empty() && !wholeBlockSteps && failed(unrollFully(lanes)))
      problem = "could not unroll the partial sums' lane loop";
    if (problem.empty()) forwardZeroFill(rewriter, zeros);
    if (!problem.empty()) return payloadFailure(*this, targetLoc, problem);
  }
  results.set(cast<OpResult>(getRest()), rest);
  return DiagnosedSilenceableFailure::success();
}

} // namespace gpt::codegen
