// CPU code generation passes: from linalg on tensors to vectorized, threaded, allocation-free code
// for the CPU the module's gpt.target names (the target-independent passes are in ../common).
#ifndef GPT_CC_CODEGEN_CPU_PASSES_TD
#define GPT_CC_CODEGEN_CPU_PASSES_TD

include "mlir/Pass/PassBase.td"

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

def SetTarget : Pass<"gpt-set-target", "::mlir::ModuleOp"> {
  let summary = "Name the CPU code is generated for: write the module's gpt.target";
  let description = [{
    Writes the `gpt.target` dictionary that the CPU passes choose register tiles and instructions
    by, from a CPU name as `CompileOptions(target_cpu=...)` takes it: an LLVM CPU of the host's
    architecture (`haswell`, `znver3`, `alderlake`, `skylake-avx512`, `znver4`,
    `sapphirerapids`, ...) or `aarch64:<cpu>`, with that CPU's own features. The JIT writes the
    same attribute for the CPU it compiles for; this pass lets one FileCheck file run one input
    for several CPUs, and `--gpt-pipeline="target-cpu=..."` compile for one.

    ```mlir
    // --gpt-set-target="cpu=haswell"
    module attributes {gpt.target = {cpu = "haswell", features = ["avx2", "fma"],
        triple = "x86_64-unknown-linux-gnu", vector_bits = 256 : i64, vector_registers = 16 : i64}}
    ```
  }];
  let options = [
    Option<"cpu", "cpu", "std::string", /*default=*/"",
           "The CPU: an LLVM CPU name of the host's architecture, or aarch64:<cpu>">,
  ];
}

