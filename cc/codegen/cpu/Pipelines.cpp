// Pipeline builders (see Pipelines.h). The order of the LLVM lowering passes follows
// the order verified on MLIR 19: bufferization, then loops, then each dialect to LLVM.
#include "cc/codegen/cpu/Pipelines.h"

#include "cc/codegen/common/Passes.h"
#include "cc/codegen/common/Stages.h"
#include "cc/codegen/cpu/Passes.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/BufferizationToMemRef/BufferizationToMemRef.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/OpenMPToLLVM/ConvertOpenMPToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/SCFToOpenMP/SCFToOpenMP.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Conversion/VectorToSCF/VectorToSCF.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotAnalysis.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

#include <mutex>

namespace gpt {

using mlir::OpPassManager;

namespace {
bool fuses(const PipelineOptions &options) { return options.level != PipelineLevel::Baseline; }
bool vectorizes(const PipelineOptions &options) { return options.level == PipelineLevel::Vectorized; }

} // namespace

void addTransformerStage(OpPassManager &pm) { codegen::addTransformerStage(pm); }

void addLinalgStage(OpPassManager &pm, const PipelineOptions &options) { codegen::addLinalgStage(pm, fuses(options)); }

void addVectorizedStage(OpPassManager &pm, const PipelineOptions &options) {
  if (!vectorizes(options)) return;
  codegen::SelectRegisterTilesOptions tiles;
  tiles.threads = options.threads;
  pm.addNestedPass<mlir::func::FuncOp>(codegen::createSelectRegisterTiles(tiles));
  pm.addPass(codegen::createApplySchedule());
  pm.addNestedPass<mlir::func::FuncOp>(codegen::createVerifyVectorized());
  pm.addPass(codegen::createApproximateVectorMath());
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
}

void addBufferizedStage(OpPassManager &pm, const PipelineOptions &options) {
  mlir::bufferization::OneShotBufferizationOptions bufferization;
  bufferization.bufferizeFunctionBoundaries = true;
  bufferization.setFunctionBoundaryTypeConversion(mlir::bufferization::LayoutMapOption::IdentityLayoutMap);
  // A result computed into a fresh tensor and then inserted into a slice of another (each
  // attention block's output) is computed in that slice instead: no temporary, no copy.
  pm.addPass(mlir::bufferization::createEmptyTensorEliminationPass());
  pm.addPass(mlir::bufferization::createOneShotBufferizePass(bufferization));
  // canonicalize first: drop-equivalent-buffer-results only sees through folded loop iter_args.
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::bufferization::createDropEquivalentBufferResultsPass());
  // On buffers, where AMX tiles load and store; before the scf.forall of its thread pieces
  // becomes a loop or an OpenMP one, with the schedule's.
  if (vectorizes(options)) pm.addNestedPass<mlir::func::FuncOp>(codegen::createLowerAmxMatmuls());
  const bool parallel = vectorizes(options) && options.threads > 1;
  // Single-threaded, the attention's loop over heads (an scf.forall) runs in order; as an scf.for
  // its temporaries can share one stack buffer (below).
  if (!parallel) pm.addPass(mlir::createForallToForLoopPass());
  // Results become buffers the caller passes (the runtime, for the entry points' logits), and
  // small temporaries live in the function's frame: no malloc/free per call (a decode step).
  pm.addPass(codegen::createResultsToOutParams());
  pm.addNestedPass<mlir::func::FuncOp>(codegen::createStackAllocateTemporaries());
  mlir::bufferization::BufferDeallocationPipelineOptions deallocation;
  mlir::bufferization::buildBufferDeallocationPipeline(pm, deallocation);
  // Each heap temporary freed once nothing reads it, not when its layer returns.
  pm.addNestedPass<mlir::func::FuncOp>(codegen::createFreeBuffersAfterLastUse());
  if (parallel) {
    // The scf.forall loops of the schedule and of the attention's heads (on buffers now:
    // scf-forall-to-for on tensors crashes MLIR 19's verifier) become OpenMP worksharing loops. The memref.alloca_scope
    // the conversion wraps each body in holds no allocas and is inlined; it would otherwise become invalid once
    // scf-to-cf gives it several blocks.
    pm.addPass(mlir::createForallToParallelLoopPass());
    mlir::ConvertSCFToOpenMPPassOptions openmp;
    openmp.numThreads = static_cast<unsigned>(options.threads);
    pm.addPass(mlir::createConvertSCFToOpenMPPass(openmp));
    pm.addPass(codegen::createShareLoopsDynamically());
    pm.addPass(codegen::createInlineAllocaScopes());
    pm.addPass(mlir::createCanonicalizerPass());
  }
  pm.addNestedPass<mlir::func::FuncOp>(mlir::createConvertLinalgToLoopsPass());
  if (fuses(options)) {
    pm.addPass(mlir::createCanonicalizerPass());
    pm.addPass(mlir::createLoopInvariantCodeMotionPass());
  }
}

