// The GPT forward pass in the transformer dialect (see GPTBuilder.h).
#include "cc/builder/GPTBuilder.h"

#include "cc/dialect/TransformerDialect.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"

#include <cmath>
#include <map>

namespace gpt {

using namespace mlir;
using namespace mlir::transformer;

std::string GPTConfig::validate() const {
  auto positive = [](int64_t v) { return v > 0; };
  if (!positive(nLayer) || !positive(nHead) || !positive(nEmbd) || !positive(vocabSize) || !positive(blockSize))
    return "n_layer, n_head, n_embd, vocab_size and block_size must all be positive";
  if (nEmbd % nHead != 0)
    return "n_embd (" + std::to_string(nEmbd) + ") must be divisible by n_head (" + std::to_string(nHead) + ")";
  if (rope && (nEmbd / nHead) % 2 != 0)
    return "rope needs an even head size, got n_embd / n_head = " + std::to_string(nEmbd / nHead);
  if (!(layerNormEps > 0.0f) || !std::isfinite(layerNormEps)) return "layer_norm_eps must be a positive finite number";
  return "";
}

std::vector<ParameterSpec> parameterSpecs(const GPTConfig &c) {
  const int64_t d = c.nEmbd;
  std::vector<ParameterSpec> specs = {{"transformer.wte.weight", {c.vocabSize, d}}};
  if (!c.rope) specs.push_back({"transformer.wpe.weight", {c.blockSize, d}});
  for (int64_t i = 0; i < c.nLayer; ++i) {
    std::string p = "transformer.h." + std::to_string(i) + ".";
    specs.insert(specs.end(), {
                                  {p + "ln_1.weight", {d}},
                                  {p + "ln_1.bias", {d}},
                                  {p + "attn.c_attn.weight", {d, 3 * d}},
                                  {p + "attn.c_attn.bias", {3 * d}},
                                  {p + "attn.c_proj.weight", {d, d}},
                                  {p + "attn.c_proj.bias", {d}},
                                  {p + "ln_2.weight", {d}},
                                  {p + "ln_2.bias", {d}},
                                  {p + "mlp.c_fc.weight", {d, 4 * d}},
                                  {p + "mlp.c_fc.bias", {4 * d}},
                                  {p + "mlp.c_proj.weight", {4 * d, d}},
                                  {p + "mlp.c_proj.bias", {d}},
                              });
  }
  specs.push_back({"transformer.ln_f.weight", {d}});
  specs.push_back({"transformer.ln_f.bias", {d}});
  specs.push_back({"lm_head.weight_t", {d, c.paddedVocabSize()}});
  return specs;
}

namespace {

/// Emits transformer ops with unranked results; shape inference gives them their types.
class GraphBuilder {
public:
  GraphBuilder(OpBuilder &b, Location loc, const GPTConfig &config) : b(b), loc(loc), config(config) {}

  Type unranked() { return UnrankedTensorType::get(b.getF32Type()); }

  Value add(Value x, Value y) { return b.create<AddOp>(loc, unranked(), x, y); }
  Value linear(Value x, Value w, Value bias) { return add(b.create<MatmulOp>(loc, unranked(), x, w), bias); }
  Value layerNorm(Value x, Value w, Value bias) {
    return b.create<LayerNormOp>(loc, unranked(), x, w, bias, b.getF32FloatAttr(config.layerNormEps));
  }
  Value heads(Value qkv, int64_t part) {
    Value slice = b.create<SliceOp>(loc, unranked(), qkv, b.getI64IntegerAttr(part * config.nEmbd),
                                    b.getI64IntegerAttr(config.nEmbd));
    return b.create<SplitHeadsOp>(loc, unranked(), slice, b.getI64IntegerAttr(config.nHead));
  }

  /// Pre-LayerNorm causal self-attention: the residual branch, not yet added to x.
  Value attention(Value x, ArrayRef<Value> w, Value positions) {
    Value qkv = linear(layerNorm(x, w[0], w[1]), w[2], w[3]);
    Value q = heads(qkv, 0), k = heads(qkv, 1), v = heads(qkv, 2);
    if (config.rope) {
      FloatAttr base = b.getF32FloatAttr(10000.0f);
      q = b.create<RopeOp>(loc, unranked(), q, positions, base);
      k = b.create<RopeOp>(loc, unranked(), k, positions, base);
    }
    float scale = 1.0f / std::sqrt(static_cast<float>(config.nEmbd / config.nHead));
    Value a = b.create<CausalAttentionOp>(loc, unranked(), q, k, v, /*query_offset=*/Value(), b.getF32FloatAttr(scale));
    return linear(b.create<MergeHeadsOp>(loc, unranked(), a), w[4], w[5]);
  }

