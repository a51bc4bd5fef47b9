// Passes of the gpt compiler over the `transformer` dialect.
#ifndef GPT_CC_PASSES_PASSES_TD
#define GPT_CC_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def TransformerShapeInference : Pass<"transformer-shape-inference", "::mlir::func::FuncOp"> {
  let summary = "Refine unranked transformer results to ranked types";
  let description = [{
    Visits the ops of a function in program order (a worklist, as in the MLIR Toy tutorial,
    chapter 4) and, for every op implementing `ShapeInferenceOpInterface` whose operands are all
    ranked, computes its result type: unranked results are refined, ranked results are checked
    against the operands and an error is reported where they conflict. Ops that do not implement
    the interface are never touched. Function results declared unranked take the refined type of
    the value returned.

    Before:
    ```mlir
    func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<*xf32> {
      %0 = transformer.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<*xf32>
      %1 = transformer.transpose %0 : tensor<*xf32> -> tensor<*xf32>
      return %1 : tensor<*xf32>
    }
    ```
    After:
    ```mlir
    func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<16x4xf32> {
      %0 = transformer.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
      %1 = transformer.transpose %0 : tensor<4x16xf32> -> tensor<16x4xf32>
      return %1 : tensor<16x4xf32>
    }
    ```
  }];
}

