// The vectorize_matmuls Transform-dialect schedule, run on its own from its file, and the same
// schedule through --gpt-apply-schedule (the copy compiled into the binary).
// RUN: gpt-opt %s --transform-preload-library=transform-library-paths=%S/../../cc/codegen/cpu/schedules/vectorize_matmuls.mlir --transform-interpreter | FileCheck %s
// RUN: gpt-opt %s --gpt-apply-schedule=schedule=vectorize_matmuls | FileCheck %s
// RUN: not gpt-opt %s --gpt-apply-schedule=schedule=no_such_schedule 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// UNKNOWN: unknown schedule 'no_such_schedule' (known: vectorize_matmuls)

// An 8x32 accumulator lives in registers across the K loop: read once before it, one
// outerproduct (8 x 32 FMAs) per K step, written once after it.
// CHECK-LABEL: func.func @marked
// CHECK: scf.for %[[M:.*]] = %c0 to %c16 step %c8
// CHECK: scf.for %[[N:.*]] = %c0 to %c96 step %c32
// CHECK: %[[ACC:.*]] = vector.transfer_read %{{.*}}[%[[M]], %[[N]]]{{.*}} : tensor<16x96xf32>, vector<8x32xf32>
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c1 iter_args(%{{.*}} = %{{.*}}, %[[A:.*]] = %[[ACC]])
// CHECK: vector.outerproduct %{{.*}}, %{{.*}}, %[[A]] {kind = #vector.kind<add>} : vector<8xf32>, vector<32xf32>
// CHECK: vector.transfer_write %{{.*}}, %{{.*}}[%[[M]], %[[N]]] {in_bounds = [true, true]} : vector<8x32xf32>, tensor<16x96xf32>
// CHECK-NOT: linalg.matmul
func.func @marked(%a: tensor<16x64xf32>, %b: tensor<64x96xf32>, %c: tensor<16x96xf32>) -> tensor<16x96xf32> {
  %0 = linalg.matmul {gpt.register_tile = [8, 32, 1]} ins(%a, %b : tensor<16x64xf32>, tensor<64x96xf32>) outs(%c : tensor<16x96xf32>) -> tensor<16x96xf32>
  return %0 : tensor<16x96xf32>
}

// CHECK-LABEL: func.func @batched
// CHECK: vector.outerproduct %{{.*}}, %{{.*}}, %{{.*}} {kind = #vector.kind<add>} : vector<8xf32>, vector<8xf32>
// CHECK-NOT: linalg.batch_matmul
func.func @batched(%x: tensor<2x8x16xf32>, %y: tensor<2x16x8xf32>, %z: tensor<2x8x8xf32>) -> tensor<2x8x8xf32> {
  %0 = linalg.batch_matmul {gpt.register_tile = [1, 8, 8, 1]} ins(%x, %y : tensor<2x8x16xf32>, tensor<2x16x8xf32>) outs(%z : tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  return %0 : tensor<2x8x8xf32>
}

// A decode row: a 32-wide accumulator, one vector of weights per K step.
// CHECK-LABEL: func.func @row
// CHECK: vector.outerproduct %{{.*}}, %{{.*}}, %{{.*}} {kind = #vector.kind<add>} : vector<1xf32>, vector<32xf32>
// CHECK-NOT: linalg.matmul
func.func @row(%a: tensor<1x64xf32>, %b: tensor<64x96xf32>, %c: tensor<1x96xf32>) -> tensor<1x96xf32> {
  %0 = linalg.matmul {gpt.register_tile = [1, 32, 1]} ins(%a, %b : tensor<1x64xf32>, tensor<64x96xf32>) outs(%c : tensor<1x96xf32>) -> tensor<1x96xf32>
  return %0 : tensor<1x96xf32>
}

// Split across 2 threads: an scf.forall over two 64-wide halves of N, register tiles inside.
// CHECK-LABEL: func.func @split
// CHECK: scf.forall (%{{.*}}) in (2)
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c32
// CHECK: vector.outerproduct %{{.*}}, %{{.*}}, %{{.*}} {kind = #vector.kind<add>} : vector<8xf32>, vector<32xf32>
// CHECK: scf.forall.in_parallel
func.func @split(%a: tensor<16x64xf32>, %b: tensor<64x128xf32>, %c: tensor<16x128xf32>) -> tensor<16x128xf32> {
  %0 = linalg.matmul {gpt.parallel_chunks = [0, 2], gpt.register_tile = [8, 32, 1]} ins(%a, %b : tensor<16x64xf32>, tensor<64x128xf32>) outs(%c : tensor<16x128xf32>) -> tensor<16x128xf32>
  return %0 : tensor<16x128xf32>
}

// Unmarked ops are not touched.
// CHECK-LABEL: func.func @unmarked
// CHECK: linalg.matmul ins
// CHECK-NOT: vector.
func.func @unmarked(%a: tensor<16x64xf32>, %b: tensor<64x100xf32>, %c: tensor<16x100xf32>) -> tensor<16x100xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<16x64xf32>, tensor<64x100xf32>) outs(%c : tensor<16x100xf32>) -> tensor<16x100xf32>
  return %0 : tensor<16x100xf32>
}

