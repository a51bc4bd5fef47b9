// The CUDA target's driver: build, form programs, lower kernels to PTX, write the manifest.
#include "cc/codegen/gpu/GpuArtifact.h"

#include "cc/DiagnosticCapture.h"
#include "cc/Registration.h"
#include "cc/builder/GPTBuilder.h"
#include "cc/codegen/common/Stages.h"
#include "cc/codegen/gpu/GpuPrograms.h"

#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace gpt::gpu {
namespace {

/// The dialects and translations NVVM lowering and serialization need, once per context.
std::unique_ptr<mlir::MLIRContext> makeContext() {
  mlir::DialectRegistry registry;
  gpt::registerAllDialects(registry); // the transformer dialect and the ones the project uses
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  mlir::NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  auto context = std::make_unique<mlir::MLIRContext>(registry, mlir::MLIRContext::Threading::DISABLED);
  context->loadAllAvailableDialects();
  return context;
}

std::string print(mlir::Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

/// The entry point `name` of a freshly built module, shape-inferred (its layers stay calls: the
/// dispatch formation walks into them).
mlir::func::FuncOp flatten(mlir::MLIRContext &context, mlir::ModuleOp module, llvm::StringRef name) {
  DiagnosticCapture diagnostics(context);
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  codegen::addTransformerStage(pm);
  if (mlir::failed(pm.run(module)))
    throw std::runtime_error(diagnostics.message("preparing " + name.str() + " for the CUDA target failed"));
  auto function = module.lookupSymbol<mlir::func::FuncOp>(name);
  if (!function || !function.getBody().hasOneBlock())
    throw std::runtime_error("the CUDA target needs " + name.str() + " as one block");
  return function;
}

llvm::json::Array toJson(const std::array<int64_t, 3> &dims) { return llvm::json::Array{dims[0], dims[1], dims[2]}; }

llvm::json::Object toJson(const PointerArg &arg) {
  return llvm::json::Object{{"buffer", arg.buffer}, {"offset", arg.offset}};
}

std::string manifestJson(const ArtifactBuilder &builder, const GpuTargetOptions &options, int64_t cacheLength) {
  llvm::json::Array buffers;
  for (const BufferSpec &b : builder.buffers()) {
    llvm::json::Object o{{"name", b.name}, {"role", b.role}, {"bytes", b.bytes}};
    if (b.role == "weight") {
      o["dtype"] = b.dtype;
      o["shape"] = llvm::json::Array(b.shape);
      o["layout"] = b.layout;
    }
    buffers.push_back(std::move(o));
  }
  llvm::json::Array layers;
  for (const auto &[key, value] : builder.cacheBuffers())
    layers.push_back(llvm::json::Object{{"key", key}, {"value", value}});
  llvm::json::Array programs;
  for (const ProgramSpec &p : builder.programs()) {
    llvm::json::Object inputs;
    for (const auto &[name, arg] : p.inputs) inputs[name] = toJson(arg);
    llvm::json::Array launches;
    for (const LaunchSpec &l : p.launches) {
      llvm::json::Array args;
      for (const PointerArg &a : l.args) args.push_back(toJson(a));
      launches.push_back(llvm::json::Object{{"kernel", l.kernel},
                                            {"grid", toJson(l.grid)},
                                            {"block", toJson(l.block)},
                                            {"shared_bytes", 0},
                                            {"args", std::move(args)},
                                            {"op", llvm::json::Object(l.op)}});
    }
    llvm::json::Object logits = toJson(p.logits);
    logits["rows"] = p.logitsRows;
    logits["row_stride"] = p.logitsRowStride;
    programs.push_back(llvm::json::Object{{"entry", p.entry},
                                          {"tokens", p.tokens},
                                          {"inputs", std::move(inputs)},
                                          {"launches", std::move(launches)},
                                          {"logits", std::move(logits)}});
  }
  llvm::json::Object manifest{
      {"format", "gpt.gpu-artifact"},
      {"version", 1},
      {"target", llvm::json::Object{{"chip", options.chip},
                                    {"ptx_version", kPtxVersion},
                                    {"module", "kernels." + options.chip + ".ptx"}}},
      {"buffers", std::move(buffers)},
      {"cache", llvm::json::Object{{"length", cacheLength}, {"layers", std::move(layers)}}},
      {"programs", std::move(programs)},
  };
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest)));
  return text;
}

} // namespace