def LowerLaneDots : Pass<"gpt-lower-lane-dots"> {
  let summary = "Lower transformer.lane_dot_* to the target's dot-product instructions or plain arithmetic";
  let description = [{
    `transformer.lane_dot_bf16` and `transformer.lane_dot_u8i8` (the per-lane multiply-adds of
    low-precision packed matmuls, vectorized by the schedule) become, for every 16 lanes of a
    vector whose lane count is a multiple of 16, one call of the AVX-512 instruction where the
    target has it:
    - `lane_dot_bf16` with `avx512bf16`: `llvm.x86.avx512bf16.dpbf16ps.512` (`vdpbf16ps`);
    - `lane_dot_u8i8` with `avx512vnni`: `llvm.x86.avx512.vpdpbusd.512` (`vpdpbusd`).
    Without AVX512-VNNI, `lane_dot_u8i8` takes the next best the target has: with `avxvnni`
    (Alder Lake and later without AVX-512) `llvm.x86.avx512.vpdpbusd.256` per 8 lanes (`{vex}
    vpdpbusd` on ymm); with `avx512bw` (512 bits) or `avx2` (256), where the unsigned bytes are
    known to be below 128 (the block formats' 4-, 5- and 6-bit codes, bounded by the masks that
    unpack them), `vpmaddubsw` into 16-bit pair sums that cannot saturate, the sums of a chain of
    dots (each the next one's accumulator) added in 16 bits while their bound stays below 32768,
    then one `vpmaddwd` by ones per group, as llama.cpp's AVX2 dots; otherwise (q8_0's offset codes,
    up to 255) the bytes widened to 16 bits by shifts and masks and two `vpmaddwd` per piece. Both
    are exact, so bit-identical to vpdpbusd.
    Elsewhere (a CPU without any of them, a scalar or an odd-sized vector) they become the same
    arithmetic in integer and float ops: bf16 halves widened by shifts and masks and two FMAs
    (high pair first, as `vdpbf16ps` adds them); bytes extracted by shifts and four integer
    multiply-adds. The target is the module's `gpt.target` (the JIT writes it; in a test,
    `--gpt-set-target`); a module without one gets the plain arithmetic.

    The block formats unpack their codes next to those dots with a shift and a mask on i32 lanes
    whose mask is one byte repeated and keeps only bits of each byte's own (`(x >> 4) & 0x0F0F0F0F`,
    a high nibble; `(x << 3) & 0x10101010`, q5_k's fifth bits of a lane; q6_k's top bits). Where
    the target has `gfni` such a pair becomes one `llvm.x86.vgf2p8affineqb.512` per 16 lanes (with
    `avx512bw`) or `.256` per 8 (with `avx2`): a bit matrix per byte with the shift and the mask
    in it, one instruction for two. The 5-bit formats' two codes of a nibble word (its low nibbles
    or'ed with one lane's fifth bits, its high nibbles with another's) take 3 of them instead of 4
    and a shift: one moves both lanes' fifth bits at once (to bits 4 and 0), a select makes the
    low code, and the high nibbles with their fifth bit go down and up in one more. These rewrites
    apply to decode's one-row tiles only (words not broadcast to a tile's rows).

    ```mlir
    // before, on a target with avx512bf16
    %r = transformer.lane_dot_bf16 %acc, %x, %w : vector<16xi32> -> vector<16xf32>
    // after
    %a = vector.bitcast %x : vector<16xi32> to vector<32xbf16>
    %b = vector.bitcast %w : vector<16xi32> to vector<32xbf16>
    %r = llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.512"(%acc, %a, %b)
        : (vector<16xf32>, vector<32xbf16>, vector<32xbf16>) -> vector<16xf32>
    ```
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::math::MathDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def PrefetchDecodeLanes : Pass<"gpt-prefetch-decode-lanes"> {
  let summary = "Prefetch the quantized weight lanes of a decode step or a few-token step some bytes ahead";
  let description = [{
    A decode step's block-quantized matmuls read two weight panels at a time (a
    `vector.transfer_read` of `vector<2xWxiN>` over the panel dimension and the lanes) in a loop
    over the blocks of K, and stream every weight once. Where a core keeps too few misses in
    flight for its hardware prefetchers to reach the memory's rate, a software prefetch of the
    same lanes `bytes-ahead` bytes on lets it: before each such read, one `memref.prefetch`
    (locality 3: `prefetcht0`) per cache line the read covers, in both panels, at the loop's
    index advanced by ceil(bytes-ahead / the bytes of one step). Past the last block of a panel the
    address lies in the next one (the panels are contiguous), which the next piece reads: a
    prefetch never faults.

    A step of a few tokens (speculative verification, a short prompt) reads one panel at a time in
    tiles of a few rows (`vector<WxiN>` over the lanes), and streams its weights the same way: such
    a read is prefetched too, in its one panel, where at most 4 row tiles read the panel (its
    loop's parent, when the panel index does not change in it, as `--gpt-prefetch-weight-panels`
    finds row tiles: RowTiles.h). Where more do (a prefill), each tile after the first finds the panel in the cache
    and the prefetches only take issue slots: a 256-token prefill ran 11% slower with them.

    `bytes-ahead` -1 (the default) takes the module's `gpt.target`'s choice
    (decodeLanePrefetchBytes: 1 KiB on sapphirerapids, emeraldrapids and CPUs with AMX, where it
    was measured, else none);
    0 adds nothing. It matches only reads of a static, identity-layout integer memref of rank 3 or
    more whose first vector dimension (2) is the memref's first and whose second is its last (or
    whose one vector dimension is its last, of i32 lane words), in an `scf.for` from 0 by 1 whose
    induction variable is one middle index.

    ```mlir
    scf.for %s = %c0 to %c8 step %c1 {
      // added (bytes-ahead=1024, 512 bytes a step): lines of panels %p and %p + 1, block %s + 2
      memref.prefetch %w[%p, %b, %s2, %c0, %c0], read, locality<3>, data : memref<128x8x8x4x32xi32>
      ...
      %l = vector.transfer_read %w[%p, %b, %s, %c0, %c0], %z {permutation_map = (d0, d4)} : memref<128x8x8x4x32xi32>, vector<2x32xi32>
    ```
  }];
  let options = [
    Option<"bytesAhead", "bytes-ahead", "int64_t", /*default=*/"-1",
           "bytes ahead of each read to prefetch (-1: the target's choice, 0: none)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect",
  ];
}