void addLLVMStage(OpPassManager &pm, const PipelineOptions &options) {
  // Before any conversion to the LLVM dialect: some of them convert func.func already.
  pm.addPass(codegen::createBarePointerCalls());
  // After bufferization, which does not know the intrinsics' memory effects (none).
  pm.addPass(codegen::createLowerLaneDots());
  // After buffer deallocation, which rejects memref.prefetch (it has no memory effects interface).
  pm.addPass(codegen::createPrefetchWeightPanels());
  pm.addPass(codegen::createPrefetchDecodeLanes());
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createBufferizationToMemRefPass());
  pm.addPass(mlir::createConvertVectorToSCFPass(mlir::VectorTransferToSCFOptions().enableFullUnroll()));
  pm.addPass(mlir::memref::createExpandStridedMetadataPass());
  pm.addPass(mlir::createLowerAffinePass());
  pm.addPass(mlir::createConvertSCFToCFPass());
  // A vector's lanes (the row sums of LayerNorm and the attention's softmax) are summed as a tree
  // of log2(n) dependent adds instead of a chain of n: the order of a float sum changes its
  // rounding, not its accuracy.
  mlir::ConvertVectorToLLVMPassOptions vectorToLLVM;
  vectorToLLVM.reassociateFPReductions = true;
  vectorToLLVM.amx = true; // amx.* ops (--gpt-lower-amx-matmuls) to their LLVM intrinsics
  pm.addPass(mlir::createConvertVectorToLLVMPass(vectorToLLVM));
  pm.addPass(mlir::createConvertMathToLLVMPass());
  pm.addPass(mlir::createConvertMathToLibmPass());
  pm.addPass(mlir::createArithToLLVMConversionPass());
  pm.addPass(mlir::createConvertIndexToLLVMPass());
  // Heap buffers through the runtime's workspace (cc/runtime/support/Workspace.cpp), which keeps a
  // prefill's large temporaries for the next call instead of mapping them afresh every time.
  mlir::FinalizeMemRefToLLVMConversionPassOptions memrefToLLVM;
  memrefToLLVM.useGenericFunctions = true;
  pm.addPass(mlir::createFinalizeMemRefToLLVMConversionPass(memrefToLLVM));
  pm.addPass(mlir::createConvertOpenMPToLLVMPass());
  pm.addPass(mlir::createConvertControlFlowToLLVMPass());
  pm.addPass(mlir::createConvertFuncToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
  pm.addPass(codegen::createNarrowParallelCaptures());
}

void addPipelineUpTo(OpPassManager &pm, Stage last, const PipelineOptions &options) {
  if (!options.targetCpu.empty()) {
    codegen::SetTargetOptions target;
    target.cpu = options.targetCpu;
    pm.addPass(codegen::createSetTarget(target));
  }
  addTransformerStage(pm);
  if (last == Stage::Transformer) return;
  addLinalgStage(pm, options);
  if (last == Stage::Linalg) return;
  addVectorizedStage(pm, options);
  if (last == Stage::Vectorized) return;
  addBufferizedStage(pm, options);
  if (last == Stage::Bufferized) return;
  addLLVMStage(pm, options);
}

void registerPipelines() {
  static std::once_flag once;
  std::call_once(once, [] {
    mlir::PassPipelineRegistration<>("gpt-transformer-stage",
                                     "Canonicalize, infer shapes and decide attention layouts of transformer IR",
                                     addTransformerStage);
    mlir::PassPipelineRegistration<PipelineOptions>("gpt-linalg-stage", "Lower transformer IR to linalg on tensors",
                                                    addLinalgStage);
    mlir::PassPipelineRegistration<PipelineOptions>("gpt-vectorized-stage", "Tile and vectorize linalg on tensors",
                                                    addVectorizedStage);
    mlir::PassPipelineRegistration<PipelineOptions>("gpt-bufferized-stage", "Bufferize linalg on tensors to loops",
                                                    addBufferizedStage);
    mlir::PassPipelineRegistration<PipelineOptions>("gpt-llvm-stage", "Lower loops on buffers to the LLVM dialect",
                                                    addLLVMStage);
    mlir::PassPipelineRegistration<PipelineOptions>(
        "gpt-compile", "The whole pipeline: transformer dialect to LLVM dialect",
        [](OpPassManager &pm, const PipelineOptions &options) { addPipelineUpTo(pm, Stage::LLVM, options); });
  });
}

} // namespace gpt
