// Typed accessors of the `gpt.*` codegen attributes (see CodegenAttributes.h).
#include "cc/codegen/common/CodegenAttributes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace gpt::codegen {
using namespace mlir;

namespace {

std::optional<SmallVector<int64_t>> getI64Array(Operation *op, StringRef name) {
  auto array = op->getAttrOfType<ArrayAttr>(name);
  if (!array) return std::nullopt;
  SmallVector<int64_t> values;
  for (Attribute element : array) {
    auto integer = dyn_cast<IntegerAttr>(element);
    if (!integer) return std::nullopt;
    values.push_back(integer.getInt());
  }
  return values;
}

std::optional<int64_t> getI64(Operation *op, StringRef name) {
  if (auto integer = op->getAttrOfType<IntegerAttr>(name)) return integer.getInt();
  return std::nullopt;
}

void setI64Array(Operation *op, StringRef name, ArrayRef<int64_t> values) {
  op->setAttr(name, Builder(op->getContext()).getI64ArrayAttr(values));
}

void setI64(Operation *op, StringRef name, int64_t value) {
  op->setAttr(name, Builder(op->getContext()).getI64IntegerAttr(value));
}

void setInterchange(Operation *op, ArrayRef<int64_t> interchange) {
  if (interchange.empty())
    op->removeAttr(attr::kTileInterchange);
  else
    setI64Array(op, attr::kTileInterchange, interchange);
}

} // namespace

bool isCodegenAttribute(StringRef name) {
  return llvm::is_contained({attr::kPackedMatmul, attr::kRegisterTile, attr::kTileInterchange, attr::kParallelChunks,
                             attr::kRowReductionTile, attr::kEpilogueTile, attr::kEpilogueOperand,
                             attr::kEpilogueChunks, attr::kReductionStep, attr::kBlockPartials,
                             attr::kQuantizesActivations, attr::kAmxTile, attr::kAmxChunks},
                            name);
}

std::optional<TargetDescription> getTarget(Operation *op) {
  DictionaryAttr dictionary;
  for (Operation *at = op; at; at = at->getParentOp())
    if (auto found = at->getAttrOfType<DictionaryAttr>(attr::kTarget)) dictionary = found; // the outermost wins
  if (!dictionary) return std::nullopt;
  TargetDescription target;
  if (auto cpu = dictionary.getAs<StringAttr>("cpu")) target.cpu = cpu.str();
  if (auto triple = dictionary.getAs<StringAttr>("triple")) target.triple = triple.str();
  if (auto bits = dictionary.getAs<IntegerAttr>("vector_bits")) target.vectorBits = bits.getInt();
  if (auto count = dictionary.getAs<IntegerAttr>("vector_registers")) target.vectorRegisters = count.getInt();
  if (auto features = dictionary.getAs<ArrayAttr>("features"))
    for (Attribute feature : features)
      if (auto name = dyn_cast<StringAttr>(feature)) target.features.push_back(name.str());
  return target;
}

void setTarget(Operation *module, const TargetDescription &target) {
  Builder b(module->getContext());
  SmallVector<Attribute> features;
  for (const std::string &feature : target.features) features.push_back(b.getStringAttr(feature));
  module->setAttr(attr::kTarget, b.getDictionaryAttr({
                                     b.getNamedAttr("cpu", b.getStringAttr(target.cpu)),
                                     b.getNamedAttr("triple", b.getStringAttr(target.triple)),
                                     b.getNamedAttr("vector_bits", b.getI64IntegerAttr(target.vectorBits)),
                                     b.getNamedAttr("vector_registers", b.getI64IntegerAttr(target.vectorRegisters)),
                                     b.getNamedAttr("features", b.getArrayAttr(features)),
                                 }));
}

bool isPackedMatmul(Operation *op) { return op && op->hasAttr(attr::kPackedMatmul); }
void markPackedMatmul(Operation *op) { op->setAttr(attr::kPackedMatmul, UnitAttr::get(op->getContext())); }
bool isBlockPartials(Operation *op) { return op && op->hasAttr(attr::kBlockPartials); }
void markBlockPartials(Operation *op, int64_t blocksPerStep) {
  Builder b(op->getContext());
  op->setAttr(attr::kBlockPartials,
              blocksPerStep == 1 ? Attribute(b.getUnitAttr()) : b.getI64IntegerAttr(blocksPerStep));
}
int64_t blocksPerStep(Operation *partials) {
  auto count = partials->getAttrOfType<IntegerAttr>(attr::kBlockPartials);
  return count ? count.getInt() : 1;
}
bool quantizesActivations(Operation *op) { return op && op->hasAttr(attr::kQuantizesActivations); }
void markQuantizesActivations(Operation *op) {
  op->setAttr(attr::kQuantizesActivations, UnitAttr::get(op->getContext()));
}

std::optional<LoopTile> getLoopTile(Operation *op, StringRef name) {
  std::optional<SmallVector<int64_t>> sizes = getI64Array(op, name);
  if (!sizes) return std::nullopt;
  LoopTile tile{*sizes, {}};
  if (std::optional<SmallVector<int64_t>> interchange = getI64Array(op, attr::kTileInterchange))
    tile.interchange = *interchange;
  return tile;
}

void setRegisterTile(Operation *op, const LoopTile &tile) {
  setI64Array(op, attr::kRegisterTile, tile.sizes);
  setInterchange(op, tile.interchange);
}

std::optional<SmallVector<int64_t>> getParallelChunks(Operation *op) { return getI64Array(op, attr::kParallelChunks); }
void setParallelChunks(Operation *op, ArrayRef<int64_t> chunksPerLoop) {
  setI64Array(op, attr::kParallelChunks, chunksPerLoop);
}

std::optional<int64_t> getRowReductionTile(Operation *op) { return getI64(op, attr::kRowReductionTile); }
void setRowReductionTile(Operation *op, int64_t lanes) { setI64(op, attr::kRowReductionTile, lanes); }

std::optional<EpilogueFusion> getEpilogueFusion(Operation *op) {
  std::optional<LoopTile> tile = getLoopTile(op, attr::kEpilogueTile);
  std::optional<int64_t> operand = getI64(op, attr::kEpilogueOperand), chunks = getI64(op, attr::kEpilogueChunks);
  if (!tile || !operand || !chunks) return std::nullopt;
  return EpilogueFusion{*tile, *operand, *chunks};
}

void setEpilogueFusion(Operation *op, const EpilogueFusion &fusion) {
  setI64Array(op, attr::kEpilogueTile, fusion.tile.sizes);
  setInterchange(op, fusion.tile.interchange);
  setI64(op, attr::kEpilogueOperand, fusion.matmulOperand);
  setI64(op, attr::kEpilogueChunks, fusion.chunks);
}

void setReductionStep(Operation *op, ArrayRef<int64_t> sizes) { setI64Array(op, attr::kReductionStep, sizes); }

std::optional<AmxTile> getAmxTile(Operation *op) {
  std::optional<SmallVector<int64_t>> block = getI64Array(op, attr::kAmxTile);
  std::optional<int64_t> chunks = getI64(op, attr::kAmxChunks);
  if (!block || block->size() != 3 || !chunks) return std::nullopt;
  return AmxTile{(*block)[0], (*block)[1], (*block)[2], *chunks};
}

void setAmxTile(Operation *op, const AmxTile &tile) {
  setI64Array(op, attr::kAmxTile, {tile.rows, tile.columns, tile.kWords});
  setI64(op, attr::kAmxChunks, tile.chunks);
}

} // namespace gpt::codegen