def PrefetchWeightPanels : Pass<"gpt-prefetch-weight-panels"> {
  let summary = "Prefetch the next weight panel while a few-row matmul runs over the current one";
  let description = [{
    A packed matmul runs panel by panel: for each panel of the weight (K rows x W columns,
    contiguous), every register tile of rows walks the panel's K rows. With a few row tiles (the
    batched step's 16 tokens: two tiles of 8 rows) the first tile streams the panel from memory,
    waiting on it, and the second runs from cache, asking memory for nothing: the loads come in
    bursts that memory bandwidth cannot keep up with, and then stop.

    This pass spreads the next panel's reads over the current panel's row tiles instead: in the
    K loop of row tile `t`, step `k` prefetches cache line `t * K + k` of the next panel
    (`memref.prefetch` with locality 2: `prefetcht1`, a hint for the L2 cache), so the first L
    tiles (L: cache lines per panel row) together fetch all of it, one line per step, at a steady
    rate, and each panel is already in cache when its turn comes. With fewer tiles than L, each
    step fetches L / tiles lines. The last panel prefetches itself (the index is clamped),
    harmlessly.

    It matches the loop nest the packed-matmul schedule leaves after bufferization: an `scf.for`
    from 0 to K by 1 (the K loop) holding a `vector.transfer_read` of a static rank-3 memref
    [P, K, W] at [panel, k, 0]. Its parent loop is the loop over row tiles when it runs from 0 by
    a constant step and the panel index does not change in it; otherwise (the parent is the loop
    over panels) the matmul has a single row tile, whose loop canonicalization removed. Only
    matmuls of `min-tiles` to `max-tiles` row tiles get prefetches: decode (one tile) streams its
    weights faster without them (7% slower with them, measured), and prefill's many tiles reuse
    each panel long enough. Runs after buffer deallocation, which rejects `memref.prefetch` (no
    memory effects interface in MLIR 19).

    ```mlir
    scf.for %m = %c0 to %c16 step %c8 {              // two row tiles
      scf.for %k = %c0 to %c768 step %c1 iter_args(...) {
        // added: line %m / 8 * 768 + %k of panel min(%p + 1, 71)
        memref.prefetch %w[%next, %row, %col], read, locality<2>, data : memref<72x768x32xf32>
        %b = vector.transfer_read %w[%p, %k, %c0], ... : memref<72x768x32xf32>, vector<32xf32>
    ```
  }];
  let options = [
    Option<"minTiles", "min-tiles", "int64_t", /*default=*/"2", "fewest row tiles of a matmul it prefetches for">,
    Option<"maxTiles", "max-tiles", "int64_t", /*default=*/"4", "most row tiles of a matmul it prefetches for">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
  ];
}

def BarePointerCalls : Pass<"gpt-bare-pointer-calls", "::mlir::ModuleOp"> {
  let summary = "Pass memrefs of static shape to private functions as bare pointers";
  let description = [{
    Marks `llvm.bareptr` every private function that only direct calls use and whose arguments
    and results are scalars or memrefs of static shape and identity layout. `convert-func-to-llvm`
    then passes each such memref as its aligned pointer, as the type alone gives its sizes and
    strides, instead of a descriptor of 3 + 2 x rank scalars.

    The entry points call a layer's block function once per layer with that layer's weights and
    caches. As descriptors, a 1.7B model's decode step passed 120 scalars per call, about 114 of
    them on the stack: 24 calls gave the entry one basic block of 2,700 stores, and LLVM's
    instruction selection and machine scheduling, quadratic in a block's memory operations, spent
    most of the program's compile time there. As pointers a call passes 16 values. Public
    functions (the entry points and their C wrappers) keep their descriptors, which the runtime
    fills.
  }];
}

