// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transform-interpreter | FileCheck %s

// transform.gpt.tile_by_attribute tiles each op by the sizes and loop order it carries: the
// packed matmul's panel loop runs outermost, then M, column and K.
#pA = affine_map<(m, p, j, k) -> (m, k)>
#pB = affine_map<(m, p, j, k) -> (p, k, j)>
#pC = affine_map<(m, p, j, k) -> (m, p, j)>
// CHECK-LABEL: func.func @packed
// CHECK: scf.for %{{.*}} = %{{.*}} to %c6 step %c1
// CHECK:   scf.for %{{.*}} = %{{.*}} to %c16 step %c8
// CHECK:     scf.for %{{.*}} = %{{.*}} to %c32 step %c32
// CHECK:       scf.for %{{.*}} = %{{.*}} to %c64 step %{{.*}}
// CHECK:         linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<8x1xf32>, tensor<1x1x32xf32>)
func.func @packed(%x: tensor<16x64xf32>, %w: tensor<6x64x32xf32>, %init: tensor<16x6x32xf32>) -> tensor<16x6x32xf32> {
  %0 = linalg.generic {indexing_maps = [#pA, #pB, #pC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x64xf32>, tensor<6x64x32xf32>) outs(%init : tensor<16x6x32xf32>)
      attrs = {gpt.packed_matmul, gpt.register_tile = [8, 1, 32, 1], gpt.tile_interchange = [1, 0, 2, 3]} {
    ^bb0(%a: f32, %b: f32, %c: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %c, %m : f32
      linalg.yield %s : f32
  } -> tensor<16x6x32xf32>
  return %0 : tensor<16x6x32xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %ops = transform.gpt.match_attribute "gpt.register_tile" in %root : (!transform.any_op) -> !transform.any_op
    %tile, %loops = transform.gpt.tile_by_attribute %ops "gpt.register_tile"
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// transform.gpt.split_for_threads splits by gpt.parallel_chunks: [0, 2] is two pieces of N.
// CHECK-LABEL: func.func @split
// CHECK: scf.forall (%{{.*}}) in (2)
// CHECK:   linalg.matmul {gpt.parallel_chunks = [0, 2]} ins(%{{.*}}, %{{.*}} : tensor<16x64xf32>, tensor<64x64xf32>)
func.func @split(%a: tensor<16x64xf32>, %b: tensor<64x128xf32>, %c: tensor<16x128xf32>) -> tensor<16x128xf32> {
  %0 = linalg.matmul {gpt.parallel_chunks = [0, 2]} ins(%a, %b : tensor<16x64xf32>, tensor<64x128xf32>) outs(%c : tensor<16x128xf32>) -> tensor<16x128xf32>
  return %0 : tensor<16x128xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %ops = transform.gpt.match_attribute "gpt.parallel_chunks" in %root : (!transform.any_op) -> !transform.any_op
    %chunk, %forall = transform.gpt.split_for_threads %ops : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// A script naming an attribute CodegenAttributes.h does not define fails instead of matching
// nothing.
func.func @typo() {
  return
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    // expected-error @below {{'gpt.register_tiles' is not a gpt codegen attribute}}
    %ops = transform.gpt.match_attribute "gpt.register_tiles" in %root : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
