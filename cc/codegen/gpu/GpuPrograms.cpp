// Dispatch formation for the CUDA target (see GpuPrograms.h).
#include "cc/codegen/gpu/GpuPrograms.h"

#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <numeric>
#include <stdexcept>

namespace gpt::gpu {
namespace transformer = mlir::transformer;
namespace {

constexpr int64_t kAlignment = 256; ///< of every scratch and input region, in bytes
/// Attention over this many keys or more splits each row's keys over 4 warps: one warp walks
/// them one by one, which bounds a long-context decode step by the walk, not by bandwidth.
constexpr int64_t kAttentionWarpsFrom = 64;

int64_t alignUp(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

int64_t product(const std::vector<int64_t> &shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

std::vector<int64_t> shapeOf(mlir::Value value) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(value.getType());
  if (!type || !type.hasStaticShape()) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << value.getType();
    throw std::invalid_argument("the CUDA target needs static shapes, got a value of type " + text);
  }
  return std::vector<int64_t>(type.getShape().begin(), type.getShape().end());
}

std::string opName(mlir::Operation *op) { return op->getName().getStringRef().str(); }

mlir::Operation *soleUser(mlir::Value value) { return value.hasOneUse() ? *value.getUsers().begin() : nullptr; }

mlir::Value otherOperand(mlir::Operation *binary, mlir::Value value) {
  return binary->getOperand(0) == value ? binary->getOperand(1) : binary->getOperand(0);
}

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

/// The state of one program while its ops are formed into launches.
struct ArtifactBuilder::ProgramState {
  ProgramSpec spec;
  llvm::DenseMap<mlir::Value, View> values;
  llvm::DenseSet<mlir::Operation *> fused;    ///< ops computed inside another op's kernel
  llvm::DenseSet<mlir::Operation *> deferred; ///< embeddings gathered together at their add
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
  for (const char *name : {"token_ids", "positions", "last_row", "cache_offset"}) {
    inputOffsets[name] = inputBytes;
    inputBytes += alignUp(std::string(name) == "token_ids" || std::string(name) == "positions" ? 8 * maxTokens : 8);
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
  ProgramState state;
  state.spec.entry = entry == EntryPoint::Forward ? "forward" : "step";
  state.spec.tokens = tokens;
  auto input = [&](const char *name) { return PointerArg{inputBuffer, inputOffsets.at(name)}; };
  state.spec.inputs["token_ids"] = input("token_ids");
  state.spec.inputs["positions"] = input("positions");
  if (entry == EntryPoint::Step) {
    state.spec.inputs["last_row"] = input("last_row");
    state.spec.inputs["cache_offset"] = input("cache_offset");
  }

  // The weights matmuls read (directly, or through a derived parameter) are stored in the
  // artifact's low-precision type; tables that share their storage are read in it too.
  mlir::Block &body = function.getBody().front();
  std::vector<EntryArgument> arguments = entryArguments(entry, config, static_cast<int64_t>(parameters.size()));
  if (arguments.size() != body.getNumArguments() + 1)
    throw std::invalid_argument("the entry point has " + std::to_string(body.getNumArguments()) +
                                " arguments, its calling convention " + std::to_string(arguments.size() - 1));
  // Weights reach the layers' matmuls through calls: follow each call's operands into its callee.
  std::function<void(mlir::Block &, const llvm::DenseMap<mlir::Value, const ParameterSpec *> &)> findMatrices =
      [&](mlir::Block &block, const llvm::DenseMap<mlir::Value, const ParameterSpec *> &weights) {
        for (mlir::Operation &op : block) {
          if (auto matmul = mlir::dyn_cast<transformer::MatmulOp>(op)) {
            if (const ParameterSpec *spec = weights.lookup(matmul.getRhs()))
              matrixNames.insert(spec->derived() ? spec->source : spec->name);
          } else if (auto call = mlir::dyn_cast<mlir::func::CallOp>(op)) {
            auto callee = mlir::SymbolTable::lookupNearestSymbolFrom<mlir::func::FuncOp>(call, call.getCalleeAttr());
            if (!callee || callee.getBody().empty()) continue;
            llvm::DenseMap<mlir::Value, const ParameterSpec *> inner;
            for (auto [arg, operand] : llvm::zip(callee.getArguments(), call.getOperands()))
              if (const ParameterSpec *spec = weights.lookup(operand)) inner[arg] = spec;
            findMatrices(callee.getBody().front(), inner);
          }
        }
      };
  llvm::DenseMap<mlir::Value, const ParameterSpec *> entryWeights;
  for (unsigned i = 0; i < body.getNumArguments(); ++i)
    if (arguments[i].kind == ArgumentKind::Weight) entryWeights[body.getArgument(i)] = &parameters[arguments[i].index];
  findMatrices(body, entryWeights);

  for (unsigned i = 0; i < body.getNumArguments(); ++i) {
    mlir::Value arg = body.getArgument(i);
    const EntryArgument &what = arguments[i];
    View view;
    switch (what.kind) {
    case ArgumentKind::TokenIds:
    case ArgumentKind::Positions:
    case ArgumentKind::LastRow:
    case ArgumentKind::CacheOffset: {
      const char *name = what.kind == ArgumentKind::TokenIds    ? "token_ids"
                         : what.kind == ArgumentKind::Positions ? "positions"
                         : what.kind == ArgumentKind::LastRow   ? "last_row"
                                                                : "cache_offset";
      view.buffer = inputBuffer;
      view.elementBytes = 8;
      view.offset = inputOffsets.at(name) / 8;
      view.sizes = what.kind == ArgumentKind::CacheOffset ? std::vector<int64_t>{1} : shapeOf(arg);
      view.strides = {1};
      break;
    }
    case ArgumentKind::KeyCache:
    case ArgumentKind::ValueCache:
      view.buffer = cacheBuffers_.at(what.index)[what.kind == ArgumentKind::KeyCache ? 0 : 1];
      view.sizes = shapeOf(arg);
      view.strides = contiguousStrides(view.sizes);
      break;
    case ArgumentKind::Weight:
      view.weight = &parameters.at(what.index);
      view.sizes = shapeOf(arg);
      view.strides = contiguousStrides(view.sizes);
      break;
    default:
      throw std::invalid_argument("the CUDA target cannot take the entry point's argument " + std::to_string(i));
    }
    state.values[arg] = view;
  }
  mlir::Operation *terminator = body.getTerminator();
  state.logits = terminator->getOperand(0);

  // By value: inserting into `values` may move its entries.
  auto viewOf = [&](mlir::Value value) -> View {
    auto found = state.values.find(value);
    if (found == state.values.end()) throw std::invalid_argument("the CUDA target met a value it did not form");
    return found->second;
  };
  // A table or vector weight bound as stored; activations pass through.
  auto bound = [&](mlir::Value value, bool matmulOperand) -> View {
    View view = viewOf(value);
    if (view.weight) {
      view.buffer = weightBuffer(*view.weight, matmulOperand);
      const BufferSpec &buffer = buffers_[view.buffer];
      view.element = buffer.dtype == "bf16" ? ElementType::BF16 : ElementType::F32;
      view.elementBytes = buffer.dtype == "bf16" ? 2 : 4;
      view.sizes = buffer.shape;
      view.strides = contiguousStrides(view.sizes);
      view.weight = nullptr;
    }
    return view;
  };
  auto allocate = [&](mlir::Value value, std::vector<int64_t> sizes) -> View {
    View view;
    view.sizes = sizes;
    view.strides = contiguousStrides(sizes);
    if (value == state.logits) {
      view.buffer = logitsBuffer;
    } else {
      view.buffer = scratchBuffer;
      view.offset = state.scratchTop / 4;
      state.scratchTop += alignUp(4 * product(sizes));
      buffers_[scratchBuffer].bytes = std::max(buffers_[scratchBuffer].bytes, state.scratchTop);
    }
    state.values[value] = view;
    return view;
  };
  auto launch = [&](const std::string &family, KernelSource source, std::vector<PointerArg> args) {
    std::string name = kernelName(family, source);
    state.spec.launches.push_back({name, source.grid, source.block, std::move(args), std::move(source.op)});
  };
  auto requireRowMajor = [&](const View &view, const char *what) {
    if (view.rank() != 2 || view.strides[1] != 1)
      throw std::invalid_argument(std::string("the CUDA target needs ") + what + " as rows with unit stride");
  };

  // Forms the ops of `block` in order; a call forms its callee's body with the callee's
  // arguments bound to the call's operands (each layer's block, once per layer).
  std::function<void(mlir::Block &)> formBlock = [&](mlir::Block &block) {
    for (mlir::Operation &op : block) {
      if (state.fused.contains(&op) || mlir::isa<mlir::func::ReturnOp>(op)) continue;

      if (auto call = mlir::dyn_cast<mlir::func::CallOp>(op)) {
        auto callee = mlir::SymbolTable::lookupNearestSymbolFrom<mlir::func::FuncOp>(call, call.getCalleeAttr());
        if (!callee || callee.getBody().getBlocks().size() != 1)
          throw std::invalid_argument("the CUDA target cannot form the call to " + call.getCallee().str());
        mlir::Block &calleeBody = callee.getBody().front();
        for (auto [arg, operand] : llvm::zip(calleeBody.getArguments(), call.getOperands()))
          state.values[arg] = viewOf(operand);
        formBlock(calleeBody);
        for (auto [result, returned] : llvm::zip(call.getResults(), calleeBody.getTerminator()->getOperands()))
          state.values[result] = viewOf(returned);
        continue;
      }

      if (auto embedding = mlir::dyn_cast<transformer::EmbeddingOp>(op)) {
        // GPT-2's token + position embeddings: one gather of both rows at their add.
        if (mlir::Operation *user = soleUser(embedding.getResult()); user && mlir::isa<transformer::AddOp>(user)) {
          auto other = otherOperand(user, embedding.getResult()).getDefiningOp<transformer::EmbeddingOp>();
          if (other && other->hasOneUse() && other != embedding) {
            state.deferred.insert(&op);
            continue;
          }
        }
        View table = bound(embedding.getTable(), false);
        requireRowMajor(table, "an embedding table");
        View ids = viewOf(embedding.getIds());
        std::vector<int64_t> shape = shapeOf(embedding.getResult());
        View out = allocate(embedding.getResult(), shape);
        GatherRows g{shape[0], shape[1], table.sizes[0], table.strides[0], table.element};
        launch("gather", gatherRows(g), {table.pointer(), ids.pointer(), out.pointer()});
        continue;
      }

      if (auto add = mlir::dyn_cast<transformer::AddOp>(op)) {
        auto lhs = add.getLhs().getDefiningOp<transformer::EmbeddingOp>();
        auto rhs = add.getRhs().getDefiningOp<transformer::EmbeddingOp>();
        if (lhs && rhs && state.deferred.contains(lhs) && state.deferred.contains(rhs)) {
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
          continue;
        }
        throw std::invalid_argument("the CUDA target cannot lower a transformer.add that follows no matmul yet");
      }

      if (auto matmul = mlir::dyn_cast<transformer::MatmulOp>(op)) {
        View a = bound(matmul.getLhs(), false);
        requireRowMajor(a, "a matmul's left operand");
        View rhs = viewOf(matmul.getRhs());
        if (!rhs.weight) throw std::invalid_argument("the CUDA target multiplies activations by weights only");
        const ParameterSpec spec = *rhs.weight;
        View b = bound(matmul.getRhs(), true); // [N or V, K]
        std::vector<int64_t> shape = shapeOf(matmul.getResult());
        int64_t rows = shape[0], columns = shape[1], depth = a.sizes[1];
        Matmul m{rows, columns, spec.derived() ? b.sizes[0] : columns, depth, a.strides[0], b.element, {}};
        if (a.pointer().offset % 16 || a.strides[0] % 4)
          throw std::invalid_argument("the CUDA target needs a matmul's rows 16-byte aligned");
        // The epilogue: + bias, GELU, + residual, each the sole user of what came before.
        mlir::Value result = matmul.getResult();
        std::vector<PointerArg> extra;
        PointerArg biasArg, residualArg;
        if (auto add = mlir::dyn_cast_or_null<transformer::AddOp>(soleUser(result))) {
          mlir::Value other = otherOperand(add, result);
          View candidate = viewOf(other);
          if (candidate.weight && candidate.sizes == std::vector<int64_t>{columns}) {
            m.epilogue.bias = true;
            biasArg = bound(other, false).pointer();
            state.fused.insert(add);
            result = add.getResult();
          }
        }
        if (auto gelu = mlir::dyn_cast_or_null<transformer::GeluOp>(soleUser(result))) {
          m.epilogue.gelu = true;
          state.fused.insert(gelu);
          result = gelu.getResult();
        }
        if (auto add = mlir::dyn_cast_or_null<transformer::AddOp>(soleUser(result))) {
          mlir::Value other = otherOperand(add, result);
          mlir::Operation *definer = other.getDefiningOp();
          bool earlier = !definer || definer->isBeforeInBlock(matmul);
          if (earlier && state.values.count(other) && !viewOf(other).weight && shapeOf(other) == shape) {
            View residual = viewOf(other);
            if (residual.strides[1] == 1) {
              m.epilogue.residual = true;
              m.epilogue.residualStride = residual.strides[0];
              residualArg = residual.pointer();
              state.fused.insert(add);
              result = add.getResult();
            }
          }
        }
        if (m.validColumns != m.columns && (m.epilogue.bias || m.epilogue.gelu || m.epilogue.residual))
          throw std::invalid_argument("the CUDA target fuses no epilogue into a padded matmul");
        View out = allocate(result, shape);
        std::vector<PointerArg> args{a.pointer(), b.pointer()};
        if (m.epilogue.bias) args.push_back(biasArg);
        if (m.epilogue.residual) args.push_back(residualArg);
        args.push_back(out.pointer());
        if (rows <= kMatvecMaxRows)
          launch("matvec", matvec(m), args);
        else
          launch("matmul", tiledMatmul(m), args);
        continue;
      }

      if (auto norm = mlir::dyn_cast<transformer::LayerNormOp>(op)) {
        View in = bound(norm.getInput(), false);
        requireRowMajor(in, "a normalized input");
        View weight = bound(norm.getWeight(), false), bias = bound(norm.getBias(), false);
        View out = allocate(norm.getResult(), in.sizes);
        NormRows n{in.sizes[0], in.sizes[1], in.strides[0],
                   static_cast<float>(norm.getEpsilonAttr().getValueAsDouble()), /*rms=*/false};
        launch("layer_norm", normRows(n), {in.pointer(), weight.pointer(), bias.pointer(), out.pointer()});
        continue;
      }
      if (auto norm = mlir::dyn_cast<transformer::RmsNormOp>(op)) {
        View in = bound(norm.getInput(), false);
        requireRowMajor(in, "a normalized input");
        View weight = bound(norm.getWeight(), false);
        View out = allocate(norm.getResult(), in.sizes);
        NormRows n{in.sizes[0], in.sizes[1], in.strides[0],
                   static_cast<float>(norm.getEpsilonAttr().getValueAsDouble()), /*rms=*/true};
        launch("rms_norm", normRows(n), {in.pointer(), weight.pointer(), out.pointer()});
        continue;
      }

      if (auto slice = mlir::dyn_cast<transformer::SliceOp>(op)) {
        View view = bound(slice.getInput(), false);
        view.offset += static_cast<int64_t>(slice.getOffset()) * view.strides.back();
        view.sizes.back() = static_cast<int64_t>(slice.getSize());
        state.values[slice.getResult()] = view;
        continue;
      }
      if (auto split = mlir::dyn_cast<transformer::SplitHeadsOp>(op)) {
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
        state.values[split.getResult()] = view;
        continue;
      }
      if (auto merge = mlir::dyn_cast<transformer::MergeHeadsOp>(op)) {
        View in = viewOf(merge.getInput());
        std::array<int64_t, 2> strides = in.tokenAndHeadStrides(merge.getTokenMajor());
        int64_t tokens = merge.getTokenMajor() ? in.sizes[0] : in.sizes[1];
        int64_t heads = merge.getTokenMajor() ? in.sizes[1] : in.sizes[0];
        if (strides[1] != in.sizes[2] || in.strides[2] != 1)
          throw std::invalid_argument("the CUDA target merges heads that lie side by side only");
        View view = in;
        view.sizes = {tokens, heads * in.sizes[2]};
        view.strides = {strides[0], 1};
        state.values[merge.getResult()] = view;
        continue;
      }

      if (auto rotary = mlir::dyn_cast<transformer::RopeOp>(op)) {
        View in = viewOf(rotary.getInput()); // [H, T, d]
        View positions = viewOf(rotary.getPositions());
        std::vector<int64_t> shape = shapeOf(rotary.getResult());
        View out = allocate(rotary.getResult(), shape);
        std::vector<double> theta;
        for (double t : rotary.getFrequencies(shape[2])) theta.push_back(t);
        Rope r{shape[0], shape[1], shape[2], rotary.getInterleaved(), in.tokenAndHeadStrides(false), theta};
        launch("rope", rope(r), {in.pointer(), positions.pointer(), out.pointer()});
        continue;
      }
      if (auto gated = mlir::dyn_cast<transformer::SwigluOp>(op)) {
        View gate = viewOf(gated.getGate()), up = viewOf(gated.getUp());
        requireRowMajor(gate, "swiglu's gate");
        requireRowMajor(up, "swiglu's up");
        std::vector<int64_t> shape = shapeOf(gated.getResult());
        View out = allocate(gated.getResult(), shape);
        Swiglu g{shape[0], shape[1], gate.strides[0], up.strides[0]};
        launch("swiglu", swiglu(g), {gate.pointer(), up.pointer(), out.pointer()});
        continue;
      }

      if (auto update = mlir::dyn_cast<transformer::CacheUpdateOp>(op)) {
        View source = viewOf(update.getUpdate()); // [H, T, d]
        View cache = viewOf(update.getCache());
        if (cache.buffer < 0 || buffers_[cache.buffer].role != "cache")
          throw std::invalid_argument("the CUDA target updates the entry point's caches only");
        CacheWrite c{source.sizes[1], source.sizes[0], source.sizes[2], cacheLength, source.tokenAndHeadStrides(false)};
        launch("cache_write", cacheWrite(c), {source.pointer(), viewOf(update.getOffset()).pointer(), cache.pointer()});
        state.values[update.getResult()] = cache;
        continue;
      }

      if (auto attention = mlir::dyn_cast<transformer::CausalAttentionOp>(op)) {
        if (attention.getMask() || attention.getWindow() || !attention.getMaskExpression().empty())
          throw std::invalid_argument("the CUDA target lowers plain causal attention only (no mask or window yet)");
        View q = viewOf(attention.getQuery()), k = viewOf(attention.getKey()), v = viewOf(attention.getValue());
        bool qt = attention.getQueryTokenMajor(), kt = attention.getKeyTokenMajor(),
             vt = attention.getValueTokenMajor();
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
                    /*warps=*/keys >= kAttentionWarpsFrom ? 4 : 1};
        std::vector<PointerArg> args{q.pointer(), k.pointer(), v.pointer()};
        if (attention.getQueryOffset()) args.push_back(viewOf(attention.getQueryOffset()).pointer());
        args.push_back(out.pointer());
        launch("attention", gpu::attention(a), args);
        continue;
      }

      throw std::invalid_argument("the CUDA target cannot lower " + opName(&op) + " yet");
    }
  };
  formBlock(body);

  View logits = viewOf(state.logits);
  if (logits.buffer != logitsBuffer)
    throw std::invalid_argument("the CUDA target expects the LM head to write the logits");
  state.spec.logits = logits.pointer();
  state.spec.logitsRows = logits.sizes[0];
  state.spec.logitsRowStride = logits.strides[0];
  programs_.push_back(std::move(state.spec));
}

} // namespace gpt::gpu
