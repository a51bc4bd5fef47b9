// Transform-dialect schedule of the `vectorized` pipeline: splits the matmuls across threads and
// register-tiles and vectorizes them, as --gpt-select-register-tiles marked them, keeping each accumulator tile in vector
// registers across the K loop (MLIR19_FACTS.md sections 3 and 4). Only marked ops are touched:
// vectorizing whole untiled ops would build huge vectors.
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    // Epilogue fusion: a packed matmul whose only user is an elementwise generic (its bias add,
    // GELU, residual add) is computed inside that generic's loops, one register tile at a time:
    // the generic is split into `gpt.epilogue_chunks` pieces for threads (an scf.forall) and
    // tiled [M, 1 panel, 32 columns] with the panel loop outermost; the matmul and its zero fill
    // are fused into each tile and the matmul tiled along K. After vectorization the 8x32
    // accumulator goes straight from the K loop through the epilogue's arithmetic and is
    // written once. `gpt.epilogue_operand` says which input of the generic is the matmul.
    %epilogues8x0x1 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.epilogue_tile = [8, 1, 32], gpt.epilogue_operand = 0, gpt.epilogue_chunks = 1} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %epilogues8x0x1 : !transform.any_op {
    ^bb0(%epilogue: !transform.any_op):
      %matmul = transform.get_producer_of_operand %epilogue[0] : (!transform.any_op) -> !transform.any_op
      %fill = transform.get_producer_of_operand %matmul[2] : (!transform.any_op) -> !transform.any_op
      %tile, %panels, %rows, %columns = transform.structured.tile_using_for %epilogue tile_sizes [8, 1, 32] interchange = [1, 0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      %fusedMatmul, %rows2 = transform.structured.fuse_into_containing_op %matmul into %rows
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fusedFill, %rows3 = transform.structured.fuse_into_containing_op %fill into %rows2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulTile, %k = transform.structured.tile_using_for %fusedMatmul tile_sizes [0, 0, 0, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      transform.structured.vectorize %fusedFill : !transform.any_op
      transform.structured.vectorize %matmulTile : !transform.any_op
      transform.structured.vectorize %tile : !transform.any_op
    }
    %epilogues8x0x2 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.epilogue_tile = [8, 1, 32], gpt.epilogue_operand = 0, gpt.epilogue_chunks = 2} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %epilogues8x0x2 : !transform.any_op {
    ^bb0(%epilogue: !transform.any_op):
      %matmul = transform.get_producer_of_operand %epilogue[0] : (!transform.any_op) -> !transform.any_op
      %fill = transform.get_producer_of_operand %matmul[2] : (!transform.any_op) -> !transform.any_op
      %chunk, %forall = transform.structured.tile_using_forall %epilogue num_threads [0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulChunk, %forall2 = transform.structured.fuse_into_containing_op %matmul into %forall
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fillChunk, %forall3 = transform.structured.fuse_into_containing_op %fill into %forall2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %tile, %panels, %rows, %columns = transform.structured.tile_using_for %chunk tile_sizes [8, 1, 32] interchange = [1, 0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      %fusedMatmul, %rows2 = transform.structured.fuse_into_containing_op %matmulChunk into %rows
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fusedFill, %rows3 = transform.structured.fuse_into_containing_op %fillChunk into %rows2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulTile, %k = transform.structured.tile_using_for %fusedMatmul tile_sizes [0, 0, 0, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      transform.structured.vectorize %fusedFill : !transform.any_op
      transform.structured.vectorize %matmulTile : !transform.any_op
      transform.structured.vectorize %tile : !transform.any_op
    }
    %epilogues8x1x1 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.epilogue_tile = [8, 1, 32], gpt.epilogue_operand = 1, gpt.epilogue_chunks = 1} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %epilogues8x1x1 : !transform.any_op {
    ^bb0(%epilogue: !transform.any_op):
      %matmul = transform.get_producer_of_operand %epilogue[1] : (!transform.any_op) -> !transform.any_op
      %fill = transform.get_producer_of_operand %matmul[2] : (!transform.any_op) -> !transform.any_op
      %tile, %panels, %rows, %columns = transform.structured.tile_using_for %epilogue tile_sizes [8, 1, 32] interchange = [1, 0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      %fusedMatmul, %rows2 = transform.structured.fuse_into_containing_op %matmul into %rows
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fusedFill, %rows3 = transform.structured.fuse_into_containing_op %fill into %rows2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulTile, %k = transform.structured.tile_using_for %fusedMatmul tile_sizes [0, 0, 0, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      transform.structured.vectorize %fusedFill : !transform.any_op
      transform.structured.vectorize %matmulTile : !transform.any_op
      transform.structured.vectorize %tile : !transform.any_op
    }
    %epilogues8x1x2 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.epilogue_tile = [8, 1, 32], gpt.epilogue_operand = 1, gpt.epilogue_chunks = 2} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %epilogues8x1x2 : !transform.any_op {
    ^bb0(%epilogue: !transform.any_op):
      %matmul = transform.get_producer_of_operand %epilogue[1] : (!transform.any_op) -> !transform.any_op
      %fill = transform.get_producer_of_operand %matmul[2] : (!transform.any_op) -> !transform.any_op
      %chunk, %forall = transform.structured.tile_using_forall %epilogue num_threads [0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulChunk, %forall2 = transform.structured.fuse_into_containing_op %matmul into %forall
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fillChunk, %forall3 = transform.structured.fuse_into_containing_op %fill into %forall2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %tile, %panels, %rows, %columns = transform.structured.tile_using_for %chunk tile_sizes [8, 1, 32] interchange = [1, 0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      %fusedMatmul, %rows2 = transform.structured.fuse_into_containing_op %matmulChunk into %rows
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fusedFill, %rows3 = transform.structured.fuse_into_containing_op %fillChunk into %rows2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulTile, %k = transform.structured.tile_using_for %fusedMatmul tile_sizes [0, 0, 0, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      transform.structured.vectorize %fusedFill : !transform.any_op
      transform.structured.vectorize %matmulTile : !transform.any_op
      transform.structured.vectorize %tile : !transform.any_op
    }
    %epilogues1x0x1 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.epilogue_tile = [1, 1, 32], gpt.epilogue_operand = 0, gpt.epilogue_chunks = 1} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %epilogues1x0x1 : !transform.any_op {
    ^bb0(%epilogue: !transform.any_op):
      %matmul = transform.get_producer_of_operand %epilogue[0] : (!transform.any_op) -> !transform.any_op
      %fill = transform.get_producer_of_operand %matmul[2] : (!transform.any_op) -> !transform.any_op
      %tile, %panels, %rows, %columns = transform.structured.tile_using_for %epilogue tile_sizes [1, 1, 32] interchange = [1, 0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      %fusedMatmul, %rows2 = transform.structured.fuse_into_containing_op %matmul into %rows
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fusedFill, %rows3 = transform.structured.fuse_into_containing_op %fill into %rows2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulTile, %k = transform.structured.tile_using_for %fusedMatmul tile_sizes [0, 0, 0, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      transform.structured.vectorize %fusedFill : !transform.any_op
      transform.structured.vectorize %matmulTile : !transform.any_op
      transform.structured.vectorize %tile : !transform.any_op
    }
    %epilogues1x0x2 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.epilogue_tile = [1, 1, 32], gpt.epilogue_operand = 0, gpt.epilogue_chunks = 2} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %epilogues1x0x2 : !transform.any_op {
    ^bb0(%epilogue: !transform.any_op):
      %matmul = transform.get_producer_of_operand %epilogue[0] : (!transform.any_op) -> !transform.any_op
      %fill = transform.get_producer_of_operand %matmul[2] : (!transform.any_op) -> !transform.any_op
      %chunk, %forall = transform.structured.tile_using_forall %epilogue num_threads [0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulChunk, %forall2 = transform.structured.fuse_into_containing_op %matmul into %forall
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fillChunk, %forall3 = transform.structured.fuse_into_containing_op %fill into %forall2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %tile, %panels, %rows, %columns = transform.structured.tile_using_for %chunk tile_sizes [1, 1, 32] interchange = [1, 0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      %fusedMatmul, %rows2 = transform.structured.fuse_into_containing_op %matmulChunk into %rows
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fusedFill, %rows3 = transform.structured.fuse_into_containing_op %fillChunk into %rows2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulTile, %k = transform.structured.tile_using_for %fusedMatmul tile_sizes [0, 0, 0, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      transform.structured.vectorize %fusedFill : !transform.any_op
      transform.structured.vectorize %matmulTile : !transform.any_op
      transform.structured.vectorize %tile : !transform.any_op
    }
    %epilogues1x1x1 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.epilogue_tile = [1, 1, 32], gpt.epilogue_operand = 1, gpt.epilogue_chunks = 1} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %epilogues1x1x1 : !transform.any_op {
    ^bb0(%epilogue: !transform.any_op):
      %matmul = transform.get_producer_of_operand %epilogue[1] : (!transform.any_op) -> !transform.any_op
      %fill = transform.get_producer_of_operand %matmul[2] : (!transform.any_op) -> !transform.any_op
      %tile, %panels, %rows, %columns = transform.structured.tile_using_for %epilogue tile_sizes [1, 1, 32] interchange = [1, 0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      %fusedMatmul, %rows2 = transform.structured.fuse_into_containing_op %matmul into %rows
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fusedFill, %rows3 = transform.structured.fuse_into_containing_op %fill into %rows2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulTile, %k = transform.structured.tile_using_for %fusedMatmul tile_sizes [0, 0, 0, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      transform.structured.vectorize %fusedFill : !transform.any_op
      transform.structured.vectorize %matmulTile : !transform.any_op
      transform.structured.vectorize %tile : !transform.any_op
    }
    %epilogues1x1x2 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.epilogue_tile = [1, 1, 32], gpt.epilogue_operand = 1, gpt.epilogue_chunks = 2} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %epilogues1x1x2 : !transform.any_op {
    ^bb0(%epilogue: !transform.any_op):
      %matmul = transform.get_producer_of_operand %epilogue[1] : (!transform.any_op) -> !transform.any_op
      %fill = transform.get_producer_of_operand %matmul[2] : (!transform.any_op) -> !transform.any_op
      %chunk, %forall = transform.structured.tile_using_forall %epilogue num_threads [0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulChunk, %forall2 = transform.structured.fuse_into_containing_op %matmul into %forall
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fillChunk, %forall3 = transform.structured.fuse_into_containing_op %fill into %forall2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %tile, %panels, %rows, %columns = transform.structured.tile_using_for %chunk tile_sizes [1, 1, 32] interchange = [1, 0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      %fusedMatmul, %rows2 = transform.structured.fuse_into_containing_op %matmulChunk into %rows
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %fusedFill, %rows3 = transform.structured.fuse_into_containing_op %fillChunk into %rows2
          : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
      %matmulTile, %k = transform.structured.tile_using_for %fusedMatmul tile_sizes [0, 0, 0, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      transform.structured.vectorize %fusedFill : !transform.any_op
      transform.structured.vectorize %matmulTile : !transform.any_op
      transform.structured.vectorize %tile : !transform.any_op
    }
    // Threads: --gpt-select-register-tiles marks ops to split into `gpt.parallel_chunks`
    // contiguous pieces (matmul: along N; packed matmul: along the panels; batch matmul: along the heads), one scf.forall
    // iteration each, which become an OpenMP loop after bufferization. The pieces keep the
    // op's attributes, so the register tiling below applies inside each.
    %matmulChunks2 = transform.structured.match ops{["linalg.matmul", "linalg.generic"]} attributes{gpt.parallel_chunks = 2} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %matmulChunks2 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %chunk, %forall = transform.structured.tile_using_forall %op num_threads [0, 2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    }
    %matmulChunks4 = transform.structured.match ops{["linalg.matmul", "linalg.generic"]} attributes{gpt.parallel_chunks = 4} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %matmulChunks4 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %chunk, %forall = transform.structured.tile_using_forall %op num_threads [0, 4]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    }
    %matmulChunks8 = transform.structured.match ops{["linalg.matmul", "linalg.generic"]} attributes{gpt.parallel_chunks = 8} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %matmulChunks8 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %chunk, %forall = transform.structured.tile_using_forall %op num_threads [0, 8]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    }
    %batchChunks2 = transform.structured.match ops{["linalg.batch_matmul"]} attributes{gpt.parallel_chunks = 2} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %batchChunks2 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %chunk, %forall = transform.structured.tile_using_forall %op num_threads [2]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    }
    %batchChunks4 = transform.structured.match ops{["linalg.batch_matmul"]} attributes{gpt.parallel_chunks = 4} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %batchChunks4 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %chunk, %forall = transform.structured.tile_using_forall %op num_threads [4]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    }
    %batchChunks8 = transform.structured.match ops{["linalg.batch_matmul"]} attributes{gpt.parallel_chunks = 8} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %batchChunks8 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %chunk, %forall = transform.structured.tile_using_forall %op num_threads [8]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    }
    // Packed matmuls, loops (M, panel, column, K) = [8, 1, 32, 1]: an 8x32 f32 accumulator is
    // 16 zmm registers; each K step is 2 vector loads of the panel, 8 broadcasts of A and 16 FMAs.
    // The panel loop is outermost, so one panel (K x 32 floats) stays in cache across all of M.
    %packed = transform.structured.match ops{["linalg.generic"]} attributes{gpt.register_tile = [8, 1, 32, 1]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %packed : !transform.any_op {
    ^bb0(%matmul: !transform.any_op):
      %tile, %p, %m, %n, %k = transform.structured.tile_using_for %matmul tile_sizes [8, 1, 32, 1] interchange = [1, 0, 2, 3]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    // Decode against packed weights: one 32-wide accumulator row per panel, streaming the
    // weight once, front to back.
    %packedRows = transform.structured.match ops{["linalg.generic"]} attributes{gpt.register_tile = [1, 1, 32, 1]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %packedRows : !transform.any_op {
    ^bb0(%matmul: !transform.any_op):
      %tile, %p, %m, %n, %k = transform.structured.tile_using_for %matmul tile_sizes [1, 1, 32, 1] interchange = [1, 0, 2, 3]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    // Plain matmuls (attention's q . k^T and p . v per key block among them) and
    // linalg.matmul_transpose_b (which reads a column of B per K step), loops [M, N, K].
    // [8, 32, 1]: an 8x32 f32 accumulator is 16 zmm registers; each K step is 2 vector loads of
    // B, 8 broadcasts of A and 16 FMAs. [1, 32, 1]: one row (decode). 16 and 8 wide: attention
    // with small heads or short blocks.
    %matmuls8x32 = transform.structured.match ops{["linalg.matmul", "linalg.matmul_transpose_b"]} attributes{gpt.register_tile = [8, 32, 1]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %matmuls8x32 : !transform.any_op {
    ^bb0(%matmul: !transform.any_op):
      %tile, %m, %n, %k = transform.structured.tile_using_for %matmul tile_sizes [8, 32, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    %matmuls8x16 = transform.structured.match ops{["linalg.matmul", "linalg.matmul_transpose_b"]} attributes{gpt.register_tile = [8, 16, 1]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %matmuls8x16 : !transform.any_op {
    ^bb0(%matmul: !transform.any_op):
      %tile, %m, %n, %k = transform.structured.tile_using_for %matmul tile_sizes [8, 16, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    %matmuls8x8 = transform.structured.match ops{["linalg.matmul", "linalg.matmul_transpose_b"]} attributes{gpt.register_tile = [8, 8, 1]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %matmuls8x8 : !transform.any_op {
    ^bb0(%matmul: !transform.any_op):
      %tile, %m, %n, %k = transform.structured.tile_using_for %matmul tile_sizes [8, 8, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    %matmuls1x32 = transform.structured.match ops{["linalg.matmul", "linalg.matmul_transpose_b"]} attributes{gpt.register_tile = [1, 32, 1]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %matmuls1x32 : !transform.any_op {
    ^bb0(%matmul: !transform.any_op):
      %tile, %m, %n, %k = transform.structured.tile_using_for %matmul tile_sizes [1, 32, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    %matmuls1x16 = transform.structured.match ops{["linalg.matmul", "linalg.matmul_transpose_b"]} attributes{gpt.register_tile = [1, 16, 1]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %matmuls1x16 : !transform.any_op {
    ^bb0(%matmul: !transform.any_op):
      %tile, %m, %n, %k = transform.structured.tile_using_for %matmul tile_sizes [1, 16, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    %matmuls1x8 = transform.structured.match ops{["linalg.matmul", "linalg.matmul_transpose_b"]} attributes{gpt.register_tile = [1, 8, 1]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %matmuls1x8 : !transform.any_op {
    ^bb0(%matmul: !transform.any_op):
      %tile, %m, %n, %k = transform.structured.tile_using_for %matmul tile_sizes [1, 8, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    // Attention's batched products have small N (head size or sequence bucket): 8x8 tiles.
    %batched = transform.structured.match ops{["linalg.batch_matmul"]} attributes{gpt.register_tile = [1, 8, 8, 1]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %batched : !transform.any_op {
    ^bb0(%bmm: !transform.any_op):
      %tile, %b, %m, %n, %k = transform.structured.tile_using_for %bmm tile_sizes [1, 8, 8, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    %batchedRows = transform.structured.match ops{["linalg.batch_matmul"]} attributes{gpt.register_tile = [1, 1, 8, 1]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %batchedRows : !transform.any_op {
    ^bb0(%bmm: !transform.any_op):
      %tile, %b, %m, %n, %k = transform.structured.tile_using_for %bmm tile_sizes [1, 1, 8, 1]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    // Elementwise generics: one vector of the innermost dim per step (its width chosen by
    // --gpt-select-register-tiles), so GELU, bias and residual adds, LayerNorm's normalization and
    // softmax's exp run on whole vectors.
    %elementwise2d32 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.register_tile = [1, 32]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %elementwise2d32 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %tile, %l0, %l1 = transform.structured.tile_using_for %op tile_sizes [1, 32]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    %elementwise2d16 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.register_tile = [1, 16]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %elementwise2d16 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %tile, %l0, %l1 = transform.structured.tile_using_for %op tile_sizes [1, 16]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    %elementwise2d8 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.register_tile = [1, 8]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %elementwise2d8 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %tile, %l0, %l1 = transform.structured.tile_using_for %op tile_sizes [1, 8]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    %elementwise3d32 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.register_tile = [1, 1, 32]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %elementwise3d32 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %tile, %l0, %l1, %l2 = transform.structured.tile_using_for %op tile_sizes [1, 1, 32]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    %elementwise3d16 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.register_tile = [1, 1, 16]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %elementwise3d16 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %tile, %l0, %l1, %l2 = transform.structured.tile_using_for %op tile_sizes [1, 1, 16]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    %elementwise3d8 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.register_tile = [1, 1, 8]} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %elementwise3d8 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %tile, %l0, %l1, %l2 = transform.structured.tile_using_for %op tile_sizes [1, 1, 8]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %tile : !transform.any_op
    }
    // Row reductions (LayerNorm's statistics, attention's row max and sum): one row at a time,
    // `gpt.row_reduction_tile` partial results in a vector across the row (0 or -inf to start,
    // the combiner's neutral element), reduced to one value at the row's end.
    %reductions32 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.row_reduction_tile = 32} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %reductions32 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %row, %rows = transform.structured.tile_using_for %op tile_sizes [1, 0]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %init, %partial, %combine, %loop = transform.structured.tile_reduction_using_for %row by tile_sizes = [0, 32]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %init : !transform.any_op
      transform.structured.vectorize %partial : !transform.any_op
      transform.structured.vectorize %combine : !transform.any_op
    }
    %reductions16 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.row_reduction_tile = 16} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %reductions16 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %row, %rows = transform.structured.tile_using_for %op tile_sizes [1, 0]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %init, %partial, %combine, %loop = transform.structured.tile_reduction_using_for %row by tile_sizes = [0, 16]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %init : !transform.any_op
      transform.structured.vectorize %partial : !transform.any_op
      transform.structured.vectorize %combine : !transform.any_op
    }
    %reductions8 = transform.structured.match ops{["linalg.generic"]} attributes{gpt.row_reduction_tile = 8} in %root
        : (!transform.any_op) -> !transform.any_op
    transform.foreach %reductions8 : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %row, %rows = transform.structured.tile_using_for %op tile_sizes [1, 0]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      %init, %partial, %combine, %loop = transform.structured.tile_reduction_using_for %row by tile_sizes = [0, 8]
          : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %init : !transform.any_op
      transform.structured.vectorize %partial : !transform.any_op
      transform.structured.vectorize %combine : !transform.any_op
    }
    %funcs = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    // reduction_to_contract must run before canonicalization, or the unit-dim reductions fold
    // into scalar adds (MLIR19_FACTS.md section 3).
    transform.apply_patterns to %funcs {
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
    } : !transform.any_op
    transform.apply_patterns to %funcs {
      transform.apply_patterns.canonicalization
      transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers
    } : !transform.any_op
    // Moves the accumulator's read/write out of the K loop, so it stays in registers.
    %hoisted = transform.apply_registered_pass "loop-invariant-subset-hoisting" to %funcs
        : (!transform.any_op) -> !transform.any_op
    transform.apply_cse to %hoisted : !transform.any_op
    transform.apply_patterns to %hoisted {
      transform.apply_patterns.vector.lower_contraction lowering_strategy = outerproduct
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.lower_multi_reduction lowering_strategy = innerreduction
      transform.apply_patterns.vector.split_transfer_full_partial split_transfer_strategy = "linalg-copy"
      transform.apply_patterns.vector.transfer_to_scf max_transfer_rank = 1 full_unroll = true
      transform.apply_patterns.vector.lower_transfer max_transfer_rank = 1
      transform.apply_patterns.vector.lower_shape_cast
      transform.apply_patterns.vector.lower_transpose lowering_strategy = shuffle_1d
      transform.apply_patterns.vector.cast_away_vector_leading_one_dim
    } : !transform.any_op
    transform.yield
  }
}
