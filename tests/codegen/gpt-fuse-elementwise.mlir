// --gpt-fuse-elementwise: upstream elementwise fusion, except into or out of packed matmuls.
// RUN: gpt-opt %s --split-input-file --gpt-fuse-elementwise | FileCheck %s

#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
#pA = affine_map<(m, p, j, k) -> (m, k)>
#pB = affine_map<(m, p, j, k) -> (p, k, j)>
#pC = affine_map<(m, p, j, k) -> (m, p, j)>

// The scaling before the packed matmul (standing for LayerNorm's normalization) stays a separate
// op: fused in, it would be recomputed once per panel. The bias add after it is not merged
// either, but the reshape moves past it, so it works on the [M, panel, column] layout.
// CHECK-LABEL: func.func @packed_stays_whole
// CHECK: %[[S:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]
// CHECK: arith.mulf
// CHECK: %[[P:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// CHECK-SAME: ins(%[[S]], %{{.*}} : tensor<8x64xf32>, tensor<2x64x32xf32>)
// CHECK-SAME: gpt.packed_matmul
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel"]
// CHECK-SAME: ins(%[[P]], %{{.*}} : tensor<8x2x32xf32>, tensor<2x32xf32>)
// CHECK: arith.addf
// CHECK: tensor.collapse_shape
func.func @packed_stays_whole(%x: tensor<8x64xf32>, %w: tensor<2x64x32xf32>, %bias: tensor<64xf32>) -> tensor<8x64xf32> {
  %cst = arith.constant 0.5 : f32
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x64xf32>
  %scaled = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x64xf32>) outs(%e : tensor<8x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %cst : f32
    linalg.yield %m : f32
  } -> tensor<8x64xf32>
  %pe = tensor.empty() : tensor<8x2x32xf32>
  %init = linalg.fill ins(%zero : f32) outs(%pe : tensor<8x2x32xf32>) -> tensor<8x2x32xf32>
  %p = linalg.generic {indexing_maps = [#pA, #pB, #pC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%scaled, %w : tensor<8x64xf32>, tensor<2x64x32xf32>) outs(%init : tensor<8x2x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x2x32xf32>
  %flat = tensor.collapse_shape %p [[0], [1, 2]] : tensor<8x2x32xf32> into tensor<8x64xf32>
  %out = linalg.generic {indexing_maps = [#id2, #row, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%flat, %bias : tensor<8x64xf32>, tensor<64xf32>) outs(%e : tensor<8x64xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<8x64xf32>
  return %out : tensor<8x64xf32>
}

// -----

#id2 = affine_map<(d0, d1) -> (d0, d1)>

// Elsewhere it fuses as upstream does: two elementwise ops become one.
// CHECK-LABEL: func.func @chain
// CHECK: linalg.generic
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK-NOT: linalg.generic
func.func @chain(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %cst = arith.constant 0.5 : f32
  %e = tensor.empty() : tensor<8x64xf32>
  %0 = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x64xf32>) outs(%e : tensor<8x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %cst : f32
    linalg.yield %m : f32
  } -> tensor<8x64xf32>
  %1 = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%0 : tensor<8x64xf32>) outs(%e : tensor<8x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %cst : f32
    linalg.yield %s : f32
  } -> tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}

// -----

#id1 = affine_map<(d0) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// An in-place update (l' = c l + s, computed over l) read by a consumer through a broadcasting
// map stays apart: fused, l would stay an output of the [4, 16] generic, updated once per column.
// CHECK-LABEL: func.func @in_place_update_under_broadcast
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]
// CHECK-SAME: outs(%{{.*}} : tensor<4xf32>)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]
// CHECK-SAME: ins(%{{.*}}, %[[SUM]] : tensor<4x16xf32>, tensor<4xf32>)
func.func @in_place_update_under_broadcast(%l: tensor<4xf32>, %c: tensor<4xf32>, %acc: tensor<4x16xf32>)
    -> tensor<4x16xf32> {
  %sum = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}
      ins(%c : tensor<4xf32>) outs(%l : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %o, %a : f32
    %s = arith.addf %m, %a : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %e = tensor.empty() : tensor<4x16xf32>
  %out = linalg.generic {indexing_maps = [#id2, #row, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%acc, %sum : tensor<4x16xf32>, tensor<4xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.divf %a, %b : f32
    linalg.yield %d : f32
  } -> tensor<4x16xf32>
  return %out : tensor<4x16xf32>
}

// -----

#id1 = affine_map<(d0) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// A producer that only writes its output (an empty destination) still fuses under a broadcast.
// CHECK-LABEL: func.func @fresh_value_under_broadcast
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]
// CHECK: arith.mulf
// CHECK: arith.divf
// CHECK-NOT: linalg.generic
func.func @fresh_value_under_broadcast(%c: tensor<4xf32>, %acc: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %e1 = tensor.empty() : tensor<4xf32>
  %twice = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}
      ins(%c : tensor<4xf32>) outs(%e1 : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %a : f32
    linalg.yield %m : f32
  } -> tensor<4xf32>
  %e = tensor.empty() : tensor<4x16xf32>
  %out = linalg.generic {indexing_maps = [#id2, #row, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%acc, %twice : tensor<4x16xf32>, tensor<4xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.divf %a, %b : f32
    linalg.yield %d : f32
  } -> tensor<4x16xf32>
  return %out : tensor<4x16xf32>
}
