// Transform-dialect schedule of the `vectorized` pipeline: splits ops across threads, register-tiles
// and vectorizes them as --gpt-select-register-tiles marked them, keeping each accumulator tile in
// vector registers across the K loop. Only marked ops are touched: vectorizing whole untiled ops
// would build huge vectors. The sizes are not written here: the `transform.gpt.*` ops
// (cc/codegen/common/TransformOps.td) read each op's own `gpt.*` attributes (cc/codegen/common/CodegenAttributes.h),
// so one block serves every tile shape of the table in cc/codegen/cpu/SelectRegisterTiles.cpp.
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    // Epilogue fusion: a packed matmul whose only user is an elementwise generic (its bias add,
    // GELU, residual add) is computed inside that generic's loops, one register tile at a time:
    // the generic is tiled by `gpt.epilogue_tile` ([M rows, 1 panel, 32 columns], panel loop
    // outermost), the matmul and its zero fill are fused into each tile and the matmul is tiled
    // along K, one step at a time. After vectorization the accumulator goes straight from the K loop through the
    // epilogue's arithmetic and is written once. The matmul's K loop (block and index in block, for
    // a block-quantized weight) steps by `gpt.reduction_step`. One thread:
    %epilogues = transform.structured.match ops{["linalg.generic"]} attributes{gpt.epilogue_chunks = 1} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %epilogues : !transform.any_op {
    ^bb0(%epilogue: !transform.any_op):
      %matmul, %fill = transform.gpt.get_epilogue_matmul %epilogue
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %tile, %loops = transform.gpt.tile_by_attribute %epilogue "gpt.epilogue_tile"
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %panels, %rows, %columns = transform.split_handle %loops
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
      %fusedMatmul, %rows2 = transform.gpt.fuse_into_loop %matmul into %rows
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fusedFill, %rows3 = transform.gpt.fuse_into_loop %fill into %rows2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulTile, %k = transform.gpt.tile_by_attribute %fusedMatmul "gpt.reduction_step"
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %plainMatmulTile = transform.gpt.vectorize_block_matmul %matmulTile : (!transform.any_op) -> !transform.any_op
      transform.structured.vectorize %fusedFill : !transform.any_op
      transform.structured.vectorize %plainMatmulTile : !transform.any_op
      transform.structured.vectorize %tile : !transform.any_op
    }
    // Threads: the epilogues left (the one-piece ones above are vectorized and gone) are first
    // split into their `gpt.epilogue_chunks` pieces along the panels (an scf.forall), with the
    // matmul and its fill fused into each piece, then tiled as above.
    %splitEpilogues = transform.gpt.match_attribute "gpt.epilogue_chunks" in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %splitEpilogues : !transform.any_op {
    ^bb0(%epilogue: !transform.any_op):
      %matmul, %fill = transform.gpt.get_epilogue_matmul %epilogue
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %chunk, %forall = transform.gpt.split_for_threads %epilogue
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulChunk, %forall2 = transform.gpt.fuse_into_loop %matmul into %forall
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fillChunk, %forall3 = transform.gpt.fuse_into_loop %fill into %forall2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %tile, %loops = transform.gpt.tile_by_attribute %chunk "gpt.epilogue_tile"
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %panels, %rows, %columns = transform.split_handle %loops
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
      %fusedMatmul, %rows2 = transform.gpt.fuse_into_loop %matmulChunk into %rows
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fusedFill, %rows3 = transform.gpt.fuse_into_loop %fillChunk into %rows2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulTile, %k = transform.gpt.tile_by_attribute %fusedMatmul "gpt.reduction_step"
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %plainMatmulTile = transform.gpt.vectorize_block_matmul %matmulTile : (!transform.any_op) -> !transform.any_op
      transform.structured.vectorize %fusedFill : !transform.any_op
      transform.structured.vectorize %plainMatmulTile : !transform.any_op
      transform.structured.vectorize %tile : !transform.any_op
    }
    // Threads: ops marked `gpt.parallel_chunks` (pieces per loop: matmul N, packed matmul panels,
    // elementwise dim 1, batch matmul heads) are split into that many contiguous pieces, one
    // scf.forall iteration each, which become an OpenMP loop after bufferization. The pieces keep
    // the op's attributes, so the register tiling below applies inside each.
    %split = transform.gpt.match_attribute "gpt.parallel_chunks" in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %split : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %chunk, %forall = transform.gpt.split_for_threads %op : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    }
    // Register tiles: every op marked `gpt.register_tile` is tiled by it and vectorized. Packed
    // matmuls [8, 1, 32, 1] (loops M, panel, column, K; panel loop outermost): an 8x32 f32
    // accumulator is 16 zmm registers, each K step 2 vector loads of the panel, 8 broadcasts of A
    // and 16 FMAs. Plain matmuls [8, 32, 1] likewise, narrower for attention's small heads; one
    // row for decode. A block-quantized matmul's tile is vectorized by
    // transform.gpt.vectorize_block_matmul. Elementwise generics: one vector of the innermost dim per step, so GELU,
    // bias and residual adds, LayerNorm's normalization and softmax's exp run on whole vectors.
    %tiled = transform.gpt.match_attribute "gpt.register_tile" in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %tiled : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %tile, %loops = transform.gpt.tile_by_attribute %op "gpt.register_tile"
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %plainTile = transform.gpt.vectorize_block_matmul %tile : (!transform.any_op) -> !transform.any_op
      transform.structured.vectorize %plainTile : !transform.any_op
    }
    // Row reductions (LayerNorm's statistics, attention's row max and sum): one row at a time,
    // `gpt.row_reduction_tile` partial results in a vector across the row (0 or -inf to start,
    // the combiner's neutral element), reduced to one value at the row's end.
    %reductions = transform.gpt.match_attribute "gpt.row_reduction_tile" in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %reductions : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %row, %rows = transform.structured.tile_using_for %op tile_sizes [1, 0]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %init, %partial, %combine, %loop = transform.gpt.tile_reduction_by_attribute %row
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %init : !transform.any_op
      transform.structured.vectorize %partial : !transform.any_op
      transform.structured.vectorize %combine : !transform.any_op
    }
    %funcs = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    // reduction_to_contract must run before canonicalization, or the unit-dim reductions fold
    // into scalar adds and the contraction is lost to about 1500 scalar insert/extract ops.
    // elementwise_on_splats undoes what its reordering does to a row's broadcast statistic
    // (cc/codegen/common/ElementwiseOnSplats.h).
    transform.apply_patterns to %funcs {
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.gpt.elementwise_on_splats
    } : !transform.any_op
    transform.apply_patterns to %funcs {
      transform.apply_patterns.canonicalization
      transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers
    } : !transform.any_op
    // Moves the accumulator's read/write out of the K loop, so it stays in registers.
    %hoisted = transform.apply_registered_pass "loop-invariant-subset-hoisting" to %funcs
        : (!transform.any_op) -> !transform.any_op
    transform.apply_cse to %hoisted : !transform.any_op
    // No split_transfer_full_partial: the tiles above leave every transfer in bounds (the LLVM IR
    // of 77 programs, every format, level, thread count and entry point, was identical without
    // it), and on an out-of-bounds transfer of one row of a rank-2 memref MLIR 19's pattern never
    // converges (tests/fuzz/regressions/schedule_split_transfer_never_converges.mlir).
    transform.apply_patterns to %hoisted {
      transform.apply_patterns.vector.lower_contraction lowering_strategy = outerproduct
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.lower_multi_reduction lowering_strategy = innerreduction
      transform.apply_patterns.vector.transfer_to_scf max_transfer_rank = 1 full_unroll = true
      transform.apply_patterns.vector.lower_transfer max_transfer_rank = 1
      transform.apply_patterns.vector.lower_shape_cast
      transform.apply_patterns.vector.lower_transpose lowering_strategy = shuffle_1d
      transform.apply_patterns.vector.cast_away_vector_leading_one_dim
    } : !transform.any_op
    transform.yield
  }
}