def ShareLoopsDynamically : Pass<"gpt-share-loops-dynamically"> {
  let summary = "Hand out every OpenMP worksharing loop's iterations on demand, from a shared counter";
  let description = [{
    Runs after `--convert-scf-to-openmp`, whose `omp.wsloop`s have no schedule (static: thread t
    takes the t-th contiguous share of the iterations). The loops are the schedule's pieces of a
    matmul or elementwise op (`gpt.parallel_chunks`, several per thread) and the attention's heads.
    With static shares every op waited for its slowest thread: profiled on a 2-vCPU VM, the
    calling thread of a decode step ran its equal share of each matmul about 20% longer than the
    other thread, which spun in the barrier for that time.

    Each loop becomes one in which a thread takes the next iteration number from a counter with
    an atomic add, until the numbers run out: the counter is an i64 stack slot of the function
    (64-byte aligned), set to 0 just before the `omp.parallel` forks. `schedule(dynamic)` would do
    the same through libomp's dispatch, which takes more steps per iteration, and Debian's libomp
    (built with KMP_DEBUG) formats a trace message with `vsnprintf` on every one of them: about 4%
    of a 1.7B model's decode step. A loop this cannot rewrite (a schedule, reduction, linear or
    ordered clause, a nest of several blocks, a nested parallel region) gets `schedule(dynamic)`
    unless it has a schedule. Which thread computes an iteration does not change what it
    computes: the results are the same bits.

    Before:
    ```mlir
    omp.parallel {
      omp.wsloop {
        omp.loop_nest (%i) : index = (%c0) to (%c8) step (%c1) { body(%i); omp.yield }
      }
    }
    ```
    After:
    ```mlir
    %counter = memref.alloca() {alignment = 64 : i64} : memref<i64>   // function entry
    memref.store %c0_i64, %counter[] : memref<i64>
    omp.parallel {
      scf.while : () -> () {
        %n = memref.atomic_rmw addi %c1_i64, %counter[] : (i64, memref<i64>) -> i64
        %more = arith.cmpi slt, %n, %c8_i64 : i64
        scf.condition(%more) %n : i64
      } do {
      ^bb0(%n: i64):
        %i = ...lower bound + index_cast(%n) * step...
        body(%i)
        scf.yield
      }
    }
    ```
  }];
  let dependentDialects = ["::mlir::omp::OpenMPDialect", "::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect"];
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
    type (`memref.view`). When `max-frame-bytes` cannot hold them all, buffers allocated in loops
    take the frame first, smallest first (each would cost a malloc and free per iteration), and
    the entry block's after them. This is what keeps a decode step free of heap allocation: LayerNorm
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

