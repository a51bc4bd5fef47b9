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
    row reductions followed by an elementwise `linalg.generic`. `packed_matmul` becomes a
    `linalg.generic` over (m, panel, column, k) marked `gpt.packed_matmul`, viewed as [M, N] by
    a `tensor.collapse_shape`. `causal_attention` becomes a fused loop nest (flash-attention
    style): an `scf.forall` over heads, blocks of queries, and a loop over blocks of keys with
    an online softmax whose upper bound is the last key the query block may see, so blocks the
    causal mask removes entirely are never visited and no [Tq, Tk] score tensor exists. Its
    scores are a matmul by each key block transposed once, or for a single query (decode) a dot
    product per key. `split_heads` and `merge_heads` are transposes, except around attention:
    attention reads each head's rows in place from the [T, H, d] view of a projection and writes
    its result token-major for `merge_heads` to collapse, and the head transposes are erased.
    Needs static shapes: run `--transformer-shape-inference` first.

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
  let summary = "Replace math ops on vectors by polynomial approximations; relax maxima";
  let description = [{
    Rewrites `math.tanh`, `math.exp` and the other ops MLIR's polynomial approximations cover,
    where they operate on vectors, into arithmetic on the same vectors (MLIR's
    `populateMathPolynomialApproximationPatterns`, accurate to a few ulp in f32). Without it a
    vectorized GELU or softmax would be split back into one libm call per lane. Scalar math ops
    are left for libm.

    Maxima (`arith.maximumf` on scalars or vectors, `vector.reduction <maximumf>`) get the
    `nsz` fast-math flag: max(-0, +0) may give either zero, which softmax's row maximum (subtracted
    from every score) and ReLU cannot tell apart, and LLVM then drops its sign test and blend
    per step. NaN still propagates.
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

def StackAllocateTemporaries : Pass<"gpt-stack-allocate-temporaries", "::mlir::func::FuncOp"> {
  let summary = "Turn a function's small temporary buffers into stack buffers in its frame";
  let description = [{
    Runs right after bufferization and after `--gpt-results-to-out-params`, before deallocation
    is inserted. Every `memref.alloc` with a static shape of at most `max-buffer-bytes`, while
    the function's total stays under `max-frame-bytes`, that never outlives the region that
    allocates it (it is not returned, not yielded, not handed to an op that could hand it back
    under another name) becomes a 64-byte aligned `memref.alloca` in the function's entry block:
    part of the frame, with no malloc and free per call. An allocation inside sequential loops
    (`scf.for`, `scf.if`) is hoisted there too: one buffer serves every iteration, since no
    iteration's buffer outlives it. Inside an `scf.forall` with a static trip count (the
    attention's loop over heads, whose iterations run at once on OpenMP threads) each iteration
    gets a cache-line aligned slot of one stack buffer, which it views with the allocation's
    type (`memref.view`). This is what keeps a decode step free of heap allocation: LayerNorm
    outputs, heads, the attention's running state and the buffers a caller passes for a callee's
    results.

    Before:
    ```mlir
    scf.for %i = %c0 to %c4 step %c1 {
      %0 = memref.alloc() {alignment = 64 : i64} : memref<1xf32>
      ...
    }
    ```
    After:
    ```mlir
    %0 = memref.alloca() {alignment = 64 : i64} : memref<1xf32>
    scf.for %i = %c0 to %c4 step %c1 {
      ...
    }
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
  let summary = "Choose register tiles, thread pieces and fusions, and record them as attributes";
  let description = [{
    The decisions of the `vectorize_matmuls` schedule, written into the IR so that the schedule
    only matches attributes and `gpt-opt` shows what was chosen. Only static shapes that the
    tiles divide are marked: nothing unmarked is vectorized, so no partial tile exists.

    - `gpt.register_tile`, from a table, largest tile first: packed matmuls (generics marked
      `gpt.packed_matmul`, loops M, panel, column, K) `[8, 1, 32, 1]` or `[1, 1, 32, 1]`
      (decode); `linalg.matmul` (attention's blocks among them) and `linalg.matmul_transpose_b`
      `[8, 32, 1]` down to
      `[1, 8, 1]`; `linalg.batch_matmul` `[1, 8, 8, 1]` or `[1, 1, 8, 1]`; elementwise generics
      (rank 2 or 3, no gather) one vector of 32, 16 or 8 lanes of their innermost dimension.
    - `gpt.row_reduction_tile = w` on rank-2 row reductions that end in an `addf`/`maximumf` of
      the accumulator: partial results in a vector of `w` lanes.
    - Epilogue fusion: a packed matmul whose only user is an elementwise generic of its shape
      (reading it through an identity map as input 0 or 1) gets `gpt.epilogue_fused` instead
      of a tile; the generic gets `gpt.epilogue_tile`, `gpt.epilogue_operand` and
      `gpt.epilogue_chunks`.
    - With `threads` > 1, `gpt.parallel_chunks = k` on ops of at least 2^18 iterations outside
      any scf.forall: the largest of 8, 4, 2 not above `threads` that splits the op's split
      dimension (matmul N, packed matmul and elementwise dim 1, batch matmul the heads) into
      whole tiles.

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
