// An imported transformer-dialect function parsed, lowered and compiled (see Compilers.h).
#include "cc/compiler/Compilers.h"

#include "cc/DiagnosticCapture.h"
#include "cc/ParseInput.h"
#include "cc/Registration.h"
#include "cc/compiler/MachineCode.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

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

class MlirFunctionCompiler : public FunctionCompiler {
public:
  MlirFunctionCompiler(const std::string &ir, const std::string &name, const CompileOptions &options,
                       const JitTarget &target)
      : text(ir), name(name), options(options), target(target) {
    // Schedules run upstream passes by name (transform.apply_registered_pass).
    registerAllPasses();
    mlir::DialectRegistry registry;
    registerAllDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
    context->loadAllAvailableDialects();
    context->printOpOnDiagnostic(false);
    mlir::OwningOpRef<mlir::ModuleOp> module = lower(Stage::Transformer);
    auto function = module->lookupSymbol<mlir::func::FuncOp>(name);
    for (mlir::Type type : function.getArgumentTypes())
      arguments_.push_back(signatureOf(type, "argument " + std::to_string(arguments_.size()) + " of " + name));
    for (mlir::Type type : function.getResultTypes())
      results_.push_back(signatureOf(type, "result " + std::to_string(results_.size()) + " of " + name));
  }

  const std::vector<TensorSignature> &arguments() const override { return arguments_; }
  const std::vector<TensorSignature> &results() const override { return results_; }

  std::string ir(Stage stage) override {
    mlir::OwningOpRef<mlir::ModuleOp> module = lower(stage);
    std::string printed;
    llvm::raw_string_ostream os(printed);
    module->print(os);
    return printed;
  }

  std::string compile() override {
    mlir::OwningOpRef<mlir::ModuleOp> module = lowerToLLVM();
    return compileToSharedObject(*module, name, target);
  }

private:
  /// The module parsed from the text, lowered through `stage`.
  mlir::OwningOpRef<mlir::ModuleOp> lower(Stage stage) {
    DiagnosticCapture diagnostics(*context);
    mlir::OwningOpRef<mlir::ModuleOp> module = parseModuleText(text, context.get(), "imported");
    if (!module) throw CompileError(diagnostics.message("the imported module does not parse"));
    auto function = module->lookupSymbol<mlir::func::FuncOp>(name);
    if (!function) throw std::invalid_argument("the module has no func.func named '" + name + "'");
    // Called through its C interface wrapper, _mlir_ciface_<name>.
    function->setAttr("llvm.emit_c_interface", mlir::UnitAttr::get(context.get()));
    runPipelineUpTo(*module, stage, options, target, "compiling the imported function '" + name + "' failed");
    return module;
  }

  /// The module lowered to the LLVM dialect, checked to follow the runtime's convention: the
  /// arguments as given, then one out-param per result, each a dense buffer of the signature's
  /// shape; nothing returned.
  mlir::OwningOpRef<mlir::ModuleOp> lowerToLLVM() {
    mlir::OwningOpRef<mlir::ModuleOp> module = lower(Stage::Bufferized);
    auto function = module->lookupSymbol<mlir::func::FuncOp>(name);
    size_t expected = arguments_.size() + results_.size();
    bool conforms = function && function.getNumResults() == 0 && function.getNumArguments() == expected;
    for (size_t i = 0; conforms && i < expected; ++i) {
      auto memref = mlir::dyn_cast<mlir::MemRefType>(function.getArgumentTypes()[i]);
      const TensorSignature &want = i < arguments_.size() ? arguments_[i] : results_[i - arguments_.size()];
      conforms = memref && memref.getLayout().isIdentity() &&
                 std::vector<int64_t>(memref.getShape().begin(), memref.getShape().end()) == want.shape;
    }
    if (!conforms)
      throw CompileError("internal error: the bufferized '" + name +
                         "' does not take its arguments then its results as dense buffers and return nothing");
    runLLVMStage(*module, options, "lowering '" + name + "' to LLVM failed");
    return module;
  }

  const std::string text, name;
  const CompileOptions options;
  const JitTarget target;
  std::unique_ptr<mlir::MLIRContext> context;
  std::vector<TensorSignature> arguments_, results_;
};

} // namespace

std::unique_ptr<FunctionCompiler> newFunctionCompiler(const std::string &ir, const std::string &name,
                                                      const CompileOptions &options, const JitTarget &target) {
  return std::make_unique<MlirFunctionCompiler>(ir, name, options, target);
}

} // namespace gpt
