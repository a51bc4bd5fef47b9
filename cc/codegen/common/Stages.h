// The target-independent stages every target's pipeline starts with: the transformer dialect
// canonicalized and shaped, then lowered to linalg on tensors. The CPU pipeline (../cpu) and
// the CUDA target (../gpu) both begin here.
#ifndef GPT_CC_CODEGEN_COMMON_STAGES_H
#define GPT_CC_CODEGEN_COMMON_STAGES_H

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace gpt::codegen {

/// Stage "transformer": canonicalize, shape inference, canonicalize, attention layout and tiles.
void addTransformerStage(mlir::OpPassManager &pm);
/// Stage "linalg": lowering to linalg on tensors; with `fuse`, elementwise fusion, CSE and
/// loop-invariant code motion.
void addLinalgStage(mlir::OpPassManager &pm, bool fuse);

} // namespace gpt::codegen

#endif // GPT_CC_CODEGEN_COMMON_STAGES_H
