// Target-independent code generation passes: fusion on linalg tensors and the entry points'
// buffer calling convention, shared by the CPU pipeline (../cpu) and any other target.
#ifndef GPT_CC_CODEGEN_COMMON_PASSES_TD
#define GPT_CC_CODEGEN_COMMON_PASSES_TD

include "mlir/Pass/PassBase.td"

def FuseElementwise : Pass<"gpt-fuse-elementwise"> {
  let summary = "Fuse elementwise linalg ops, leaving packed matmuls whole";
  let description = [{
    Upstream's `--linalg-fuse-elementwise-ops` (a producer with one use is merged into its
    consumer; reshapes are propagated by expanding loops) with one exception: a `linalg.generic`
    marked `gpt.packed_matmul` (from `transformer.packed_matmul`) is never merged with a
    neighbour and never reshaped. Upstream's pass would pull the LayerNorm before it into its
    loop nest, recomputing the normalization once per weight panel, and would change the loop
    structure that the register tiling matches.
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

def ResultsToOutParams : Pass<"gpt-results-to-out-params", "::mlir::ModuleOp"> {
  let summary = "Make every function write its memref results into buffers its caller passes";
  let description = [{
    Runs right after bufferization. Each memref a function returns becomes an extra argument at
    the end of its argument list (upstream `promoteBufferResultsToOutParams`), and each call site
    allocates that buffer and passes it. Where the returned buffer was allocated in the function,
    the function writes into the caller's buffer directly, with no copy, even when it returns a
    reshaped view of its allocation: the allocation is first given the returned shape, and the
    shape it was allocated with becomes a view of it.

    The point is allocation: a callee's result, allocated inside the callee, lives on the heap
    because it outlives the call; the caller's buffer for it is a temporary of the caller, which
    `--gpt-stack-allocate-temporaries` can put in its frame. The entry points' results are
    buffers the runtime passes (the logits), so a compiled program returns nothing and hands no
    ownership across the call.

    Before:
    ```mlir
    func.func private @block(%x: memref<1x64xf32>) -> memref<1x64xf32> {
      %0 = memref.alloc() : memref<1x2x32xf32>
      ...
      %1 = memref.collapse_shape %0 [[0], [1, 2]] : memref<1x2x32xf32> into memref<1x64xf32>
      return %1 : memref<1x64xf32>
    }
    ```
    After:
    ```mlir
    func.func private @block(%x: memref<1x64xf32>, %out: memref<1x64xf32>) {
      %0 = memref.expand_shape %out [[0], [1, 2]] output_shape [1, 2, 32] : memref<1x64xf32> into memref<1x2x32xf32>
      ...
      return
    }
    ```
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect"];
}

#endif // GPT_CC_CODEGEN_COMMON_PASSES_TD
