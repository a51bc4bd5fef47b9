// --gpt-select-register-tiles: the tile decision is written into the IR as an attribute.
// RUN: gpt-opt %s --split-input-file --gpt-select-register-tiles | FileCheck %s

// CHECK-LABEL: func.func @divisible
// CHECK: linalg.matmul {gpt.register_tile = [8, 32, 1]}
// CHECK: linalg.batch_matmul {gpt.register_tile = [1, 8, 8, 1]}
func.func @divisible(%a: tensor<16x64xf32>, %b: tensor<64x96xf32>, %c: tensor<16x96xf32>,
                     %x: tensor<2x8x16xf32>, %y: tensor<2x16x8xf32>, %z: tensor<2x8x8xf32>) -> (tensor<16x96xf32>, tensor<2x8x8xf32>) {
  %0 = linalg.matmul ins(%a, %b : tensor<16x64xf32>, tensor<64x96xf32>) outs(%c : tensor<16x96xf32>) -> tensor<16x96xf32>
  %1 = linalg.batch_matmul ins(%x, %y : tensor<2x8x16xf32>, tensor<2x16x8xf32>) outs(%z : tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  return %0, %1 : tensor<16x96xf32>, tensor<2x8x8xf32>
}

// -----

// One row (decode): the row tiles of the table.
// CHECK-LABEL: func.func @one_row
// CHECK: linalg.matmul {gpt.register_tile = [1, 32, 1]}
// CHECK: linalg.batch_matmul {gpt.register_tile = [1, 1, 8, 1]}
func.func @one_row(%a: tensor<1x64xf32>, %b: tensor<64x96xf32>, %c: tensor<1x96xf32>,
                   %x: tensor<2x1x16xf32>, %y: tensor<2x16x64xf32>, %z: tensor<2x1x64xf32>) -> (tensor<1x96xf32>, tensor<2x1x64xf32>) {
  %0 = linalg.matmul ins(%a, %b : tensor<1x64xf32>, tensor<64x96xf32>) outs(%c : tensor<1x96xf32>) -> tensor<1x96xf32>
  %1 = linalg.batch_matmul ins(%x, %y : tensor<2x1x16xf32>, tensor<2x16x64xf32>) outs(%z : tensor<2x1x64xf32>) -> tensor<2x1x64xf32>
  return %0, %1 : tensor<1x96xf32>, tensor<2x1x64xf32>
}

// -----

// N = 100 is not a multiple of 32 nor N = 12 of 8: left for scalar loops.
// CHECK-LABEL: func.func @not_divisible
// CHECK-NOT: gpt.register_tile
func.func @not_divisible(%a: tensor<16x64xf32>, %b: tensor<64x100xf32>, %c: tensor<16x100xf32>,
                         %x: tensor<2x8x16xf32>, %y: tensor<2x16x12xf32>, %z: tensor<2x8x12xf32>) -> (tensor<16x100xf32>, tensor<2x8x12xf32>) {
  %0 = linalg.matmul ins(%a, %b : tensor<16x64xf32>, tensor<64x100xf32>) outs(%c : tensor<16x100xf32>) -> tensor<16x100xf32>
  %1 = linalg.batch_matmul ins(%x, %y : tensor<2x8x16xf32>, tensor<2x16x12xf32>) outs(%z : tensor<2x8x12xf32>) -> tensor<2x8x12xf32>
  return %0, %1 : tensor<16x100xf32>, tensor<2x8x12xf32>
}

// -----

// Dynamic shapes are never marked.
// CHECK-LABEL: func.func @dynamic
// CHECK-NOT: gpt.register_tile
func.func @dynamic(%a: tensor<?x64xf32>, %b: tensor<64x96xf32>, %c: tensor<?x96xf32>) -> tensor<?x96xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<?x64xf32>, tensor<64x96xf32>) outs(%c : tensor<?x96xf32>) -> tensor<?x96xf32>
  return %0 : tensor<?x96xf32>
}

// -----

