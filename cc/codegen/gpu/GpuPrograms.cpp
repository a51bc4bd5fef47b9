// Dispatch formation for the CUDA target (see GpuPrograms.h).
//
// A program is formed in two walks, as IREE forms dispatch regions around a root op: planFusion
// (GpuFusion.h) first decides which ops own a kernel and which are computed inside another's (a matmul's bias,
// GELU and residual; the two embeddings of an add), then ProgramFormation forms every op that is
// not fused, one function per op kind, chosen by a type switch.
#include "cc/codegen/gpu/GpuPrograms.h"

#include "cc/codegen/gpu/GpuFusion.h"
#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <numeric>
#include <optional>
#include <stdexcept>

namespace gpt::gpu {
namespace transformer = mlir::transformer;
namespace {

constexpr int64_t kAlignment = 256; ///< of every scratch and input region, in bytes
/// Attention over this many keys or more splits each row's keys over kAttentionWarps warps. A
/// warp walks its keys one by one, each a load's latency (about a microsecond with its shuffles),
/// and a decode step has one block per head: on an H200, GPT-2 small's step at 150 keys spent
/// 0.5 of its 0.9 ms in that walk with 4 warps. 16 warps (512 threads) keep the registers a
/// thread may use at 128.
constexpr int64_t kAttentionWarpsFrom = 64, kAttentionWarps = 16;

int64_t alignUp(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

int64_t product(const std::vector<int64_t> &shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

std::vector<int64_t> shapeOf(mlir::Value value) {
  std::optional<std::vector<int64_t>> shape = staticShape(value);
  if (!shape) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << value.getType();
    throw std::invalid_argument("the CUDA target needs static shapes, got a value of type " + text);
  }
  return *shape;
}

std::string opName(mlir::Operation *op) { return op->getName().getStringRef().str(); }

std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (int i = static_cast<int>(sizes.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * sizes[i + 1];
  return strides;
}

} // namespace

/// Where a value of the program lives: `offset` elements into `buffer`, strided; or a weight
/// argument not bound to a buffer yet (its layout depends on how it is used).
struct ArtifactBuilder::View {
  int64_t buffer = -1;
  int64_t offset = 0;
  int64_t elementBytes = 4;
  ElementType element = ElementType::F32;
  std::vector<int64_t> sizes, strides;
  const ParameterSpec *weight = nullptr;

  PointerArg pointer() const { return {buffer, offset * elementBytes}; }
  int64_t rank() const { return static_cast<int64_t>(sizes.size()); }
  /// (token stride, head stride) of a [T, H, d] (token-major) or [H, T, d] view.
  std::array<int64_t, 2> tokenAndHeadStrides(bool tokenMajor) const {
    return tokenMajor ? std::array<int64_t, 2>{strides[0], strides[1]} : std::array<int64_t, 2>{strides[1], strides[0]};
  }
};

/// Forms one program: binds the entry point's arguments to buffers, then forms its ops in order
/// into launches, each intermediate placed in the scratch buffer.
class ArtifactBuilder::ProgramFormation {
public:
  ProgramFormation(ArtifactBuilder &artifact, EntryPoint entry, int64_t tokens) : artifact(artifact) {
    spec.entry = entry == EntryPoint::Forward ? "forward" : "step";
    spec.tokens = tokens;
  }

  /// Binds the entry arguments (in entryArguments() order) and plans the fusions.
  void bindArguments(mlir::Block &body, const std::vector<EntryArgument> &arguments);
  /// Forms the ops of `block` in order.
  void formBlock(mlir::Block &block);
  /// The program, once its body is formed.
  ProgramSpec finish();

private:
  View argumentView(const EntryArgument &what, mlir::Value arg, unsigned position);
  View viewOf(mlir::Value value) const;
  View bound(mlir::Value value, bool matmulOperand);
  View allocate(mlir::Value value, const std::vector<int64_t> &sizes);
  void launch(const std::string &family, KernelSource source, std::vector<PointerArg> args);
  static void requireRowMajor(const View &view, const char *what);

  void formOp(mlir::Operation &op);
  void formCall(mlir::func::CallOp call);
  void formEmbedding(transformer::EmbeddingOp embedding);
  void formAdd(transformer::AddOp add);
  void formMatmul(transformer::MatmulOp matmul);
  void formLayerNorm(transformer::LayerNormOp norm);
  void formRmsNorm(transformer::RmsNormOp norm);
  void formSlice(transformer::SliceOp slice);
  void formSplitHeads(transformer::SplitHeadsOp split);
  void formMergeHeads(transformer::MergeHeadsOp merge);
  void formRope(transformer::RopeOp rotary);
  void formSwiglu(transformer::SwigluOp gated);
  void formCacheUpdate(transformer::CacheUpdateOp update);
  void formAttention(transformer::CausalAttentionOp attention);

  ArtifactBuilder &artifact;
  ProgramSpec spec;
  FusionPlan plan;
  llvm::DenseMap<mlir::Value, View> values;
  mlir::Value logits;
  int64_t scratchTop = 0;
};

ArtifactBuilder::ArtifactBuilder(const GPTConfig &config, ElementType weights, int64_t cacheLength, int64_t maxTokens)
    : config(config), weightElement(weights), cacheLength(cacheLength), maxTokens(maxTokens),
      parameters(parameterSpecs(config, gpuWeightStorage())) {
  auto add = [&](BufferSpec spec) {
    buffers_.push_back(std::move(spec));
    return static_cast<int64_t>(buffers_.size()) - 1;
  };
  int64_t inputBytes = 0;
  for (const EntryInput &slot : kEntryInputs) {
    inputOffsets[slot.name] = inputBytes;
    inputBytes += alignUp(slot.perToken ? 8 * maxTokens : 8);
  }
  inputBuffer = add({"inputs", "input", inputBytes, "", {}, ""});
  scratchBuffer = add({"scratch", "scratch", 0, "", {}, ""});
  logitsBuffer =
      add({"logits", "output", 4 * maxTokens * config.paddedVocabSize(gpuWeightStorage().tiles), "", {}, ""});
  int64_t cacheBytes = 4 * config.kvHeads() * cacheLength * config.headSize();
  for (int64_t layer = 0; layer < config.nLayer; ++layer) {
    std::string prefix = "cache." + std::to_string(layer);
    int64_t key = add({prefix + ".key", "cache", cacheBytes, "", {}, ""});
    int64_t value = add({prefix + ".value", "cache", cacheBytes, "", {}, ""});
    cacheBuffers_.push_back({key, value});
  }
}

int64_t ArtifactBuilder::weightBuffer(const ParameterSpec &spec, bool matmulOperand) {
  const ParameterSpec *stored = &spec;
  if (spec.derived()) {
    // The LM head's [D, V'] operand is the token embedding [V, D] read by rows, i.e. already
    // stored [N, K]: bind the source itself.
    if (!matmulOperand || spec.layout != WeightLayout::TransposedPadded)
      throw std::invalid_argument("the CUDA target cannot lower a use of the derived weight " + spec.name);
    auto source = std::find_if(parameters.begin(), parameters.end(),
                               [&](const ParameterSpec &p) { return p.name == spec.source; });
    if (source == parameters.end()) throw std::invalid_argument("no parameter " + spec.source);
    stored = &*source;
  }
  bool transposed = matmulOperand && !spec.derived();
  std::string layout = transposed ? "transposed" : "as_given";
  auto existing = weightBuffers.find(stored->name);
  if (existing != weightBuffers.end()) {
    if (buffers_[existing->second].layout != layout)
      throw std::invalid_argument("the weight " + stored->name + " is read both as a matmul operand and as a table");
    return existing->second;
  }
  bool lowPrecision = weightElement == ElementType::BF16 && matrixNames.count(stored->name) > 0;
  std::vector<int64_t> shape = stored->shape;
  if (transposed) std::swap(shape[0], shape[1]);
  BufferSpec buffer{stored->name, "weight", product(shape) * (lowPrecision ? 2 : 4), lowPrecision ? "bf16" : "f32",
                    shape,        layout};
  buffers_.push_back(buffer);
  int64_t index = static_cast<int64_t>(buffers_.size()) - 1;
  weightBuffers[stored->name] = index;
  return index;
}

std::string ArtifactBuilder::kernelName(const std::string &family, const KernelSource &source) {
  auto found = kernelNames.find(source.text);
  if (found != kernelNames.end()) return found->second;
  std::string name = family + "_" + std::to_string(familyCounts[family]++);
  kernelNames[source.text] = name;
  std::string text = source.text;
  for (size_t at = text.find("@KERNEL"); at != std::string::npos; at = text.find("@KERNEL", at + name.size()))
    text.replace(at, 7, "@" + name);
  kernelTexts_.push_back(text);
  return name;
}

void ArtifactBuilder::addProgram(mlir::func::FuncOp function, EntryPoint entry, int64_t tokens) {
  mlir::Block &body = function.getBody().front();
  std::vector<EntryArgument> arguments = entryArguments(entry, config, static_cast<int64_t>(parameters.size()));
  if (arguments.size() != body.getNumArguments() + 1)
    throw std::invalid_argument("the entry point has " + std::to_string(body.getNumArguments()) +
                                " arguments, its calling convention " + std::to_string(arguments.size() - 1));
  ProgramFormation program(*this, entry, tokens);
  program.bindArguments(body, arguments);
  program.formBlock(body);
  programs_.push_back(program.finish());
}

void ArtifactBuilder::ProgramFormation::bindArguments(mlir::Block &body, const std::vector<EntryArgument> &arguments) {
  // The weights matmuls read (directly, or through a derived parameter) are stored in the
  // artifact's low-precision type; tables that share their storage are read in it too. Weights
  // reach the layers' matmuls through calls: the walk follows each call's operands into its callee.
  EntrySlots<mlir::Value> slots;
  slots.bind(arguments, body.getArguments());
  WeightValues entryWeights;
  for (auto [index, weight] : llvm::enumerate(slots.weights)) entryWeights[weight] = &artifact.parameters[index];
  planFusion(body, entryWeights, plan, artifact.matrixNames);

  for (unsigned i = 0; i < body.getNumArguments(); ++i)
    values[body.getArgument(i)] = argumentView(arguments[i], body.getArgument(i), i);
  logits = body.getTerminator()->getOperand(0);
}

ArtifactBuilder::View ArtifactBuilder::ProgramFormation::argumentView(const EntryArgument &what, mlir::Value arg,
                                                                      unsigned position) {
  View view;
  if (const EntryInput *slot = entryInput(what.kind)) {
    int64_t offset = artifact.inputOffsets.at(slot->name);
    spec.inputs[slot->name] = PointerArg{artifact.inputBuffer, offset};
    view.buffer = artifact.inputBuffer;
    view.elementBytes = 8;
    view.offset = offset / 8;
    // The cache offset is an index passed by value: one i64 in the input buffer.
    view.sizes = what.kind == ArgumentKind::CacheOffset ? std::vector<int64_t>{1} : shapeOf(arg);
    view.strides = {1};
    return view;
  }
  switch (what.kind) {
  case ArgumentKind::KeyCache:
  case ArgumentKind::ValueCache:
    view.buffer = artifact.cacheBuffers_.at(what.index)[what.kind == ArgumentKind::KeyCache ? 0 : 1];
    view.sizes = shapeOf(arg);
    view.strides = contiguousStrides(view.sizes);
    return view;
  case ArgumentKind::Weight:
    view.weight = &artifact.parameters.at(what.index);
    view.sizes = shapeOf(arg);
    view.strides = contiguousStrides(view.sizes);
    return view;
  default:
    throw std::invalid_argument("the CUDA target cannot take the entry point's argument " + std::to_string(position));
  }
}

ProgramSpec ArtifactBuilder::ProgramFormation::finish() {
  View result = viewOf(logits);
  if (result.buffer != artifact.logitsBuffer)
    throw std::invalid_argument("the CUDA target expects the LM head to write the logits");
  spec.logits = result.pointer();
  spec.logitsRows = result.sizes[0];
  spec.logitsRowStride = result.strides[0];
  return std::move(spec);
}

// By value: inserting into `values` may move its entries.
ArtifactBuilder::View ArtifactBuilder::ProgramFormation::viewOf(mlir::Value value) const {
  auto found = values.find(value);
  if (found == values.end()) throw std::invalid_argument("the CUDA target met a value it did not form");
  return found->second;
}

/// A table or vector weight bound as stored; activations pass through.
ArtifactBuilder::View ArtifactBuilder::ProgramFormation::bound(mlir::Value value, bool matmulOperand) {
  View view = viewOf(value);
  if (view.weight) {
    view.buffer = artifact.weightBuffer(*view.weight, matmulOperand);
    const BufferSpec &buffer = artifact.buffers_[view.buffer];
    view.element = buffer.dtype == "bf16" ? ElementType::BF16 : ElementType::F32;
    view.elementBytes = buffer.dtype == "bf16" ? 2 : 4;
    view.sizes = buffer.shape;
    view.strides = contiguousStrides(view.sizes);
    view.weight = nullptr;
  }
  return view;
}

/// A contiguous place for `value`: the logits buffer for the program's result, else the next
/// free region of the scratch buffer.
ArtifactBuilder::View ArtifactBuilder::ProgramFormation::allocate(mlir::Value value,
                                                                  const std::vector<int64_t> &sizes) {
  View view;
  view.sizes = sizes;
  view.strides = contiguousStrides(sizes);
  if (value == logits) {
    view.buffer = artifact.logitsBuffer;
  } else {
    BufferSpec &scratch = artifact.buffers_[artifact.scratchBuffer];
    view.buffer = artifact.scratchBuffer;
    view.offset = scratchTop / 4;
    scratchTop += alignUp(4 * product(sizes));
    scratch.bytes = std::max(scratch.bytes, scratchTop);
  }
  values[value] = view;
  return view;
}

void ArtifactBuilder::ProgramFormation::launch(const std::string &family, KernelSource source,
                                               std::vector<PointerArg> args) {
  std::string name = artifact.kernelName(family, source);
  spec.launches.push_back({name, source.grid, source.block, std::move(args), std::move(source.op)});
}

void ArtifactBuilder::ProgramFormation::requireRowMajor(const View &view, const char *what) {
  if (view.rank() != 2 || view.strides[1] != 1)
    throw std::invalid_argument(std::string("the CUDA target needs ") + what + " as rows with unit stride");
}

void ArtifactBuilder::ProgramFormation::formBlock(mlir::Block &block) {
  for (mlir::Operation &op : block)
    if (!plan.fused.contains(&op)) formOp(op);
}

void ArtifactBuilder::ProgramFormation::formOp(mlir::Operation &op) {
  llvm::TypeSwitch<mlir::Operation *>(&op)
      .Case([](mlir::func::ReturnOp) {})
      .Case([&](mlir::func::CallOp call) { formCall(call); })
      .Case([&](transformer::EmbeddingOp embedding) { formEmbedding(embedding); })
      .Case([&](transformer::AddOp add) { formAdd(add); })
      .Case([&](transformer::MatmulOp matmul) { formMatmul(matmul); })
      .Case([&](transformer::LayerNormOp norm) { formLayerNorm(norm); })
      .Case([&](transformer::RmsNormOp norm) { formRmsNorm(norm); })
      .Case([&](transformer::SliceOp slice) { formSlice(slice); })
      .Case([&](transformer::SplitHeadsOp split) { formSplitHeads(split); })
      .Case([&](transformer::MergeHeadsOp merge) { formMergeHeads(merge); })
      .Case([&](transformer::RopeOp rotary) { formRope(rotary); })
      .Case([&](transformer::SwigluOp gated) { formSwiglu(gated); })
      .Case([&](transformer::CacheUpdateOp update) { formCacheUpdate(update); })
      .Case([&](transformer::CausalAttentionOp attention) { formAttention(attention); })
      .Default([](mlir::Operation *other) {
        throw std::invalid_argument("the CUDA target cannot lower " + opName(other) + " yet");
      });
}

/// A call forms its callee's body with the callee's arguments bound to the call's operands (each
/// layer's block, once per layer).
void ArtifactBuilder::ProgramFormation::formCall(mlir::func::CallOp call) {
  mlir::func::FuncOp callee = calleeOf(call);
  if (!callee || callee.getBody().getBlocks().size() != 1)
    throw std::invalid_argument("the CUDA target cannot form the call to " + call.getCallee().str());
  mlir::Block &calleeBody = callee.getBody().front();
  for (auto [arg, operand] : llvm::zip(calleeBody.getArguments(), call.getOperands())) values[arg] = viewOf(operand);
  formBlock(calleeBody);
  for (auto [result, returned] : llvm::zip(call.getResults(), calleeBody.getTerminator()->getOperands()))
    values[result] = viewOf(returned);
}

void ArtifactBuilder::ProgramFormation::formEmbedding(transformer::EmbeddingOp embedding) {
  View table = bound(embedding.getTable(), false);
  requireRowMajor(table, "an embedding table");
  View ids = viewOf(embedding.getIds());
  std::vector<int64_t> shape = shapeOf(embedding.getResult());
  View out = allocate(embedding.getResult(), shape);
  GatherRows g{shape[0], shape[1], table.sizes[0], table.strides[0], table.element};
  launch("gather", gatherRows(g), {table.pointer(), ids.pointer(), out.pointer()});
}

/// An add that no matmul took into its epilogue: GPT-2's token + position embeddings, gathered
/// together.
void ArtifactBuilder::ProgramFormation::formAdd(transformer::AddOp add) {
  if (!plan.embeddingPairs.contains(add))
    throw std::invalid_argument("the CUDA target cannot lower a transformer.add that follows no matmul yet");
  auto lhs = add.getLhs().getDefiningOp<transformer::EmbeddingOp>();
  auto rhs = add.getRhs().getDefiningOp<transformer::EmbeddingOp>();
  View first = bound(lhs.getTable(), false), second = bound(rhs.getTable(), false);
  // The kernel's first table may be low precision, its second is f32.
  if (second.element != ElementType::F32) {
    std::swap(first, second);
    std::swap(lhs, rhs);
  }
  if (second.element != ElementType::F32)
    throw std::invalid_argument("the CUDA target gathers one low-precision table at a time");
  requireRowMajor(first, "an embedding table");
  requireRowMajor(second, "an embedding table");
  std::vector<int64_t> shape = shapeOf(add.getResult());
  View out = allocate(add.getResult(), shape);
  GatherRows g{shape[0],        shape[1],        first.sizes[0],   first.strides[0], first.element,
               /*second=*/true, second.sizes[0], second.strides[0]};
  launch("gather", gatherRows(g),
         {first.pointer(), viewOf(lhs.getIds()).pointer(), second.pointer(), viewOf(rhs.getIds()).pointer(),
          out.pointer()});
}

void ArtifactBuilder::ProgramFormation::formMatmul(transformer::MatmulOp matmul) {
  View a = bound(matmul.getLhs(), false);
  requireRowMajor(a, "a matmul's left operand");
  View rhs = viewOf(matmul.getRhs());
  if (!rhs.weight) throw std::invalid_argument("the CUDA target multiplies activations by weights only");
  const ParameterSpec weight = *rhs.weight;
  View b = bound(matmul.getRhs(), true); // [N or V, K]
  std::vector<int64_t> shape = shapeOf(matmul.getResult());
  int64_t rows = shape[0], columns = shape[1], depth = a.sizes[1];
  Matmul m{rows, columns, weight.derived() ? b.sizes[0] : columns, depth, a.strides[0], b.element, {}};
  if (a.pointer().offset % 16 || a.strides[0] % 4)
    throw std::invalid_argument("the CUDA target needs a matmul's rows 16-byte aligned");
  const MatmulEpilogueOps &epilogue = plan.epilogues.at(matmul);
  m.epilogue.bias = static_cast<bool>(epilogue.bias);
  m.epilogue.gelu = epilogue.gelu;
  m.epilogue.residual = static_cast<bool>(epilogue.residual);
  std::vector<PointerArg> args{a.pointer(), b.pointer()};
  if (epilogue.bias) args.push_back(bound(epilogue.bias, false).pointer());
  if (epilogue.residual) {
    View residual = viewOf(epilogue.residual);
    if (residual.strides[1] != 1)
      throw std::invalid_argument("the CUDA target fuses a residual with unit column stride only");
    m.epilogue.residualStride = residual.strides[0];
    args.push_back(residual.pointer());
  }
  if (m.validColumns != m.columns && (m.epilogue.bias || m.epilogue.gelu || m.epilogue.residual))
    throw std::invalid_argument("the CUDA target fuses no epilogue into a padded matmul");
  View out = allocate(epilogue.result, shape);
  args.push_back(out.pointer());
  if (rows <= kMatvecMaxRows)
    launch("matvec", matvec(m), args);
  else
    launch("matmul", tiledMatmul(m), args);
}

void ArtifactBuilder::ProgramFormation::formLayerNorm(transformer::LayerNormOp norm) {
  View in = bound(norm.getInput(), false);
  requireRowMajor(in, "a normalized input");
  View weight = bound(norm.getWeight(), false), bias = bound(norm.getBias(), false);
  View out = allocate(norm.getResult(), in.sizes);
  NormRows n{in.sizes[0], in.sizes[1], in.strides[0], static_cast<float>(norm.getEpsilonAttr().getValueAsDouble()),
             /*rms=*/false};
  launch("layer_norm", normRows(n), {in.pointer(), weight.pointer(), bias.pointer(), out.pointer()});
}

void ArtifactBuilder::ProgramFormation::formRmsNorm(transformer::RmsNormOp norm) {
  View in = bound(norm.getInput(), false);
  requireRowMajor(in, "a normalized input");
  View weight = bound(norm.getWeight(), false);
  View out = allocate(norm.getResult(), in.sizes);
  NormRows n{in.sizes[0], in.sizes[1], in.strides[0], static_cast<float>(norm.getEpsilonAttr().getValueAsDouble()),
             /*rms=*/true};
  launch("rms_norm", normRows(n), {in.pointer(), weight.pointer(), out.pointer()});
}

// Slices and head splits and merges launch nothing: their result is a strided view of their input.

void ArtifactBuilder::ProgramFormation::formSlice(transformer::SliceOp slice) {
  View view = bound(slice.getInput(), false);
  view.offset += static_cast<int64_t>(slice.getOffset()) * view.strides.back();
  view.sizes.back() = static_cast<int64_t>(slice.getSize());
  values[slice.getResult()] = view;
}

void ArtifactBuilder::ProgramFormation::formSplitHeads(transformer::SplitHeadsOp split) {
  View in = bound(split.getInput(), false);
  requireRowMajor(in, "split_heads' input");
  int64_t heads = static_cast<int64_t>(split.getNumHeads()), size = in.sizes[1] / heads;
  View view = in;
  if (split.getTokenMajor()) {
    view.sizes = {in.sizes[0], heads, size};
    view.strides = {in.strides[0], size, 1};
  } else {
    view.sizes = {heads, in.sizes[0], size};
    view.strides = {size, in.strides[0], 1};
  }
  values[split.getResult()] = view;
}

void ArtifactBuilder::ProgramFormation::formMergeHeads(transformer::MergeHeadsOp merge) {
  View in = viewOf(merge.getInput());
  std::array<int64_t, 2> strides = in.tokenAndHeadStrides(merge.getTokenMajor());
  int64_t tokens = merge.getTokenMajor() ? in.sizes[0] : in.sizes[1];
  int64_t heads = merge.getTokenMajor() ? in.sizes[1] : in.sizes[0];
  if (strides[1] != in.sizes[2] || in.strides[2] != 1)
    throw std::invalid_argument("the CUDA target merges heads that lie side by side only");
  View view = in;
  view.sizes = {tokens, heads * in.sizes[2]};
  view.strides = {strides[0], 1};
  values[merge.getResult()] = view;
}

void ArtifactBuilder::ProgramFormation::formRope(transformer::RopeOp rotary) {
  View in = viewOf(rotary.getInput()); // [H, T, d]
  View positions = viewOf(rotary.getPositions());
  std::vector<int64_t> shape = shapeOf(rotary.getResult());
  View out = allocate(rotary.getResult(), shape);
  std::vector<double> theta;
  for (double t : rotary.getFrequencies(shape[2])) theta.push_back(t);
  Rope r{shape[0], shape[1], shape[2], rotary.getInterleaved(), in.tokenAndHeadStrides(false), theta};
  launch("rope", rope(r), {in.pointer(), positions.pointer(), out.pointer()});
}

void ArtifactBuilder::ProgramFormation::formSwiglu(transformer::SwigluOp gated) {
  View gate = viewOf(gated.getGate()), up = viewOf(gated.getUp());
  requireRowMajor(gate, "swiglu's gate");
  requireRowMajor(up, "swiglu's up");
  std::vector<int64_t> shape = shapeOf(gated.getResult());
  View out = allocate(gated.getResult(), shape);
  Swiglu g{shape[0], shape[1], gate.strides[0], up.strides[0]};
  launch("swiglu", swiglu(g), {gate.pointer(), up.pointer(), out.pointer()});
}

void ArtifactBuilder::ProgramFormation::formCacheUpdate(transformer::CacheUpdateOp update) {
  View source = viewOf(update.getUpdate()); // [H, T, d]
  View cache = viewOf(update.getCache());
  if (cache.buffer < 0 || artifact.buffers_[cache.buffer].role != "cache")
    throw std::invalid_argument("the CUDA target updates the entry point's caches only");
  CacheWrite c{source.sizes[1], source.sizes[0], source.sizes[2], artifact.cacheLength,
               source.tokenAndHeadStrides(false)};
  launch("cache_write", cacheWrite(c), {source.pointer(), viewOf(update.getOffset()).pointer(), cache.pointer()});
  values[update.getResult()] = cache;
}

void ArtifactBuilder::ProgramFormation::formAttention(transformer::CausalAttentionOp attention) {
  if (attention.getMask() || attention.getWindow() || !attention.getMaskExpression().empty())
    throw std::invalid_argument("the CUDA target lowers plain causal attention only (no mask or window yet)");
  View q = viewOf(attention.getQuery()), k = viewOf(attention.getKey()), v = viewOf(attention.getValue());
  bool qt = attention.getQueryTokenMajor(), kt = attention.getKeyTokenMajor(), vt = attention.getValueTokenMajor();
  int64_t tokens = qt ? q.sizes[0] : q.sizes[1], heads = qt ? q.sizes[1] : q.sizes[0];
  int64_t keys = kt ? k.sizes[0] : k.sizes[1], kvHeads = kt ? k.sizes[1] : k.sizes[0];
  int64_t headSize = q.sizes[2];
  bool resultTokenMajor = attention.getResultTokenMajor();
  View out = allocate(attention.getResult(), shapeOf(attention.getResult()));
  Attention a{tokens,
              heads,
              kvHeads,
              headSize,
              keys,
              static_cast<float>(attention.getScaleAttr().getValueAsDouble()),
              /*offsetFromMemory=*/static_cast<bool>(attention.getQueryOffset()),
              q.tokenAndHeadStrides(qt),
              k.tokenAndHeadStrides(kt),
              v.tokenAndHeadStrides(vt),
              out.tokenAndHeadStrides(resultTokenMajor),
              /*warps=*/keys >= kAttentionWarpsFrom ? kAttentionWarps : 1};
  std::vector<PointerArg> args{q.pointer(), k.pointer(), v.pointer()};
  if (attention.getQueryOffset()) args.push_back(viewOf(attention.getQueryOffset()).pointer());
  args.push_back(out.pointer());
  launch("attention", gpu::attention(a), args);
}

} // namespace gpt::gpu
