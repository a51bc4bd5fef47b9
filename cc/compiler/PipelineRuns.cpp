// Running the named pipelines on a module for a target (see Compilers.h).
#include "cc/compiler/Compilers.h"

#include "cc/DiagnosticCapture.h"
#include "cc/codegen/common/CodegenAttributes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

namespace gpt {

void setPipelineOptions(PipelineOptions &pipeline, const CompileOptions &options) {
  pipeline.level = options.level;
  pipeline.threads = pipelineThreads(options);
}

namespace {

/// Runs what `addPasses` adds to a module pass manager on `module`; throws CompileError with
/// `failure` and MLIR's diagnostics.
template <typename AddPasses> void runPasses(mlir::ModuleOp module, const std::string &failure, AddPasses addPasses) {
  mlir::MLIRContext &context = *module.getContext();
  DiagnosticCapture diagnostics(context);
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  addPasses(pm);
  if (mlir::failed(pm.run(module))) throw CompileError(diagnostics.message(failure));
}

} // namespace

void runPipelineUpTo(mlir::ModuleOp module, Stage stage, const CompileOptions &options, const JitTarget &target,
                     const std::string &failure) {
  // The target the passes choose tiles and instructions for.
  codegen::setTarget(module, target.codegenTarget());
  PipelineOptions pipeline;
  setPipelineOptions(pipeline, options);
  runPasses(module, failure, [&](mlir::PassManager &pm) { addPipelineUpTo(pm, stage, pipeline); });
}

void runLLVMStage(mlir::ModuleOp module, const CompileOptions &options, const std::string &failure) {
  PipelineOptions pipeline;
  setPipelineOptions(pipeline, options);
  runPasses(module, failure, [&](mlir::PassManager &pm) { addLLVMStage(pm, pipeline); });
}

} // namespace gpt