// With threads, each marked op also records how many contiguous pieces to split it into: the
// largest of 8/4/2 not above the thread count that leaves whole tiles, each cut into 4 or 2 pieces
// where whole tiles allow (the OpenMP loop hands pieces out on demand) (matmul: N = 96 is 3 tiles
// wide, so it is not split; N = 128 splits in 4, one per thread (threads=4) or two (threads=2);
// batch matmul: the 2 batches split in 2). An op under 2^18 iterations (the last matmul,
// 16x128x64) is not worth a fork and join and is never split.
// RUN: gpt-opt %s --split-input-file --gpt-select-register-tiles=threads=2 | FileCheck %s --check-prefix=THREADS2
// RUN: gpt-opt %s --split-input-file --gpt-select-register-tiles=threads=4 | FileCheck %s --check-prefix=THREADS4
// THREADS2-LABEL: func.func @threads
// THREADS2: linalg.matmul {gpt.register_tile = [8, 32, 1]} ins(%{{.*}}, %{{.*}} : tensor<64x64xf32>, tensor<64x96xf32>)
// THREADS2: linalg.matmul {gpt.parallel_chunks = [0, 4], gpt.register_tile = [8, 32, 1]}
// THREADS2: linalg.batch_matmul {gpt.parallel_chunks = [2], gpt.register_tile = [1, 8, 8, 1]}
// THREADS2: linalg.matmul {gpt.register_tile = [8, 32, 1]} ins(%{{.*}}, %{{.*}} : tensor<16x64xf32>, tensor<64x128xf32>)
// THREADS4-LABEL: func.func @threads
// THREADS4: linalg.matmul {gpt.parallel_chunks = [0, 4], gpt.register_tile = [8, 32, 1]}
// THREADS4: linalg.batch_matmul {gpt.parallel_chunks = [2], gpt.register_tile = [1, 8, 8, 1]}
// THREADS4: linalg.matmul {gpt.register_tile = [8, 32, 1]} ins(%{{.*}}, %{{.*}} : tensor<16x64xf32>, tensor<64x128xf32>)
// CHECK-LABEL: func.func @threads
// CHECK-NOT: gpt.parallel_chunks
func.func @threads(%a: tensor<64x64xf32>, %b: tensor<64x96xf32>, %c: tensor<64x96xf32>,
                   %b2: tensor<64x128xf32>, %c2: tensor<64x128xf32>,
                   %x: tensor<2x64x64xf32>, %y: tensor<2x64x64xf32>, %z: tensor<2x64x64xf32>,
                   %small: tensor<16x64xf32>, %c3: tensor<16x128xf32>) -> (tensor<64x96xf32>, tensor<64x128xf32>, tensor<2x64x64xf32>, tensor<16x128xf32>) {
  %0 = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x96xf32>) outs(%c : tensor<64x96xf32>) -> tensor<64x96xf32>
  %1 = linalg.matmul ins(%a, %b2 : tensor<64x64xf32>, tensor<64x128xf32>) outs(%c2 : tensor<64x128xf32>) -> tensor<64x128xf32>
  %2 = linalg.batch_matmul ins(%x, %y : tensor<2x64x64xf32>, tensor<2x64x64xf32>) outs(%z : tensor<2x64x64xf32>) -> tensor<2x64x64xf32>
  %3 = linalg.matmul ins(%small, %b2 : tensor<16x64xf32>, tensor<64x128xf32>) outs(%c3 : tensor<16x128xf32>) -> tensor<16x128xf32>
  return %0, %1, %2, %3 : tensor<64x96xf32>, tensor<64x128xf32>, tensor<2x64x64xf32>, tensor<16x128xf32>
}

// -----

