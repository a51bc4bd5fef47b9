// Compiling and calling an arbitrary transformer-dialect function (see CompiledFunction.h).
#include "cc/runtime/CompiledFunction.h"

#include "cc/codegen/common/CodegenAttributes.h"

#include "cc/ParseInput.h"
#include "cc/Registration.h"
#include "cc/runtime/CachedJit.h"
#include "cc/runtime/DiagnosticCapture.h"
#include "cc/runtime/JitFunction.h"
#include "cc/runtime/MemRefDescriptor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <stdexcept>

namespace gpt {

namespace {

std::string typeText(mlir::Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  type.print(os);
  return text;
}

/// The signature of a statically shaped tensor (or, after bufferization, memref) type.
TensorSignature signatureOf(mlir::Type type, const std::string &what) {
  auto shaped = mlir::dyn_cast<mlir::ShapedType>(type);
  if (!shaped || !shaped.hasStaticShape())
    throw std::invalid_argument(what + " has type " + typeText(type) +
                                ": only statically shaped tensors are supported");
  return {std::vector<int64_t>(shaped.getShape().begin(), shaped.getShape().end()), typeText(shaped.getElementType())};
}

} // namespace

CompiledFunction::CompiledFunction(const std::string &ir, const std::string &name, const CompileOptions &options)
    : text_(ir), name_(name), options_(options), target_(JitTarget::named(options.targetCpu)) {
  // Schedules run upstream passes by name (transform.apply_registered_pass).
  registerAllPasses();
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  context_ = std::make_unique<mlir::MLIRContext>(registry);
  context_->loadAllAvailableDialects();
  context_->printOpOnDiagnostic(false);
  mlir::OwningOpRef<mlir::ModuleOp> module = lower(Stage::Transformer);
  auto function = module->lookupSymbol<mlir::func::FuncOp>(name_);
  for (mlir::Type type : function.getArgumentTypes())
    arguments_.push_back(signatureOf(type, "argument " + std::to_string(arguments_.size()) + " of " + name_));
  for (mlir::Type type : function.getResultTypes())
    results_.push_back(signatureOf(type, "result " + std::to_string(results_.size()) + " of " + name_));
}

CompiledFunction::~CompiledFunction() = default;

mlir::OwningOpRef<mlir::ModuleOp> CompiledFunction::lower(Stage stage) {
  DiagnosticCapture diagnostics(*context_);
  mlir::OwningOpRef<mlir::ModuleOp> module = parseModuleText(text_, context_.get(), "imported");
  if (!module) throw CompileError(diagnostics.message("the imported module does not parse"));
  auto function = module->lookupSymbol<mlir::func::FuncOp>(name_);
  if (!function) throw std::invalid_argument("the module has no func.func named '" + name_ + "'");
  // Called through its C interface wrapper, _mlir_ciface_<name>.
  function->setAttr("llvm.emit_c_interface", mlir::UnitAttr::get(context_.get()));
  // The target the passes choose tiles and instructions for.
  codegen::setTarget(*module, target_.codegenTarget());
  mlir::PassManager pm(context_.get(), mlir::ModuleOp::getOperationName());
  PipelineOptions pipeline;
  setPipelineOptions(pipeline, options_);
  addPipelineUpTo(pm, stage, pipeline);
  if (mlir::failed(pm.run(*module)))
    throw CompileError(diagnostics.message("compiling the imported function '" + name_ + "' failed"));
  return module;
}

std::string CompiledFunction::ir(Stage stage) {
  std::lock_guard<std::mutex> lock(mutex_);
  mlir::OwningOpRef<mlir::ModuleOp> module = lower(stage);
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}

void CompiledFunction::compile() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (function_) return;
  auto start = std::chrono::steady_clock::now();
  // The imported module and the pipeline's options key the disk cache; a hit skips the pipeline.
  const std::vector<std::string> source = {pipelineKey(options_), text_};
  try {
    function_ = jitThroughDiskCache(
        source, name_, target_, {options_.cacheDir, options_.cacheMaxBytes}, [&] { return lowerToLLVM(); }, &loaded_);
  } catch (const CompileError &) {
    throw;
  } catch (const std::runtime_error &error) {
    throw CompileError(error.what());
  }
  compileSeconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

mlir::OwningOpRef<mlir::ModuleOp> CompiledFunction::lowerToLLVM() {
  mlir::OwningOpRef<mlir::ModuleOp> module = lower(Stage::Bufferized);
  // The calling convention call() relies on: the arguments as given, then one out-param per
  // result, each a dense buffer of the signature's shape; nothing returned.
  auto function = module->lookupSymbol<mlir::func::FuncOp>(name_);
  size_t expected = arguments_.size() + results_.size();
  bool conforms = function && function.getNumResults() == 0 && function.getNumArguments() == expected;
  for (size_t i = 0; conforms && i < expected; ++i) {
    auto memref = mlir::dyn_cast<mlir::MemRefType>(function.getArgumentTypes()[i]);
    const TensorSignature &want = i < arguments_.size() ? arguments_[i] : results_[i - arguments_.size()];
    conforms = memref && memref.getLayout().isIdentity() &&
               std::vector<int64_t>(memref.getShape().begin(), memref.getShape().end()) == want.shape;
  }
  if (!conforms)
    throw CompileError("internal error: the bufferized '" + name_ +
                       "' does not take its arguments then its results as dense buffers and return nothing");
  DiagnosticCapture diagnostics(*context_);
  mlir::PassManager pm(context_.get(), mlir::ModuleOp::getOperationName());
  PipelineOptions pipeline;
  setPipelineOptions(pipeline, options_);
  addLLVMStage(pm, pipeline);
  if (mlir::failed(pm.run(*module))) throw CompileError(diagnostics.message("lowering '" + name_ + "' to LLVM failed"));
  return module;
}

bool CompiledFunction::isCompiled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return function_ != nullptr;
}

double CompiledFunction::compileSeconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return compileSeconds_;
}

bool CompiledFunction::loadedFromDiskCache() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return loaded_;
}

void CompiledFunction::call(const std::vector<void *> &buffers) {
  if (buffers.size() != arguments_.size() + results_.size())
    throw std::invalid_argument("expected " + std::to_string(arguments_.size()) + " arguments and " +
                                std::to_string(results_.size()) + " result buffers, got " +
                                std::to_string(buffers.size()) + " buffers");
  compile();
  std::vector<MemRefDescriptor> descriptors;
  descriptors.reserve(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    const TensorSignature &signature = i < arguments_.size() ? arguments_[i] : results_[i - arguments_.size()];
    descriptors.push_back(MemRefDescriptor::view(buffers[i], signature.shape));
  }
  std::vector<void *> pointers;
  for (MemRefDescriptor &descriptor : descriptors) pointers.push_back(descriptor.pointer());
  function_->call(pointers);
}

} // namespace gpt
