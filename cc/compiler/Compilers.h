// The compiler library's parts behind ProgramCompiler (cc/runtime/ProgramCompiler.h): a model's
// entry points, an imported function and a textual pass pipeline, each over its own MLIR context.
#ifndef GPT_CC_COMPILER_COMPILERS_H
#define GPT_CC_COMPILER_COMPILERS_H

#include "cc/codegen/cpu/Pipelines.h"
#include "cc/runtime/ProgramCompiler.h"

#include <memory>
#include <string>

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace gpt {

/// The pipeline options of programs compiled with `options` (its level and threads): what both
/// compilers run, and what pipelineKey() (CompileOptions.h) names in the disk cache's keys.
void setPipelineOptions(PipelineOptions &pipeline, const CompileOptions &options);

/// Runs the pipeline of `options` on `module` through `stage`, for `target` (written into the
/// module as its `gpt.target`). Throws CompileError with `failure` and MLIR's diagnostics.
void runPipelineUpTo(mlir::ModuleOp module, Stage stage, const CompileOptions &options, const JitTarget &target,
                     const std::string &failure);

/// Runs the "llvm" stage of `options`'s pipeline on a bufferized `module`. Throws CompileError with
/// `failure` and MLIR's diagnostics.
void runLLVMStage(mlir::ModuleOp module, const CompileOptions &options, const std::string &failure);

/// A model's entry points: GPTBuilder.h's modules, the pass pipeline and MachineCode.h.
std::unique_ptr<ModelCompiler> newModelCompiler(const GPTConfig &config, const WeightStorage &storage,
                                                const CompileOptions &options, const JitTarget &target);

/// An imported function (see ProgramCompiler::compileFunction).
std::unique_ptr<FunctionCompiler> newFunctionCompiler(const std::string &ir, const std::string &name,
                                                      const CompileOptions &options, const JitTarget &target);

/// See ProgramCompiler::runPipeline.
std::string runTextPipeline(const std::string &ir, const std::string &pipeline, bool verifyEach);

} // namespace gpt

#endif // GPT_CC_COMPILER_COMPILERS_H