GpuArtifact compileGpuArtifact(const GPTConfig &config, const GpuTargetOptions &options) {
  static const std::set<std::string> chips{"sm_80", "sm_86", "sm_89", "sm_90"};
  if (!chips.count(options.chip))
    throw std::invalid_argument("unknown CUDA chip '" + options.chip + "' (known: sm_80, sm_86, sm_89, sm_90)");
  if (options.tokens.empty()) throw std::invalid_argument("a GPU artifact needs at least one token count");
  int64_t cacheLength = options.cacheLength ? options.cacheLength : config.blockSize;
  int64_t maxTokens = *std::max_element(options.tokens.begin(), options.tokens.end());
  for (int64_t tokens : options.tokens)
    if (tokens < 1 || tokens > config.blockSize || tokens > cacheLength)
      throw std::invalid_argument("token count " + std::to_string(tokens) + " is outside 1.." +
                                  std::to_string(std::min(config.blockSize, cacheLength)));

  std::unique_ptr<mlir::MLIRContext> context = makeContext();
  ArtifactBuilder builder(config, options.bf16 ? ElementType::BF16 : ElementType::F32, cacheLength, maxTokens);
  for (int64_t tokens : options.tokens) {
    mlir::OwningOpRef<mlir::ModuleOp> forward = buildForward(*context, config, tokens, gpuWeightStorage());
    builder.addProgram(flatten(*context, *forward, "forward"), EntryPoint::Forward, tokens);
    mlir::OwningOpRef<mlir::ModuleOp> step = buildStep(*context, config, tokens, cacheLength, gpuWeightStorage());
    builder.addProgram(flatten(*context, *step, "step"), EntryPoint::Step, tokens);
  }

  GpuArtifact artifact;
  std::string source = "module attributes {gpu.container_module} {\ngpu.module @kernels {\n";
  for (const std::string &kernel : builder.kernelTexts()) source += kernel;
  source += "}\n}\n";
  artifact.kernels = source;

  DiagnosticCapture diagnostics(*context);
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(source, context.get());
  if (!module) throw std::runtime_error(diagnostics.message("the generated GPU kernels do not parse"));
  mlir::PassManager pm(context.get(), mlir::ModuleOp::getOperationName());
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  pm.addNestedPass<mlir::gpu::GPUModuleOp>(mlir::createConvertSCFToCFPass());
  std::vector<std::string> libraries;
  if (!options.libdevice.empty()) libraries.push_back(options.libdevice);
  mlir::GpuNVVMAttachTargetOptions target;
  target.chip = options.chip;
  target.features = std::string("+ptx") + std::string(kPtxVersion).erase(1, 1);
  target.optLevel = 3;
  target.linkLibs = libraries;
  pm.addPass(mlir::createGpuNVVMAttachTarget(target));
  mlir::ConvertGpuOpsToNVVMOpsOptions nvvm;
  nvvm.useBarePtrCallConv = true;
  pm.addNestedPass<mlir::gpu::GPUModuleOp>(mlir::createConvertGpuOpsToNVVMOps(nvvm));
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
  if (mlir::failed(pm.run(*module)))
    throw std::runtime_error(diagnostics.message("lowering the GPU kernels to NVVM failed"));
  artifact.nvvm = print(*module);

  mlir::PassManager serialize(context.get(), mlir::ModuleOp::getOperationName());
  mlir::GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = "isa";
  serialize.addPass(mlir::createGpuModuleToBinaryPass(binary));
  if (mlir::failed(serialize.run(*module))) throw std::runtime_error(diagnostics.message("emitting PTX failed"));
  module->walk([&](mlir::gpu::BinaryOp binaryOp) {
    for (mlir::Attribute object : binaryOp.getObjects())
      artifact.ptx = mlir::cast<mlir::gpu::ObjectAttr>(object).getObject().str();
  });
  if (artifact.ptx.empty()) throw std::runtime_error("the NVVM backend produced no PTX");
  artifact.manifest = manifestJson(builder, options, cacheLength);
  return artifact;
}

} // namespace gpt::gpu
