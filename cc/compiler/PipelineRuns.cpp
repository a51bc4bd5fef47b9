// Running the named pipelines on a module for a target (see Compilers.h).
#include "cc/compiler/Compilers.h"

#include "cc/DiagnosticCapture.h"
#include "cc/codegen/common/CodegenAttributes.h"

#include <cstdlib>
#include <string_view>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"

namespace gpt {

void setPipelineOptions(PipelineOptions &pipeline, const CompileOptions &options) {
  pipeline.level = options.level;
  pipeline.threads = pipelineThreads(options);
}

namespace {

/// Whether the environment variable `name` is set to something other than "" or "0".
bool switchedOn(const char *name) {
  const char *setting = std::getenv(name);
  return setting && *setting && std::string_view(setting) != "0";
}

/// Whether the verifier runs after every pass (GPT_VERIFY_EACH_PASS=1) rather than once on the
/// pipeline's result. After every pass it was about a third of the MLIR pipeline's time, a tenth
/// of a compile; the modules here are the builder's, not a user's, and gpt-opt (the FileCheck
/// tests, the fuzzer) still verifies after each pass, so a pass that breaks the IR is caught
/// there and names itself.
bool verifyEachPass() {
  static const bool each = switchedOn("GPT_VERIFY_EACH_PASS");
  return each;
}

/// Whether each pass manager prints MLIR's pass timing to stderr when it finishes
/// (GPT_PASS_TIMING=1): where a compile's time goes, per pass, without a profiler.
bool timePasses() {
  static const bool timed = switchedOn("GPT_PASS_TIMING");
  return timed;
}

/// Runs what `addPasses` adds to a module pass manager on `module` and verifies the result; throws
/// CompileError with `failure` and MLIR's diagnostics.
template <typename AddPasses> void runPasses(mlir::ModuleOp module, const std::string &failure, AddPasses addPasses) {
  mlir::MLIRContext &context = *module.getContext();
  DiagnosticCapture diagnostics(context);
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  pm.enableVerifier(verifyEachPass());
  if (timePasses()) pm.enableTiming();
  addPasses(pm);
  if (mlir::failed(pm.run(module)) || mlir::failed(mlir::verify(module))) {
    throw CompileError(diagnostics.message(failure));
  }
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