def TransformerToLinalg : Pass<"transformer-to-linalg", "::mlir::ModuleOp"> {
  let summary = "Lower the transformer dialect to linalg on tensors";
  let description = [{
    Rewrites every `transformer` op into linalg, tensor, arith and math ops on tensors with the
    same meaning: `matmul` becomes `linalg.matmul` or `linalg.batch_matmul` (with reshapes when
    the weight is shared across a batch), `transpose` becomes `linalg.transpose`, elementwise ops
    become `linalg.generic` with broadcasting indexing maps, and `layer_norm` / `softmax` become
    row reductions followed by an elementwise `linalg.generic`. Needs static shapes: run
    `--transformer-shape-inference` first.

    Before:
    ```mlir
    %y = transformer.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    ```
    After:
    ```mlir
    %e = tensor.empty() : tensor<4x8xf32>
    %y = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                          affine_map<(d0, d1) -> (d1)>,
                                          affine_map<(d0, d1) -> (d0, d1)>],
                         iterator_types = ["parallel", "parallel"]}
        ins(%x, %b : tensor<4x8xf32>, tensor<8xf32>) outs(%e : tensor<4x8xf32>) {
      ^bb0(%in: f32, %in_0: f32, %out: f32):
        %s = arith.addf %in, %in_0 : f32
        linalg.yield %s : f32
    } -> tensor<4x8xf32>
    ```
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

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

def ApproximateVectorMath : Pass<"gpt-approximate-vector-math"> {
  let summary = "Replace math ops on vectors by polynomial approximations";
  let description = [{
    Rewrites `math.tanh`, `math.exp` and the other ops MLIR's polynomial approximations cover,
    where they operate on vectors, into arithmetic on the same vectors (MLIR's
    `populateMathPolynomialApproximationPatterns`, accurate to a few ulp in f32). Without it a
    vectorized GELU or softmax would be split back into one libm call per lane. Scalar math ops
    are left for libm.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def InlineAllocaScopes : Pass<"gpt-inline-alloca-scopes"> {
  let summary = "Inline memref.alloca_scope regions that allocate nothing on the stack";
  let description = [{
    `--convert-scf-to-openmp` wraps every parallel loop body in a `memref.alloca_scope`. A scope
    matters only for `memref.alloca`; upstream canonicalization keeps it whenever the body holds
    an op it cannot prove alloca-free, and once `--convert-scf-to-cf` gives the body several
    blocks the scope is invalid. This pass inlines every scope (without results) whose body has no
    `memref.alloca`, which is always safe: nothing in it lives on the stack.
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect"];
}

def StackAllocateEntryBuffers : Pass<"gpt-stack-allocate-entry-buffers", "::mlir::func::FuncOp"> {
  let summary = "Turn a function's small temporary buffers into stack allocations";
  let description = [{
    Runs right after bufferization, before deallocation is inserted. Every `memref.alloc` in a
    function's entry block with a static shape of at most `max-buffer-bytes`, while the
    function's total stays under `max-frame-bytes`, and that is never returned (nor handed to
    a loop, which could return it under another name) becomes a `memref.alloca`: part of the
    function's frame, with no malloc and free per call. This is what keeps a decode step's
    temporaries (LayerNorm outputs, heads, attention outputs) off the heap. Allocations inside
    loops are left alone: an alloca there would grow the stack on every iteration.

    Before:
    ```mlir
    %0 = memref.alloc() {alignment = 64 : i64} : memref<1x768xf32>
    ```
    After:
    ```mlir
    %0 = memref.alloca() {alignment = 64 : i64} : memref<1x768xf32>
    ```
  }];
  let options = [
    Option<"maxBufferBytes", "max-buffer-bytes", "int64_t", /*default=*/"65536",
           "Largest buffer moved to the stack">,
    Option<"maxFrameBytes", "max-frame-bytes", "int64_t", /*default=*/"1048576",
           "Most bytes of stack buffers per function">,
  ];
  let dependentDialects = ["::mlir::memref::MemRefDialect"];
}

def SelectRegisterTiles : Pass<"gpt-select-register-tiles", "::mlir::func::FuncOp"> {
  let summary = "Choose register tiles for matmuls and record them as attributes";
  let description = [{
    Marks each static `linalg.matmul` whose M is a multiple of 8 and N a multiple of 32 with
    `gpt.register_tile = [8, 32, 1]` (else, N a multiple of 32, `[1, 32, 1]`: the decode shape),
    and each static `linalg.batch_matmul` whose M and N are multiples of 8 with
    `gpt.register_tile = [1, 8, 8, 1]` (else, N a multiple of 8, `[1, 1, 8, 1]`). With
    `threads` > 1, a marked op also gets `gpt.parallel_chunks = k`, the largest of 8, 4, 2 not above
    `threads` that splits its parallel dimension evenly into whole tiles (matmul: N into k pieces
    of a multiple of the tile width; batch matmul: the batch, i.e. the heads). The decision is data in the IR:
    the Transform-dialect schedule matches these attributes, and ops left unmarked (shapes the
    tiles do not divide) stay scalar loops, so no partial tile is ever vectorized.

    Before:
    ```mlir
    %0 = linalg.matmul ins(%a, %b : tensor<16x64xf32>, tensor<64x96xf32>) outs(%c : tensor<16x96xf32>) -> tensor<16x96xf32>
    ```
    After:
    ```mlir
    %0 = linalg.matmul {gpt.register_tile = [8, 32, 1]} ins(%a, %b : tensor<16x64xf32>, tensor<64x96xf32>) outs(%c : tensor<16x96xf32>) -> tensor<16x96xf32>
    ```
  }];
  let options = [
    Option<"threads", "threads", "int64_t", /*default=*/"1", "Threads the compiled code may use">,
  ];
}

def ApplySchedule : Pass<"gpt-apply-schedule", "::mlir::ModuleOp"> {
  let summary = "Apply one of the Transform-dialect schedules built into the compiler";
  let description = [{
    Runs the `__transform_main` sequence of a schedule from `cc/passes/schedules/` (compiled into
    the binary, so the Python package needs no file paths) on the module. The same file can be
    run on its own with
    `gpt-opt --transform-preload-library=transform-library-paths=<file> --transform-interpreter`.
  }];
  let options = [
    Option<"scheduleName", "schedule", "std::string", /*default=*/"\"vectorize_matmuls\"",
           "Name of the schedule: the stem of its file in cc/passes/schedules/">,
  ];
  let dependentDialects = [
    "::mlir::scf::SCFDialect",
    "::mlir::transform::TransformDialect",
    "::mlir::vector::VectorDialect",
  ];
}

#endif // GPT_CC_PASSES_PASSES_TD
