// Named pass pipelines from the transformer dialect to the LLVM dialect. The same builders serve
// gpt-opt (registered as --gpt-* pipelines) and the Python package, so both run identical passes.
#ifndef GPT_CC_CODEGEN_CPU_PIPELINES_H
#define GPT_CC_CODEGEN_CPU_PIPELINES_H

#include "cc/codegen/cpu/PipelineLevels.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace gpt {

struct PipelineOptions : mlir::PassPipelineOptions<PipelineOptions> {
  Option<PipelineLevel> level{
      *this, "level", llvm::cl::desc("optimization level"), llvm::cl::init(PipelineLevel::Vectorized),
      llvm::cl::values(clEnumValN(PipelineLevel::Baseline, "baseline", "scalar loops, no fusion"),
                       clEnumValN(PipelineLevel::Fused, "fused", "elementwise fusion, CSE, LICM"),
                       clEnumValN(PipelineLevel::Vectorized, "vectorized", "fused + tile-and-vectorize"),
                       clEnumValN(PipelineLevel::Vectorized, "default", "the fastest correct pipeline (vectorized)"))};
  Option<int64_t> threads{*this, "threads",
                          llvm::cl::desc("threads the compiled code may use (OpenMP when > 1; vectorized levels)"),
                          llvm::cl::init(1)};
  // The CPU to generate code for (--gpt-set-target), as CompileOptions(target_cpu) names it; empty:
  // the module's own gpt.target (the JIT writes it), or none (no CPU-specific instructions).
  Option<std::string> targetCpu{
      *this, "target-cpu",
      llvm::cl::desc("the CPU code is generated for: an LLVM CPU name of the host's architecture or aarch64:<cpu>"),
      llvm::cl::init("")};
};

/// Stage "transformer": canonicalize, shape inference, canonicalize, attention layout.
void addTransformerStage(mlir::OpPassManager &pm);
/// Stage "linalg": lowering to linalg on tensors, plus fusion from the `fused` level up.
void addLinalgStage(mlir::OpPassManager &pm, const PipelineOptions &options);
/// Stage "vectorized": from the `vectorized` level up, register tiles are chosen and the
/// Transform-dialect schedule tiles and vectorizes the matmuls; nothing at lower levels.
void addVectorizedStage(mlir::OpPassManager &pm, const PipelineOptions &options);
/// Stage "bufferized": one-shot bufferization and deallocation, then loops.
void addBufferizedStage(mlir::OpPassManager &pm, const PipelineOptions &options);
/// Stage "llvm": everything to the LLVM dialect. Functions marked `llvm.emit_c_interface` get
/// `_mlir_ciface_` wrappers.
void addLLVMStage(mlir::OpPassManager &pm, const PipelineOptions &options);

/// Adds the stages from the first up to and including `last`.
void addPipelineUpTo(mlir::OpPassManager &pm, Stage last, const PipelineOptions &options);

/// Registers --gpt-transformer-stage, --gpt-linalg-stage, --gpt-vectorized-stage, --gpt-bufferized-stage,
/// --gpt-llvm-stage and the whole --gpt-compile pipeline (each taking `level=`).
void registerPipelines();

} // namespace gpt

#endif // GPT_CC_CODEGEN_CPU_PIPELINES_H