def FreeBuffersAfterLastUse : Pass<"gpt-free-buffers-after-last-use", "::mlir::func::FuncOp"> {
  let summary = "Move each heap buffer's dealloc to right after its last use";
  let description = [{
    Runs right after the buffer deallocation pipeline, which frees a buffer at the end of the
    block that allocates it: a layer's block function held every heap temporary of the layer
    (the attention's rows, the FFN's hidden rows: 157 MiB at a 512-token prefill of Llama-3.1-8B's
    widths) until it returned. This pass moves a `memref.dealloc` of a `memref.alloc` in the same
    block to right after the last op of that block that uses the buffer or a view of it (an op
    using it inside its regions counts as the op itself), so a temporary is freed once nothing
    reads it, and the next temporary of its size takes the same block from the runtime's
    workspace (cc/runtime/support/Workspace.cpp) while it is still in cache. A buffer whose
    address leaves as an integer (`memref.extract_aligned_pointer_as_index`) keeps its dealloc.

    Before:
    ```mlir
    %a = memref.alloc() : memref<512x4096xf32>
    linalg.fill ins(%cst : f32) outs(%a : memref<512x4096xf32>)
    %b = memref.alloc() : memref<512x4096xf32>
    linalg.copy ins(%a : memref<512x4096xf32>) outs(%b : memref<512x4096xf32>)
    "use"(%b) : (memref<512x4096xf32>) -> ()
    memref.dealloc %a : memref<512x4096xf32>
    memref.dealloc %b : memref<512x4096xf32>
    ```
    After: `memref.dealloc %a` right after the `linalg.copy`, `memref.dealloc %b` after the use.
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect"];
}

def SelectRegisterTiles : Pass<"gpt-select-register-tiles", "::mlir::func::FuncOp"> {
  let summary = "Choose register tiles, thread pieces and fusions, and record them as attributes";
  let description = [{
    The decisions of the `vectorize_matmuls` schedule, written into the IR so that the schedule
    only reads attributes (through the `transform.gpt.*` ops) and `gpt-opt` shows what was chosen.
    Only static shapes that the tiles divide are marked: nothing unmarked is vectorized, so no
    partial tile exists. The attributes and their accessors are in cc/codegen/common/CodegenAttributes.h;
    the sizes come from cc/TargetParameters.h (tileParameters() of the module's `gpt.target`, as
    the JIT or `--gpt-set-target` writes it; without one, AVX-512's 32 registers of 512 bits). A packed matmul's columns are its weight's panel
    width (the builder's, from the same parameters): the rows are sized for that width.

    - `gpt.register_tile`, from a table, largest tile first: packed matmuls (generics marked
      `gpt.packed_matmul`, loops M, panel, column, K) `[8, 1, 32, 1]` down to `[1, 1, 32, 1]`
      (decode) for 32 registers of 512 bits, `[2, 1, 32, 1]` down for AVX2's 16 of 256 (the rows
      whose accumulators fill half the register file), with `gpt.tile_interchange = [1, 0, 2, 3]` (panel loop outermost);
      block-quantized ones (their partial sums marked `gpt.block_partials`) half those rows, and
      on AVX2 without VNNI, where that is one row, `[4, 1, 32, 1]` or `[2, 1, 32, 1]` for blocks of 32 whose
      codes are below 128 (q4_0, q4_1, q5_0, q5_1: the bound `--gpt-lower-lane-dots` reads,
      cc/codegen/cpu/CodeByteBounds.h), `[2, 1, 32, 1]` for the K-quants' super-blocks, and one
      row for q8_0's offset codes;
      `linalg.matmul` (attention's blocks among them) `[8, 32, 1]` down to `[1, 8, 1]`;
      `linalg.batch_matmul` `[1, 8, 8, 1]` or `[1, 1, 8, 1]`; elementwise generics (rank 2 or 3,
      no gather) one vector of 32, 16 or 8 lanes of their innermost dimension.
    - `gpt.row_reduction_tile = w` on rank-2 row reductions that end in an `addf`/`maximumf` of
      the accumulator: partial results in a vector of `w` lanes.
    - Epilogue fusion: a packed matmul whose only user is an elementwise generic of its shape
      (reading it through an identity map as input 0 or 1) gets no tile of its own; the generic
      gets `gpt.epilogue_tile` (with `gpt.tile_interchange`), `gpt.epilogue_operand` and
      `gpt.epilogue_chunks`.
    - With `threads` > 1, `gpt.parallel_chunks = [0, ..., k]` (pieces per loop) on ops of at
      least 2^18 iterations outside any scf.forall: k is the largest of 8, 4, 2 not above
      `threads` that splits the op's split dimension (matmul N, packed matmul and elementwise
      dim 1, batch matmul the heads) into whole tiles, times 4 or 2 pieces per thread where
      whole tiles allow (`--gpt-share-loops-dynamically` hands them out on demand). An op fused
      into its epilogue is split likewise by panel, its pieces recorded on the epilogue
      (`gpt.epilogue_chunks`).
    - AMX: where the module's `gpt.target` has `amx-bf16`, a bf16 packed matmul (body
      `transformer.lane_dot_bf16`) with a multiple of 16 rows (prefill, not decode) gets
      `gpt.amx_tile = [rows, columns, k words]` and `gpt.amx_chunks = k` instead of a register tile
      or an epilogue fusion: blocks of 32 (or 16) rows x one 32-wide panel in 16 x 16 f32 tiles,
      accumulated over up to 128 K words (8 tile steps) between trips through memory, the panels
      split into k pieces for threads. Where it has `amx-int8`, likewise the scaled sum over
      blocks of a q8_0 packed matmul whose block partial sums multiply signed codes by signed
      codes (`lane_dot_u8i8` of `w xor 0x80808080`), with a multiple of 16 rows: blocks of 32 (or
      16) rows x one panel of 16 x 16 i32 tiles, one block of K (8 words) per tile step,
      `k words` = 8 x the blocks (up to 4) whose sums go through the f32 totals together; its
      partial sums keep no tile and stay a plain generic. `--gpt-lower-amx-matmuls` lowers them
      after bufferization.

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

def LowerAmxMatmuls : Pass<"gpt-lower-amx-matmuls", "::mlir::func::FuncOp"> {
  let summary = "Lower bf16 and q8_0 packed matmuls marked gpt.amx_tile, on buffers, to loops over AMX tiles";
  let description = [{
    A `linalg.generic` carrying `gpt.amx_tile = [R, C, S]` and `gpt.amx_chunks = k` (from
    `--gpt-select-register-tiles`, on a target with `amx-bf16`), once bufferized: activation lanes
    A [M, K/2] i32, weight lanes B [N/P, K/2, P] i32 (cc/kernels/WeightFormats.h) and the output
    [M, N/P, P] f32, which it adds to. Both lane layouts hold in each 32-bit word the two bf16 of
    rows r and r + K/2 of one row (A) or column (B): the pairs `tdpbf16ps` multiplies, so a 16 x 16
    word block of either is one tile (`vector<16x32xbf16>`) as it lies in memory, no copy.

    It becomes loops over the panels (an `scf.forall` of k pieces when k > 1), the C-wide column
    blocks of a panel, the R-row blocks and K in steps of S words. Each step loads the (R/16) x
    (C/16) accumulator tiles from the output, runs S/16 tile steps of `amx.tile_load` (R/16 tiles
    of A, C/16 of B) and `amx.tile_mulf` on them, and stores the accumulators back: MLIR 19
    cannot carry a tile through a loop's arguments, so they go through memory (L1) every S words.
    The buffers are viewed (`memref.reinterpret_cast`) as [rows, row stride], because MLIR 19's
    AMX lowering takes a tile's row stride from the size of the memref's last dim. Lowered by
    `--convert-vector-to-llvm=enable-amx`; the code needs a CPU with AMX and, on Linux, the
    process's permission for tile data (the runtime asks for it, cc/runtime/JitTarget.cpp).
    An op it cannot lower (a buffer without static strides) is an error.

    q8_0 (`amx-int8`): the marked op is the scaled sum over blocks of 32, reading block sums
    [M, N/P, K/32, P] i32 that a `gpt.block_partials` generic computes from activation lanes
    [M, K/32, 8] i32 and weight lanes [N/P, K/32, 8, P] i32; both ops become one loop nest, and
    the block sums' buffer goes. The activation codes and the weight codes are signed bytes in the
    same lane layout (4 K rows of one row or column per word), so a 16-row x 8-word block of the
    activations (`vector<16x32xi8>`) and the block's 8 x 16-word rows of the weights
    (`vector<8x64xi8>`) are tiles as they lie, and `amx.tile_muli` (no zext: `tdpbssd`) gives
    the exact i32 sums without vpdpbusd's +128 offset and its compensation. Per block: (R/16) x
    (C/16) accumulators loaded from a block of zeros (amx.tile_zero is Pure: CSE and LICM would
    merge and hoist it), multiplied, stored to a stack buffer; vector code then adds
    `float(sum) * (d_w * d_x)` to the block's f32 totals with `math.fma`, as the vector path
    does, so the results are the same bits. The totals (a stack block, loaded once per S/8
    blocks) start from zeros when the output is zero-filled (and the fill goes), else from the
    output, and are written back to it at the end of K. Panels are taken 8 at a time per row
    block, so the row block's activations stay in L1 across them.

    Before (q8_0, M = 32, K = 256, N = 64; bodies abridged):
    ```mlir
    linalg.generic {...} ins(%x, %w : memref<32x8x8xi32>, memref<2x8x8x32xi32>) outs(%sums : memref<32x2x8x32xi32>)
        attrs = {gpt.block_partials} { ... transformer.lane_dot_u8i8 ... }
    linalg.generic {...} ins(%sums, %dw, %dx, %cx : memref<32x2x8x32xi32>, memref<2x8x32xf16>, memref<32x8xf32>, memref<32x8xf32>)
        outs(%c : memref<32x2x32xf32>) attrs = {gpt.packed_matmul, gpt.amx_tile = [32, 32, 32], gpt.amx_chunks = 1 : i64} { ... }
    ```
    After (abridged):
    ```mlir
    scf.for %k = %c0 to %c8 step %c4 {
      %x = amx.tile_load %a[%m, %k8] : memref<32x64xi32, strided<[64, 1]>> into vector<16x32xi8>
      %w = amx.tile_load %b[%row, %c0] : memref<128x32xi32, strided<[32, 1]>> into vector<8x64xi8>
      %z = amx.tile_load %zeros[%c0, %c0] : memref<16x64xi32> into vector<16x16xi32>
      %s = amx.tile_muli %x, %w, %z : vector<16x32xi8>, vector<8x64xi8>, vector<16x16xi32>
      amx.tile_store %sums[%r, %c0], %s : memref<128x48xi32>, vector<16x16xi32>
      ...
      scf.for %i = %c0 to %c32 step %c1 {
        %t = vector.load %totals[%i, %c0] : memref<32x32xf32>, vector<16xf32>
        %f = arith.sitofp %sum : vector<16xi32> to vector<16xf32>
        %t1 = math.fma %f, %scale, %t : vector<16xf32>
        ...
    ```

    Before (M = 32, K = 256, N = 64):
    ```mlir
    linalg.generic {indexing_maps = [#A, #B, #C], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%a, %b : memref<32x128xi32>, memref<2x128x32xi32>) outs(%c : memref<32x2x32xf32>)
        attrs = {gpt.packed_matmul, gpt.amx_tile = [32, 32, 128], gpt.amx_chunks = 1 : i64} {
    ^bb0(%x: i32, %w: i32, %acc: f32):
      %d = transformer.lane_dot_bf16 %acc, %x, %w : i32 -> f32
      linalg.yield %d : f32
    }
    ```
    After (abridged):
    ```mlir
    scf.for %p = %c0 to %c2 step %c1 {
      scf.for %m = %c0 to %c32 step %c32 {
        scf.for %k = %c0 to %c128 step %c128 {
          %acc = amx.tile_load %out[%m, %col] : memref<32x64xf32, strided<[64, 1]>> into vector<16x16xf32>
          %x = amx.tile_load %a[%m, %k] : memref<32x128xi32, strided<[128, 1]>> into vector<16x32xbf16>
          %w = amx.tile_load %b[%row, %c0] : memref<256x32xi32, strided<[32, 1]>> into vector<16x32xbf16>
          %s = amx.tile_mulf %x, %w, %acc : vector<16x32xbf16>, vector<16x32xbf16>, vector<16x16xf32>
          ...
          amx.tile_store %out[%m, %col], %s : memref<32x64xf32, strided<[64, 1]>>, vector<16x16xf32>
    ```
  }];
  let dependentDialects = [
    "::mlir::amx::AMXDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def ApplySchedule : Pass<"gpt-apply-schedule", "::mlir::ModuleOp"> {
  let summary = "Apply one of the Transform-dialect schedules built into the compiler";
  let description = [{
    Runs the `__transform_main` sequence of a schedule from `cc/codegen/cpu/schedules/` (compiled into
    the binary, so the Python package needs no file paths) on the module. The same file can be
    run on its own with
    `gpt-opt --transform-preload-library=transform-library-paths=<file> --transform-interpreter`.
  }];
  let options = [
    Option<"scheduleName", "schedule", "std::string", /*default=*/"\"vectorize_matmuls\"",
           "Name of the schedule: the stem of its file in cc/codegen/cpu/schedules/">,
  ];
  let dependentDialects = [
    "::mlir::scf::SCFDialect",
    "::mlir::transform::TransformDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def NarrowParallelCaptures : Pass<"gpt-narrow-parallel-captures", "::mlir::ModuleOp"> {
  let summary = "Let each OpenMP parallel region capture the scalars it reads, not whole memref descriptors";
  let description = [{
    Runs last in the LLVM stage, on the LLVM dialect. Translation outlines each `omp.parallel`
    into a function and passes it every value the region uses that is defined outside it. A
    region reads a memref through `llvm.extractvalue` of its descriptor, so the whole descriptor
    (3 + 2 x rank words, most of them constant sizes and strides) was captured: the parent copied
    each descriptor into a stack slot of its own, field by field, before every fork, and the
    region loaded them back. A 16-token prefill of a Q4_K_M model spent more than half of its
    block function's 3,200 optimized LLVM instructions on those copies (1,970 without them), and
    LLVM's optimization and code generation of them about 5% of the program's compile.

    Each `llvm.extractvalue` in a region whose aggregate is defined outside it moves before the
    `omp.parallel` (one per aggregate and position), folded where the descriptor was built by
    `llvm.insertvalue`; each constant the region uses from outside (`llvm.mlir.constant`,
    `llvm.mlir.zero`, `llvm.mlir.undef`, `llvm.mlir.poison`, `llvm.mlir.addressof`) is cloned into
    the region's entry block; what nothing outside uses then (a descriptor's `llvm.insertvalue`
    chain, a constant) is erased. The region captures the pointers and the non-constant scalars
    it reads. The same values are computed, only elsewhere: the results are the same bits.

    Before:
    ```mlir
    %d = llvm.insertvalue %size, %partial[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    omp.parallel {
      %p = llvm.extractvalue %d[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
      ...
    }
    ```
    After:
    ```mlir
    %p = llvm.extractvalue %d[1] : ...   // or the pointer %d was built from
    omp.parallel {
      ...   // uses %p
    }
    ```
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect", "::mlir::omp::OpenMPDialect"];
}

def VerifyVectorized : Pass<"gpt-verify-vectorized", "::mlir::func::FuncOp"> {
  let summary = "Fail on a linalg op still marked for vectorization after the schedule";
  let description = [{
    The schedule vectorizes every op that --gpt-select-register-tiles marked with
    `gpt.register_tile`, `gpt.row_reduction_tile` or `gpt.epilogue_tile` (tiling replaces it, and
    vectorizing replaces the tile). A linalg op that still carries one of them was skipped, and
    would run as scalar loops: this pass reports it as an error naming the attribute.

    Input (an error: the matmul was marked but never vectorized):
    ```mlir
    %0 = linalg.matmul {gpt.register_tile = [8, 32, 1]} ins(%a, %b : tensor<16x64xf32>, tensor<64x96xf32>) outs(%c : tensor<16x96xf32>) -> tensor<16x96xf32>
    ```
  }];
}

#endif // GPT_CC_CODEGEN_CPU_PASSES_TD