// A packed matmul (loops M, panel, column, K): the panel loop is outermost, and each K step
// reads 32 consecutive weights of the panel into one outerproduct per accumulator row.
#packedA = affine_map<(m, p, j, k) -> (m, k)>
#packedB = affine_map<(m, p, j, k) -> (p, k, j)>
#packedC = affine_map<(m, p, j, k) -> (m, p, j)>
// CHECK-LABEL: func.func @packed
// CHECK: scf.for %[[P:.*]] = %c0 to %c3 step %c1
// CHECK: scf.for %[[M:.*]] = %c0 to %c16 step %c8
// CHECK: %[[ACC:.*]] = vector.transfer_read %{{.*}}[%[[M]], %[[P]], %c0]{{.*}} : tensor<16x3x32xf32>, vector<8x1x32xf32>
// CHECK: scf.for %[[K:.*]] = %c0 to %c64 step %c1 iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[ACC]])
// CHECK: vector.transfer_read %{{.*}}[%[[P]], %[[K]], %c0]{{.*}} : tensor<3x64x32xf32>, vector<32xf32>
// CHECK-COUNT-8: vector.outerproduct %{{.*}}, %{{.*}}, %{{.*}} {kind = #vector.kind<add>} : vector<32xf32>, f32
// CHECK: vector.transfer_write
// CHECK-NOT: linalg.generic
func.func @packed(%a: tensor<16x64xf32>, %b: tensor<3x64x32xf32>, %c: tensor<16x3x32xf32>) -> tensor<16x3x32xf32> {
  %0 = linalg.generic {indexing_maps = [#packedA, #packedB, #packedC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<16x64xf32>, tensor<3x64x32xf32>) outs(%c : tensor<16x3x32xf32>)
      attrs = {gpt.packed_matmul, gpt.register_tile = [8, 1, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]} {
  ^bb0(%x: f32, %w: f32, %acc: f32):
    %p = arith.mulf %x, %w : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<16x3x32xf32>
  return %0 : tensor<16x3x32xf32>
}

// Decode against packed weights, split across 2 threads by panel: each thread streams its
// panels front to back with a single 32-wide accumulator row.
// CHECK-LABEL: func.func @packed_row_split
// CHECK: scf.forall (%{{.*}}) in (2)
// CHECK: scf.for %{{.*}} = %c0 to %c2 step %c1
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c1
// CHECK: vector.outerproduct %{{.*}}, %{{.*}}, %{{.*}} {kind = #vector.kind<add>} : vector<32xf32>, f32
// CHECK-NOT: vector.outerproduct
// CHECK: scf.forall.in_parallel
func.func @packed_row_split(%a: tensor<1x64xf32>, %b: tensor<4x64x32xf32>, %c: tensor<1x4x32xf32>) -> tensor<1x4x32xf32> {
  %0 = linalg.generic {indexing_maps = [#packedA, #packedB, #packedC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<1x64xf32>, tensor<4x64x32xf32>) outs(%c : tensor<1x4x32xf32>)
      attrs = {gpt.packed_matmul, gpt.parallel_chunks = [0, 2], gpt.register_tile = [1, 1, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]} {
  ^bb0(%x: f32, %w: f32, %acc: f32):
    %p = arith.mulf %x, %w : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<1x4x32xf32>
  return %0 : tensor<1x4x32xf32>
}

// An elementwise generic marked [1, 32]: a loop over rows and 32-lane chunks, each one vector
// read, the computation on vector<32xf32>, one vector write.
#ew = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @elementwise
// CHECK: scf.for %{{.*}} = %c0 to %c4 step %c1
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c32
// CHECK: vector.transfer_read {{.*}} : tensor<4x64xf32>, vector<32xf32>
// CHECK: math.tanh %{{.*}} : vector<32xf32>
// CHECK: vector.transfer_write {{.*}} : vector<32xf32>, tensor<4x64xf32>
// CHECK-NOT: linalg.generic
func.func @elementwise(%a: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = linalg.generic {indexing_maps = [#ew, #ew], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<4x64xf32>) outs(%a : tensor<4x64xf32>) attrs = {gpt.register_tile = [1, 32]} {
  ^bb0(%x: f32, %o: f32):
    %t = math.tanh %x : f32
    linalg.yield %t : f32
  } -> tensor<4x64xf32>
  return %0 : tensor<4x64xf32>
}

// A row reduction marked 32: per row, a vector<32> of partial sums (starting at 0) runs across
// the row, then one vector.multi_reduction combines it with the row's initial value.
#rid = affine_map<(d0, d1) -> (d0, d1)>
#rrow = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @row_sum
// CHECK: scf.for %[[R:.*]] = %c0 to %c16 step %c1
// CHECK: scf.for %{{.*}} = %c0 to %c768 step %c32 iter_args
// CHECK: %[[X:.*]] = vector.transfer_read {{.*}} : tensor<16x768xf32>, vector<32xf32>
// CHECK: arith.addf %[[X]], %{{.*}} : vector<32xf32>
// CHECK: vector.reduction <add>, %{{.*}}, %{{.*}} : vector<32xf32> into f32
// CHECK-NOT: linalg.generic
func.func @row_sum(%x: tensor<16x768xf32>, %init: tensor<16xf32>) -> tensor<16xf32> {
  %0 = linalg.generic {indexing_maps = [#rid, #rrow], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<16x768xf32>) outs(%init : tensor<16xf32>) attrs = {gpt.row_reduction_tile = 32 : i64} {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// Epilogue fusion: the packed matmul is computed inside its bias + tanh epilogue's loops. Per
// [8 rows, 1 panel] tile the 8x32 accumulator starts as a zero constant (the fill is folded),
// runs the K loop in registers, goes through the bias add and tanh as vectors and is written
// once: no buffer holds the matmul's result.
#fA = affine_map<(m, p, j, k) -> (m, k)>
#fB = affine_map<(m, p, j, k) -> (p, k, j)>
#fC = affine_map<(m, p, j, k) -> (m, p, j)>
#f3 = affine_map<(m, p, j) -> (m, p, j)>
#fbias = affine_map<(m, p, j) -> (p, j)>
// (Checked after the canonicalization the pipeline runs after the schedule.)
// RUN: gpt-opt %s --gpt-apply-schedule=schedule=vectorize_matmuls --canonicalize | FileCheck %s --check-prefix=EPILOGUE
// EPILOGUE-LABEL: func.func @epilogue
// EPILOGUE: scf.for %[[P:.*]] = %c0 to %c4 step %c1
// EPILOGUE: scf.for %[[M:.*]] = %c0 to %c16 step %c8
// EPILOGUE: %[[ACC:.*]] = scf.for %{{.*}} = %c0 to %c64 step %c1 iter_args(%{{.*}} = %cst) -> (vector<8x1x32xf32>)
// EPILOGUE-COUNT-8: vector.outerproduct
// EPILOGUE: arith.addf %[[ACC]], %{{.*}} : vector<8x1x32xf32>
// EPILOGUE: math.tanh %{{.*}} : vector<8x1x32xf32>
// EPILOGUE: vector.transfer_write %{{.*}}, %{{.*}}[%[[M]], %[[P]], %c0]
// EPILOGUE-NOT: linalg.generic
// EPILOGUE-NOT: linalg.fill
// CHECK-LABEL: func.func @epilogue
func.func @epilogue(%x: tensor<16x64xf32>, %w: tensor<4x64x32xf32>, %bias: tensor<4x32xf32>) -> tensor<16x4x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<16x4x32xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e0 : tensor<16x4x32xf32>) -> tensor<16x4x32xf32>
  %p = linalg.generic {indexing_maps = [#fA, #fB, #fC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x64xf32>, tensor<4x64x32xf32>) outs(%init : tensor<16x4x32xf32>)
      attrs = {gpt.packed_matmul, gpt.reduction_step = [0, 0, 0, 1]} {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<16x4x32xf32>
  %e1 = tensor.empty() : tensor<16x4x32xf32>
  %out = linalg.generic {indexing_maps = [#f3, #fbias, #f3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%p, %bias : tensor<16x4x32xf32>, tensor<4x32xf32>) outs(%e1 : tensor<16x4x32xf32>)
      attrs = {gpt.epilogue_tile = [8, 1, 32], gpt.tile_interchange = [1, 0, 2], gpt.epilogue_operand = 0 : i64, gpt.epilogue_chunks = 1 : i64} {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<16x4x32xf32>
  return %out : tensor<16x4x32xf32>
}

// Split for threads: an epilogue with `gpt.epilogue_chunks = 4` becomes a forall of 4 pieces,
// one panel each, with the matmul and its fill fused into each piece and then into its tiles, as
// above.
// EPILOGUE-LABEL: func.func @split_epilogue
// EPILOGUE: scf.forall (%[[I:.*]]) in (4)
// EPILOGUE: scf.for %{{.*}} = %c0 to %c16 step %c8
// EPILOGUE: scf.for %{{.*}} = %c0 to %c64 step %c1 iter_args(%{{.*}} = %cst) -> (vector<8x1x32xf32>)
// EPILOGUE-COUNT-8: vector.outerproduct
// EPILOGUE: math.tanh %{{.*}} : vector<8x1x32xf32>
// EPILOGUE: scf.forall.in_parallel
// EPILOGUE-NOT: linalg.generic
// EPILOGUE-NOT: linalg.fill
// CHECK-LABEL: func.func @split_epilogue
func.func @split_epilogue(%x: tensor<16x64xf32>, %w: tensor<4x64x32xf32>, %bias: tensor<4x32xf32>) -> tensor<16x4x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<16x4x32xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e0 : tensor<16x4x32xf32>) -> tensor<16x4x32xf32>
  %p = linalg.generic {indexing_maps = [#fA, #fB, #fC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x64xf32>, tensor<4x64x32xf32>) outs(%init : tensor<16x4x32xf32>)
      attrs = {gpt.packed_matmul, gpt.reduction_step = [0, 0, 0, 1]} {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<16x4x32xf32>
  %e1 = tensor.empty() : tensor<16x4x32xf32>
  %out = linalg.generic {indexing_maps = [#f3, #fbias, #f3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%p, %bias : tensor<16x4x32xf32>, tensor<4x32xf32>) outs(%e1 : tensor<16x4x32xf32>)
      attrs = {gpt.epilogue_tile = [8, 1, 32], gpt.tile_interchange = [1, 0, 2], gpt.epilogue_operand = 0 : i64, gpt.epilogue_chunks = 4 : i64} {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<16x4x32xf32>
  return %out : tensor<16x4x32xf32>
}

// A q8_0 packed matmul in its bias epilogue: the scaled sum over blocks is fused into the
// epilogue's tiles (4 rows) like an f32 matmul and stepped one block at a time; there
// transform.gpt.vectorize_block_matmul fuses the block's partial sums, starting from i32 zeros,
// steps them one lane at a time and unrolls the block's 8 lane steps: each reads each row's
// activation lane as one broadcast value (4 extracts, no strided vector read and transpose), one
// row of 32 weight lanes and runs one lane dot product per accumulator row; after the block,
// one FMA per row applies (sum - compensation) * scale. No vector.contract, and no buffer of
// partial sums: the first lane step starts from a constant of zeros, not from zeros written to
// a tensor each block (bufferized, 16 stores a block that LLVM kept).
#qA = affine_map<(m, p, j, b, i) -> (m, b, i)>
#qW = affine_map<(m, p, j, b, i) -> (p, b, i, j)>
#qP = affine_map<(m, p, j, b, i) -> (m, p, b, j)>
#sP = affine_map<(m, p, j, b) -> (m, p, b, j)>
#sS = affine_map<(m, p, j, b) -> (p, b, j)>
#sX = affine_map<(m, p, j, b) -> (m, b)>
#sC = affine_map<(m, p, j, b) -> (m, p, j)>
// EPILOGUE-LABEL: func.func @q8_0_epilogue
// EPILOGUE: scf.for %{{.*}} = %c0 to %c2 step %c1 iter_args(%{{.*}} = %{{.*}}) -> (vector<4x32xf32>)
// EPILOGUE-NOT: scf.for
// EPILOGUE-NOT: vector.transfer_write {{.*}} tensor<4x1x1x32xi32>
// EPILOGUE-COUNT-4: tensor.extract %{{.*}} : tensor<4xi32>
// EPILOGUE-NOT: vector.transpose
// EPILOGUE: transformer.lane_dot_u8i8 %{{.*}} : vector<4x32xi32> -> vector<4x32xi32>
// EPILOGUE-COUNT-7: transformer.lane_dot_u8i8 %{{.*}} : vector<4x32xi32> -> vector<4x32xi32>
// EPILOGUE: arith.sitofp %{{.*}} : vector<4x32xi32> to vector<4x32xf32>
// EPILOGUE: arith.extf %{{.*}} : vector<32xf16> to vector<32xf32>
// EPILOGUE: math.fma %{{.*}} : vector<4x32xf32>
// EPILOGUE-NOT: vector.contract
// EPILOGUE-NOT: linalg.generic
// EPILOGUE-NOT: tensor<16x4x2x32xi32>
// CHECK-LABEL: func.func @q8_0_epilogue
func.func @q8_0_epilogue(%x: tensor<16x2x8xi32>, %w: tensor<4x2x8x32xi32>, %d: tensor<4x2x32xf16>, %dx: tensor<16x2xf32>,
                         %comp: tensor<16x2xf32>, %bias: tensor<4x32xf32>) -> tensor<16x4x32xf32> {
  %zero = arith.constant 0.0 : f32
  %izero = arith.constant 0 : i32
  %pe = tensor.empty() : tensor<16x4x2x32xi32>
  %zeros = linalg.fill ins(%izero : i32) outs(%pe : tensor<16x4x2x32xi32>) -> tensor<16x4x2x32xi32>
  %partials = linalg.generic {indexing_maps = [#qA, #qW, #qP],
                              iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x2x8xi32>, tensor<4x2x8x32xi32>) outs(%zeros : tensor<16x4x2x32xi32>)
      attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %q: i32, %acc: i32):
    %r = transformer.lane_dot_u8i8 %acc, %q, %a : i32 -> i32
    linalg.yield %r : i32
  } -> tensor<16x4x2x32xi32>
  %e0 = tensor.empty() : tensor<16x4x32xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e0 : tensor<16x4x32xf32>) -> tensor<16x4x32xf32>
  %p = linalg.generic {indexing_maps = [#sP, #sS, #sX, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%partials, %d, %dx, %comp : tensor<16x4x2x32xi32>, tensor<4x2x32xf16>, tensor<16x2xf32>, tensor<16x2xf32>)
      outs(%init : tensor<16x4x32xf32>) attrs = {gpt.packed_matmul, gpt.reduction_step = [0, 0, 0, 1]} {
  ^bb0(%a: i32, %s: f16, %sx: f32, %c: f32, %acc: f32):
    %af = arith.sitofp %a : i32 to f32
    %sum = arith.subf %af, %c : f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %sum, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<16x4x32xf32>
  %e1 = tensor.empty() : tensor<16x4x32xf32>
  %out = linalg.generic {indexing_maps = [#f3, #fbias, #f3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%p, %bias : tensor<16x4x32xf32>, tensor<4x32xf32>) outs(%e1 : tensor<16x4x32xf32>)
      attrs = {gpt.epilogue_tile = [4, 1, 32], gpt.tile_interchange = [1, 0, 2], gpt.epilogue_operand = 0 : i64, gpt.epilogue_chunks = 1 : i64} {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<16x4x32xf32>
  return %out : tensor<16x4x32xf32>
}