  /// The MLP residual branch: c_proj(gelu(c_fc(ln_2(x)))).
  Value mlp(Value x, ArrayRef<Value> w) {
    Value h = linear(layerNorm(x, w[6], w[7]), w[8], w[9]);
    return linear(b.create<GeluOp>(loc, unranked(), h), w[10], w[11]);
  }

private:
  OpBuilder &b;
  Location loc;
  const GPTConfig &config;
};

} // namespace

namespace {

constexpr const char *kLayerWeightNames[] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",   "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias",
};

/// Creates `name` with `argTypes -> resultTypes`: inputs are read-only for bufferization, and
/// public entry points get a C interface for the runtime.
func::FuncOp createFunction(OpBuilder &b, Location loc, StringRef name, ArrayRef<Type> argTypes,
                            ArrayRef<Type> resultTypes, bool entryPoint) {
  auto fn = b.create<func::FuncOp>(loc, name, b.getFunctionType(argTypes, resultTypes));
  // Weights and inputs are read-only: bufferization must never write into the caller's arrays.
  for (unsigned i = 0; i < argTypes.size(); ++i)
    fn.setArgAttr(i, bufferization::BufferizationDialect::kWritableAttrName, b.getBoolAttr(false));
  if (entryPoint)
    fn->setAttr("llvm.emit_c_interface", b.getUnitAttr());  // called as _mlir_ciface_<name>
  else
    fn.setPrivate();
  fn.addEntryBlock();
  return fn;
}

/// `@gpt_block(x: [T, D], positions: [T], 12 layer weights) -> [T, D]`: one transformer layer.
/// Every layer has the same shapes, so the model calls one compiled copy n_layer times instead of
/// unrolling n_layer copies: compile time no longer grows with depth.
func::FuncOp buildBlock(OpBuilder &b, Location loc, const GPTConfig &config, int64_t seqLen,
                        ArrayRef<ParameterSpec> layerSpecs) {
  Type f32 = b.getF32Type();
  auto activations = RankedTensorType::get({seqLen, config.nEmbd}, f32);
  SmallVector<Type> argTypes = {activations, RankedTensorType::get({seqLen}, b.getI64Type())};
  for (const ParameterSpec &spec : layerSpecs) argTypes.push_back(RankedTensorType::get(spec.shape, f32));
  func::FuncOp fn = createFunction(b, loc, "gpt_block", argTypes, {activations}, /*entryPoint=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&fn.front());
  GraphBuilder g(b, loc, config);
  Value x = fn.getArgument(0), positions = fn.getArgument(1);
  SmallVector<Value> w(fn.getArguments().drop_front(2));
  x = g.add(x, g.attention(x, w, positions));
  x = g.add(x, g.mlp(x, w));
  // A cast to the declared type keeps the builder's output valid before shape inference; it
  // folds away once the types agree.
  b.create<func::ReturnOp>(loc, b.create<tensor::CastOp>(loc, activations, x).getResult());
  return fn;
}

} // namespace

OwningOpRef<ModuleOp> buildForward(MLIRContext &ctx, const GPTConfig &config, int64_t seqLen) {
  ctx.loadDialect<TransformerDialect, func::FuncDialect, bufferization::BufferizationDialect, tensor::TensorDialect>();
  OpBuilder b(&ctx);
  Location loc = NameLoc::get(b.getStringAttr("gpt.forward"));
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());

  std::vector<ParameterSpec> specs = parameterSpecs(config);
  std::vector<ParameterSpec> layerSpecs;
  for (const char *name : kLayerWeightNames)
    for (const ParameterSpec &spec : specs)
      if (spec.name == std::string("transformer.h.0.") + name) layerSpecs.push_back(spec);
  func::FuncOp block = buildBlock(b, loc, config, seqLen, layerSpecs);

  auto idsType = RankedTensorType::get({seqLen}, b.getI64Type());
  SmallVector<Type> argTypes = {idsType, idsType};
  for (const ParameterSpec &spec : specs) argTypes.push_back(RankedTensorType::get(spec.shape, b.getF32Type()));
  auto logitsType = RankedTensorType::get({seqLen, config.paddedVocabSize()}, b.getF32Type());
  func::FuncOp fn = createFunction(b, loc, "forward", argTypes, {logitsType}, /*entryPoint=*/true);
  b.setInsertionPointToStart(&fn.front());

  std::map<std::string, Value> weights;
  for (auto [i, spec] : llvm::enumerate(specs)) weights[spec.name] = fn.getArgument(i + 2);
  Value ids = fn.getArgument(0), positions = fn.getArgument(1);

  GraphBuilder g(b, loc, config);
  Value x = b.create<EmbeddingOp>(loc, g.unranked(), weights["transformer.wte.weight"], ids);
  if (!config.rope) x = g.add(x, b.create<EmbeddingOp>(loc, g.unranked(), weights["transformer.wpe.weight"], positions));
  // The call's operand types must match the block's signature.
  x = b.create<tensor::CastOp>(loc, block.getArgumentTypes()[0], x);
  for (int64_t layer = 0; layer < config.nLayer; ++layer) {
    SmallVector<Value> operands = {x, positions};
    for (const char *name : kLayerWeightNames)
      operands.push_back(weights["transformer.h." + std::to_string(layer) + "." + name]);
    x = b.create<func::CallOp>(loc, block, operands).getResult(0);
  }
  x = g.layerNorm(x, weights["transformer.ln_f.weight"], weights["transformer.ln_f.bias"]);
  Value logits = b.create<MatmulOp>(loc, g.unranked(), x, weights["lm_head.weight_t"]);
  b.create<func::ReturnOp>(loc, b.create<tensor::CastOp>(loc, logitsType, logits).getResult());
  return module;
}

} // namespace gpt