// Packed matmuls (generics marked gpt.packed_matmul, loops M, panel, column, K): 8 rows x one
// 32-wide panel, or one row over two panels for decode; threads split the panels (6 panels: 2
// pieces on 2 threads, still 2 on 4 threads since 6 is not a multiple of 4). Decode on 2 threads
// keeps one panel per tile: 6 panels are 3 pairs, which do not split in two. An unmarked generic
// with the same loops is not a packed matmul and is left alone. (K = 2048 makes each worth
// splitting.)
#pA = affine_map<(m, p, j, k) -> (m, k)>
#pB = affine_map<(m, p, j, k) -> (p, k, j)>
#pC = affine_map<(m, p, j, k) -> (m, p, j)>
// CHECK-LABEL: func.func @packed
// CHECK: gpt.packed_matmul, gpt.register_tile = [8, 1, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]
// CHECK: gpt.packed_matmul, gpt.register_tile = [1, 2, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]
// CHECK-NOT: gpt.register_tile
// CHECK: return
// THREADS2-LABEL: func.func @packed
// THREADS2: gpt.packed_matmul, gpt.parallel_chunks = [0, 2], gpt.register_tile = [8, 1, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]
// THREADS2: gpt.packed_matmul, gpt.parallel_chunks = [0, 2], gpt.register_tile = [1, 1, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]
// THREADS4-LABEL: func.func @packed
// THREADS4: gpt.packed_matmul, gpt.parallel_chunks = [0, 2], gpt.register_tile = [8, 1, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]
func.func @packed(%a: tensor<16x2048xf32>, %w: tensor<6x2048x32xf32>, %c: tensor<16x6x32xf32>,
                  %r: tensor<1x2048xf32>, %cr: tensor<1x6x32xf32>) -> (tensor<16x6x32xf32>, tensor<1x6x32xf32>, tensor<16x6x32xf32>) {
  %0 = linalg.generic {indexing_maps = [#pA, #pB, #pC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%a, %w : tensor<16x2048xf32>, tensor<6x2048x32xf32>) outs(%c : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<16x6x32xf32>
  %1 = linalg.generic {indexing_maps = [#pA, #pB, #pC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%r, %w : tensor<1x2048xf32>, tensor<6x2048x32xf32>) outs(%cr : tensor<1x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<1x6x32xf32>
  %2 = linalg.generic {indexing_maps = [#pA, #pB, #pC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%a, %w : tensor<16x2048xf32>, tensor<6x2048x32xf32>) outs(%c : tensor<16x6x32xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<16x6x32xf32>
  return %0, %1, %2 : tensor<16x6x32xf32>, tensor<1x6x32xf32>, tensor<16x6x32xf32>
}

// -----

// A batched step of 4 or 2 tokens: all its rows in one tile (each panel read once), not 1-row
// tiles walking the panel once per row.
#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, j)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
// CHECK-LABEL: func.func @packed_few_rows
// CHECK: gpt.packed_matmul, gpt.register_tile = [4, 1, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]
// CHECK: gpt.packed_matmul, gpt.register_tile = [2, 1, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]
func.func @packed_few_rows(%a4: tensor<4x2048xf32>, %a2: tensor<2x2048xf32>, %w: tensor<6x2048x32xf32>,
                           %c4: tensor<4x6x32xf32>, %c2: tensor<2x6x32xf32>) -> (tensor<4x6x32xf32>, tensor<2x6x32xf32>) {
  %0 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%a4, %w : tensor<4x2048xf32>, tensor<6x2048x32xf32>) outs(%c4 : tensor<4x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<4x6x32xf32>
  %1 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%a2, %w : tensor<2x2048xf32>, tensor<6x2048x32xf32>) outs(%c2 : tensor<2x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<2x6x32xf32>
  return %0, %1 : tensor<4x6x32xf32>, tensor<2x6x32xf32>
}

// -----

// Elementwise generics get one vector of the innermost dim (the largest of 32/16/8 lanes that
// divides it) and, with 2^18 elements or more, split across threads along dim 1. Not marked as
// elementwise: reductions (they get a row_reduction_tile, below), gathers
// (tensor.extract in the body), and innermost dims no vector width divides.
#e2 = affine_map<(d0, d1) -> (d0, d1)>
#e3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#r2 = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @elementwise
// CHECK: linalg.generic {{.*}}gpt.register_tile = [1, 32]
// CHECK: linalg.generic {{.*}}gpt.register_tile = [1, 1, 16]
// CHECK-NOT: gpt.register_tile
// CHECK: return
// THREADS2-LABEL: func.func @elementwise
// THREADS2: gpt.parallel_chunks = [0, 8], gpt.register_tile = [1, 32]
// THREADS2: gpt.parallel_chunks = [0, 8], gpt.register_tile = [1, 1, 16]
func.func @elementwise(%a: tensor<512x512xf32>, %b: tensor<8x256x144xf32>, %c: tensor<4x6xf32>, %r: tensor<512xf32>,
                       %table: tensor<600x512xf32>) -> (tensor<512x512xf32>, tensor<8x256x144xf32>, tensor<4x6xf32>, tensor<512xf32>, tensor<512x512xf32>) {
  %0 = linalg.generic {indexing_maps = [#e2, #e2], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<512x512xf32>) outs(%a : tensor<512x512xf32>) {
  ^bb0(%x: f32, %o: f32):
    %t = math.tanh %x : f32
    linalg.yield %t : f32
  } -> tensor<512x512xf32>
  %1 = linalg.generic {indexing_maps = [#e3, #e3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%b : tensor<8x256x144xf32>) outs(%b : tensor<8x256x144xf32>) {
  ^bb0(%x: f32, %o: f32):
    %t = arith.addf %x, %x : f32
    linalg.yield %t : f32
  } -> tensor<8x256x144xf32>
  %2 = linalg.generic {indexing_maps = [#e2, #e2], iterator_types = ["parallel", "parallel"]} ins(%c : tensor<4x6xf32>) outs(%c : tensor<4x6xf32>) {
  ^bb0(%x: f32, %o: f32):
    %t = arith.addf %x, %x : f32
    linalg.yield %t : f32
  } -> tensor<4x6xf32>
  %3 = linalg.generic {indexing_maps = [#e2, #r2], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<512x512xf32>) outs(%r : tensor<512xf32>) {
  ^bb0(%x: f32, %o: f32):
    %t = arith.addf %x, %o : f32
    linalg.yield %t : f32
  } -> tensor<512xf32>
  %4 = linalg.generic {indexing_maps = [#e2], iterator_types = ["parallel", "parallel"]} outs(%a : tensor<512x512xf32>) {
  ^bb0(%o: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %t = tensor.extract %table[%i, %j] : tensor<600x512xf32>
    linalg.yield %t : f32
  } -> tensor<512x512xf32>
  return %0, %1, %2, %3, %4 : tensor<512x512xf32>, tensor<8x256x144xf32>, tensor<4x6xf32>, tensor<512xf32>, tensor<512x512xf32>
}

// -----

// Row reductions ending in a plain combiner of the accumulator get gpt.row_reduction_tile, the
// largest of 32/16/8 dividing the row; a body that ends in anything else (here a select) cannot
// be split into partial results and is left alone.
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @row_reductions
// CHECK: linalg.generic {{.*}}gpt.row_reduction_tile = 32 : i64
// CHECK: linalg.generic {{.*}}gpt.row_reduction_tile = 16 : i64
// CHECK-NOT: gpt.row_reduction_tile
// CHECK: return
func.func @row_reductions(%a: tensor<8x64xf32>, %s: tensor<8xf32>, %b: tensor<8x48xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %0 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<8x64xf32>) outs(%s : tensor<8xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %sq = arith.mulf %x, %x : f32
    %t = arith.addf %acc, %sq : f32
    linalg.yield %t : f32
  } -> tensor<8xf32>
  %1 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%b : tensor<8x48xf32>) outs(%s : tensor<8xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %t = arith.maximumf %x, %acc : f32
    linalg.yield %t : f32
  } -> tensor<8xf32>
  %2 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<8x64xf32>) outs(%s : tensor<8xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %t = arith.maximumf %x, %acc : f32
    %positive = arith.cmpf ogt, %x, %acc : f32
    %u = arith.select %positive, %t, %acc : f32
    linalg.yield %u : f32
  } -> tensor<8xf32>
  return %0, %1, %2 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// Epilogue fusion: a packed matmul whose only user is an elementwise generic of its shape,
// reading it through an identity map as input 0 or 1, gets no tile of its own
// (the matmul keeps only gpt.packed_matmul); the generic records the tile the schedule computes the matmul in, the
// input position and the thread pieces (2^18+ iterations: 2 on two threads). A matmul with a
// second user keeps its own register tile.
#pA = affine_map<(m, p, j, k) -> (m, k)>
#pB = affine_map<(m, p, j, k) -> (p, k, j)>
#pC = affine_map<(m, p, j, k) -> (m, p, j)>
#e3 = affine_map<(m, p, j) -> (m, p, j)>
#bias = affine_map<(m, p, j) -> (p, j)>
// CHECK-LABEL: func.func @epilogue
// CHECK: attrs = {gpt.packed_matmul, gpt.reduction_step = [0, 0, 0, 1]}
// CHECK-NOT: gpt.register_tile
// CHECK: gpt.epilogue_chunks = 1 : i64, gpt.epilogue_operand = 1 : i64, gpt.epilogue_tile = [8, 1, 32], gpt.tile_interchange = [1, 0, 2]
// CHECK: gpt.packed_matmul, gpt.register_tile = [8, 1, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]
// THREADS2-LABEL: func.func @epilogue
// THREADS2: gpt.epilogue_chunks = 2 : i64, gpt.epilogue_operand = 1 : i64, gpt.epilogue_tile = [8, 1, 32], gpt.tile_interchange = [1, 0, 2]
func.func @epilogue(%x: tensor<16x2048xf32>, %w: tensor<6x2048x32xf32>, %b: tensor<6x32xf32>, %init: tensor<16x6x32xf32>)
    -> (tensor<16x6x32xf32>, tensor<16x6x32xf32>, tensor<16x6x32xf32>) {
  %0 = linalg.generic {indexing_maps = [#pA, #pB, #pC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x2048xf32>, tensor<6x2048x32xf32>) outs(%init : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<16x6x32xf32>
  %1 = linalg.generic {indexing_maps = [#bias, #e3, #e3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%b, %0 : tensor<6x32xf32>, tensor<16x6x32xf32>) outs(%init : tensor<16x6x32xf32>) {
  ^bb0(%c: f32, %a: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  } -> tensor<16x6x32xf32>
  %2 = linalg.generic {indexing_maps = [#pA, #pB, #pC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x2048xf32>, tensor<6x2048x32xf32>) outs(%init : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<16x6x32xf32>
  %3 = linalg.generic {indexing_maps = [#e3, #e3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%2 : tensor<16x6x32xf32>) outs(%init : tensor<16x6x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = math.tanh %a : f32
    linalg.yield %t : f32
  } -> tensor<16x6x32xf32>
  return %1, %2, %3 : tensor<16x6x32xf32>, tensor<16x6x32xf32>, tensor<16x6x32xf32>
}

// The epilogue's pieces as the matmul alone would get them: one per thread cut into 4 where the
// panels allow (16 panels: 8 pieces on two threads, 16 on four), for the OpenMP loop to hand out.
// THREADS2-LABEL: func.func @epilogue_pieces
// THREADS2: gpt.epilogue_chunks = 8 : i64
// THREADS4-LABEL: func.func @epilogue_pieces
// THREADS4: gpt.epilogue_chunks = 16 : i64
func.func @epilogue_pieces(%x: tensor<16x2048xf32>, %w: tensor<16x2048x32xf32>, %b: tensor<16x32xf32>,
                           %init: tensor<16x16x32xf32>) -> tensor<16x16x32xf32> {
  %0 = linalg.generic {indexing_maps = [#pA, #pB, #pC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x2048xf32>, tensor<16x2048x32xf32>) outs(%init : tensor<16x16x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%a: f32, %c: f32, %acc: f32):
    %m = arith.mulf %a, %c : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<16x16x32xf32>
  %1 = linalg.generic {indexing_maps = [#bias, #e3, #e3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%b, %0 : tensor<16x32xf32>, tensor<16x16x32xf32>) outs(%init : tensor<16x16x32xf32>) {
  ^bb0(%c: f32, %a: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  } -> tensor<16x16x32xf32>
  return %1 : tensor<16x16x32xf32>
}

// -----

// A block-quantized packed matmul: the scaled sum over blocks (loops M, panel, column, block)
// is tiled like an f32 packed matmul, or its epilogue records the tile and the matmul its block
// step; its block partial sums (marked gpt.block_partials) get no tile of their own: the schedule
// fuses them into the matmul's block loop.
#bA = affine_map<(m, p, j, b, i) -> (m, b, i)>
#bW = affine_map<(m, p, j, b, i) -> (p, b, i, j)>
#bP = affine_map<(m, p, j, b, i) -> (m, p, b, j)>
#sP = affine_map<(m, p, j, b) -> (m, p, b, j)>
#sS = affine_map<(m, p, j, b) -> (p, b, j)>
#sX = affine_map<(m, p, j, b) -> (m, b)>
#sC = affine_map<(m, p, j, b) -> (m, p, j)>
#b3 = affine_map<(m, p, j) -> (m, p, j)>
// CHECK-LABEL: func.func @block_quantized
// CHECK: attrs = {gpt.block_partials}
// CHECK: gpt.packed_matmul, gpt.register_tile = [4, 1, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]
// CHECK: attrs = {gpt.packed_matmul, gpt.reduction_step = [0, 0, 0, 1]}
// CHECK: gpt.epilogue_tile = [4, 1, 32], gpt.tile_interchange = [1, 0, 2]
func.func @block_quantized(%x: tensor<16x2x8xi32>, %w: tensor<6x2x8x32xi32>, %d: tensor<6x2x32xf16>,
                           %dx: tensor<16x2xf32>, %comp: tensor<16x2xf32>,
                           %zeros: tensor<16x6x2x32xi32>, %init: tensor<16x6x32xf32>)
    -> (tensor<16x6x32xf32>, tensor<16x6x32xf32>) {
  %partials = linalg.generic {indexing_maps = [#bA, #bW, #bP],
                              iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x2x8xi32>, tensor<6x2x8x32xi32>) outs(%zeros : tensor<16x6x2x32xi32>)
      attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %q: i32, %acc: i32):
    %r = transformer.lane_dot_u8i8 %acc, %q, %a : i32 -> i32
    linalg.yield %r : i32
  } -> tensor<16x6x2x32xi32>
  %0 = linalg.generic {indexing_maps = [#sP, #sS, #sX, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%partials, %d, %dx, %comp : tensor<16x6x2x32xi32>, tensor<6x2x32xf16>, tensor<16x2xf32>, tensor<16x2xf32>)
      outs(%init : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%p: i32, %s: f16, %sx: f32, %c: f32, %acc: f32):
    %pf = arith.sitofp %p : i32 to f32
    %sum = arith.subf %pf, %c : f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %sum, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<16x6x32xf32>
  %1 = linalg.generic {indexing_maps = [#sP, #sS, #sX, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%partials, %d, %dx, %comp : tensor<16x6x2x32xi32>, tensor<6x2x32xf16>, tensor<16x2xf32>, tensor<16x2xf32>)
      outs(%init : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%p: i32, %s: f16, %sx: f32, %c: f32, %acc: f32):
    %pf = arith.sitofp %p : i32 to f32
    %sum = arith.subf %pf, %c : f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %sum, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<16x6x32xf32>
  %e = tensor.empty() : tensor<16x6x32xf32>
  %2 = linalg.generic {indexing_maps = [#b3, #b3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%1 : tensor<16x6x32xf32>) outs(%e : tensor<16x6x32xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = math.tanh %a : f32
    linalg.yield %t : f32
  } -> tensor<16x6x32xf32>
  return %0, %2 : tensor<16x6x32xf32>, tensor<16x6x32xf32>
}

// -----

// A one-row (decode) block-quantized matmul, K = 768, N = 768: 1 x 24 x 32 x 24 block steps,
// each a block of 32 multiply-adds in the fused partial sums, so 589,824 of them: enough work to
// split across two threads (counted per block step it would look 32 times smaller and stay on one).
// Two panels per tile: twice the weight stream in flight.
#dA = affine_map<(m, p, j, b, i) -> (m, b, i)>
#dW = affine_map<(m, p, j, b, i) -> (p, b, i, j)>
#dP = affine_map<(m, p, j, b, i) -> (m, p, b, j)>
#eP = affine_map<(m, p, j, b) -> (m, p, b, j)>
#eS = affine_map<(m, p, j, b) -> (p, b, j)>
#eX = affine_map<(m, p, j, b) -> (m, b)>
#eC = affine_map<(m, p, j, b) -> (m, p, j)>
// CHECK-LABEL: func.func @block_quantized_decode
// CHECK: gpt.packed_matmul, gpt.register_tile = [1, 2, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]
// THREADS2-LABEL: func.func @block_quantized_decode
// THREADS2: gpt.packed_matmul, gpt.parallel_chunks = [0, 4], gpt.register_tile = [1, 2, 32, 1]
func.func @block_quantized_decode(%x: tensor<1x24x8xi32>, %w: tensor<24x24x8x32xi32>, %d: tensor<24x24x32xf16>,
                                  %dx: tensor<1x24xf32>, %comp: tensor<1x24xf32>,
                                  %zeros: tensor<1x24x24x32xi32>, %init: tensor<1x24x32xf32>) -> tensor<1x24x32xf32> {
  %partials = linalg.generic {indexing_maps = [#dA, #dW, #dP],
                              iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<1x24x8xi32>, tensor<24x24x8x32xi32>) outs(%zeros : tensor<1x24x24x32xi32>)
      attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %q: i32, %acc: i32):
    %r = transformer.lane_dot_u8i8 %acc, %q, %a : i32 -> i32
    linalg.yield %r : i32
  } -> tensor<1x24x24x32xi32>
  %0 = linalg.generic {indexing_maps = [#eP, #eS, #eX, #eX, #eC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%partials, %d, %dx, %comp : tensor<1x24x24x32xi32>, tensor<24x24x32xf16>, tensor<1x24xf32>, tensor<1x24xf32>)
      outs(%init : tensor<1x24x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%p: i32, %s: f16, %sx: f32, %c: f32, %acc: f32):
    %pf = arith.sitofp %p : i32 to f32
    %sum = arith.subf %pf, %c : f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %sum, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<1x24x32xf32>
  return %0 : tensor<1x24x32xf32>
}

// -----

// Block-quantized matmuls of a few rows (speculative verification steps of 9, 6, 10 and 7
// tokens): the largest tile of 4, 3 or 2 rows that divides the rows, so that each weight word is
// unpacked once for several rows; one row of two panels where none does (7).
#vA = affine_map<(m, p, j, b, i) -> (m, b, i)>
#vW = affine_map<(m, p, j, b, i) -> (p, b, i, j)>
#vP = affine_map<(m, p, j, b, i) -> (m, p, b, j)>
#uP = affine_map<(m, p, j, b) -> (m, p, b, j)>
#uS = affine_map<(m, p, j, b) -> (p, b, j)>
#uX = affine_map<(m, p, j, b) -> (m, b)>
#uC = affine_map<(m, p, j, b) -> (m, p, j)>
// CHECK-LABEL: func.func @block_quantized_few_rows
// CHECK: gpt.packed_matmul, gpt.register_tile = [3, 1, 32, 1]
// CHECK: gpt.packed_matmul, gpt.register_tile = [3, 1, 32, 1]
// CHECK: gpt.packed_matmul, gpt.register_tile = [2, 1, 32, 1]
// CHECK: gpt.packed_matmul, gpt.register_tile = [1, 2, 32, 1]
func.func @block_quantized_few_rows(%w: tensor<2x2x8x32xi32>, %d: tensor<2x2x32xf16>,
                                    %x9: tensor<9x2x8xi32>, %dx9: tensor<9x2xf32>,
                                    %x6: tensor<6x2x8xi32>, %dx6: tensor<6x2xf32>,
                                    %x10: tensor<10x2x8xi32>, %dx10: tensor<10x2xf32>,
                                    %x7: tensor<7x2x8xi32>, %dx7: tensor<7x2xf32>)
    -> (tensor<9x2x32xf32>, tensor<6x2x32xf32>, tensor<10x2x32xf32>, tensor<7x2x32xf32>) {
  %z9 = tensor.empty() : tensor<9x2x2x32xi32>
  %i9 = tensor.empty() : tensor<9x2x32xf32>
  %p9 = linalg.generic {indexing_maps = [#vA, #vW, #vP],
                              iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x9, %w : tensor<9x2x8xi32>, tensor<2x2x8x32xi32>) outs(%z9 : tensor<9x2x2x32xi32>)
      attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %q: i32, %acc: i32):
    %r = transformer.lane_dot_u8i8 %acc, %q, %a : i32 -> i32
    linalg.yield %r : i32
  } -> tensor<9x2x2x32xi32>
  %r9 = linalg.generic {indexing_maps = [#uP, #uS, #uX, #uC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%p9, %d, %dx9 : tensor<9x2x2x32xi32>, tensor<2x2x32xf16>, tensor<9x2xf32>)
      outs(%i9 : tensor<9x2x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%p: i32, %s: f16, %sx: f32, %acc: f32):
    %pf = arith.sitofp %p : i32 to f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %pf, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<9x2x32xf32>
  %z6 = tensor.empty() : tensor<6x2x2x32xi32>
  %i6 = tensor.empty() : tensor<6x2x32xf32>
  %p6 = linalg.generic {indexing_maps = [#vA, #vW, #vP],
                              iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x6, %w : tensor<6x2x8xi32>, tensor<2x2x8x32xi32>) outs(%z6 : tensor<6x2x2x32xi32>)
      attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %q: i32, %acc: i32):
    %r = transformer.lane_dot_u8i8 %acc, %q, %a : i32 -> i32
    linalg.yield %r : i32
  } -> tensor<6x2x2x32xi32>
  %r6 = linalg.generic {indexing_maps = [#uP, #uS, #uX, #uC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%p6, %d, %dx6 : tensor<6x2x2x32xi32>, tensor<2x2x32xf16>, tensor<6x2xf32>)
      outs(%i6 : tensor<6x2x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%p: i32, %s: f16, %sx: f32, %acc: f32):
    %pf = arith.sitofp %p : i32 to f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %pf, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<6x2x32xf32>
  %z10 = tensor.empty() : tensor<10x2x2x32xi32>
  %i10 = tensor.empty() : tensor<10x2x32xf32>
  %p10 = linalg.generic {indexing_maps = [#vA, #vW, #vP],
                              iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x10, %w : tensor<10x2x8xi32>, tensor<2x2x8x32xi32>) outs(%z10 : tensor<10x2x2x32xi32>)
      attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %q: i32, %acc: i32):
    %r = transformer.lane_dot_u8i8 %acc, %q, %a : i32 -> i32
    linalg.yield %r : i32
  } -> tensor<10x2x2x32xi32>
  %r10 = linalg.generic {indexing_maps = [#uP, #uS, #uX, #uC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%p10, %d, %dx10 : tensor<10x2x2x32xi32>, tensor<2x2x32xf16>, tensor<10x2xf32>)
      outs(%i10 : tensor<10x2x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%p: i32, %s: f16, %sx: f32, %acc: f32):
    %pf = arith.sitofp %p : i32 to f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %pf, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<10x2x32xf32>
  %z7 = tensor.empty() : tensor<7x2x2x32xi32>
  %i7 = tensor.empty() : tensor<7x2x32xf32>
  %p7 = linalg.generic {indexing_maps = [#vA, #vW, #vP],
                              iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x7, %w : tensor<7x2x8xi32>, tensor<2x2x8x32xi32>) outs(%z7 : tensor<7x2x2x32xi32>)
      attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %q: i32, %acc: i32):
    %r = transformer.lane_dot_u8i8 %acc, %q, %a : i32 -> i32
    linalg.yield %r : i32
  } -> tensor<7x2x2x32xi32>
  %r7 = linalg.generic {indexing_maps = [#uP, #uS, #uX, #uC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%p7, %d, %dx7 : tensor<7x2x2x32xi32>, tensor<2x2x32xf16>, tensor<7x2xf32>)
      outs(%i7 : tensor<7x2x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%p: i32, %s: f16, %sx: f32, %acc: f32):
    %pf = arith.sitofp %p : i32 to f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %pf, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<7x2x32xf32>
  return %r9, %r6, %r10, %r7 : tensor<9x2x32xf32>, tensor<6x2x32xf32>, tensor<10x2x32xf32>, tensor<7x2x32xf32>
}

// -----

// An elementwise generic without inputs (the fill of a 3-D matmul's accumulator) once crashed the
// pass (input 0 read unconditionally); it gets a vector tile like any elementwise op.
// CHECK-LABEL: func.func @fill_without_inputs
// CHECK: linalg.generic
// CHECK-SAME: gpt.register_tile = [1, 1, 16]
#fill = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @fill_without_inputs(%init: tensor<2x4x16xf32>) -> tensor<2x4x16xf32> {
  %zero = arith.constant 0.0 : f32
  %0 = linalg.generic {indexing_maps = [#fill], iterator_types = ["parallel", "parallel", "parallel"]}
      outs(%init : tensor<2x4x16xf32>) {
  ^bb0(%out: f32):
    linalg.yield %zero : f32
  } -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

// -----

// 2^32 * 2^32 * 16 iterations: the work estimate saturates instead of wrapping to 0 (signed
// overflow), so the op is split like any large one.
// THREADS4-LABEL: func.func @work_overflow
// THREADS4: gpt.parallel_chunks = [0, 16], gpt.register_tile = [1, 1, 16]
// CHECK-LABEL: func.func @work_overflow
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @work_overflow(%x: tensor<4294967296x4294967296x16xf32>) -> tensor<4294967296x4294967296x16xf32> {
  %0 = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<4294967296x4294967296x16xf32>) outs(%x : tensor<4294967296x4294967296x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = arith.negf %in : f32
    linalg.yield %1 : f32
  } -> tensor<4294967296x4294967296x16xf32>
  return %0 : tensor<4294967296x4294967296x16xf32>
}

// -----

// A one-row block-quantized matmul of an odd number of panels (3): one panel per tile.
#oA = affine_map<(m, p, j, b, i) -> (m, b, i)>
#oW = affine_map<(m, p, j, b, i) -> (p, b, i, j)>
#oP = affine_map<(m, p, j, b, i) -> (m, p, b, j)>
#nP = affine_map<(m, p, j, b) -> (m, p, b, j)>
#nS = affine_map<(m, p, j, b) -> (p, b, j)>
#nX = affine_map<(m, p, j, b) -> (m, b)>
#nC = affine_map<(m, p, j, b) -> (m, p, j)>
// CHECK-LABEL: func.func @block_quantized_decode_odd_panels
// CHECK: gpt.packed_matmul, gpt.register_tile = [1, 1, 32, 1]
func.func @block_quantized_decode_odd_panels(%x: tensor<1x2x8xi32>, %w: tensor<3x2x8x32xi32>, %d: tensor<3x2x32xf16>,
                                             %dx: tensor<1x2xf32>, %zeros: tensor<1x3x2x32xi32>,
                                             %init: tensor<1x3x32xf32>) -> tensor<1x3x32xf32> {
  %partials = linalg.generic {indexing_maps = [#oA, #oW, #oP],
                              iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<1x2x8xi32>, tensor<3x2x8x32xi32>) outs(%zeros : tensor<1x3x2x32xi32>)
      attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %q: i32, %acc: i32):
    %r = transformer.lane_dot_u8i8 %acc, %q, %a : i32 -> i32
    linalg.yield %r : i32
  } -> tensor<1x3x2x32xi32>
  %0 = linalg.generic {indexing_maps = [#nP, #nS, #nX, #nC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%partials, %d, %dx : tensor<1x3x2x32xi32>, tensor<3x2x32xf16>, tensor<1x2xf32>)
      outs(%init : tensor<1x3x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%p: i32, %s: f16, %sx: f32, %acc: f32):
    %pf = arith.sitofp %p : i32 to f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %pf, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<1x3x32xf32>
  return %0 : tensor<1x3x32xf32>
}
