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

// -----

// transform.gpt.fuse_into_loop computes a matmul and its zero fill inside each piece of the
// consumer's scf.forall, at the piece's slice. The fill's use after the loop (a second matmul
// CSE gave the same zeros) keeps the fill itself.
// CHECK-LABEL: func.func @fuse
// CHECK: %[[ZEROS:.*]] = linalg.fill
// CHECK: scf.forall (%[[I:.*]]) in (2)
// CHECK:   %[[FILL:.*]] = linalg.fill {{.*}} -> tensor<16x64xf32>
// CHECK:   %[[MATMUL:.*]] = linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x64xf32>, tensor<64x64xf32>) outs(%[[FILL]] : tensor<16x64xf32>)
// CHECK:   linalg.add ins(%[[MATMUL]], %{{.*}} : tensor<16x64xf32>, tensor<16x64xf32>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x64xf32>, tensor<64x128xf32>) outs(%[[ZEROS]] : tensor<16x128xf32>)
func.func @fuse(%a: tensor<16x64xf32>, %b: tensor<64x128xf32>, %bias: tensor<16x128xf32>)
    -> (tensor<16x128xf32>, tensor<16x128xf32>) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<16x128xf32>
  %zeros = linalg.fill ins(%zero : f32) outs(%empty : tensor<16x128xf32>) -> tensor<16x128xf32>
  %product = linalg.matmul ins(%a, %b : tensor<16x64xf32>, tensor<64x128xf32>) outs(%zeros : tensor<16x128xf32>) -> tensor<16x128xf32>
  %sum = linalg.add ins(%product, %bias : tensor<16x128xf32>, tensor<16x128xf32>) outs(%empty : tensor<16x128xf32>) -> tensor<16x128xf32>
  %other = linalg.matmul ins(%a, %b : tensor<16x64xf32>, tensor<64x128xf32>) outs(%zeros : tensor<16x128xf32>) -> tensor<16x128xf32>
  return %sum, %other : tensor<16x128xf32>, tensor<16x128xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %add = transform.structured.match ops{["linalg.add"]} in %root : (!transform.any_op) -> !transform.any_op
    %matmul = transform.get_producer_of_operand %add[0] : (!transform.any_op) -> !transform.any_op
    %fill = transform.get_producer_of_operand %matmul[2] : (!transform.any_op) -> !transform.any_op
    %piece, %forall = transform.structured.tile_using_forall %add num_threads [0, 2]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %fusedMatmul, %forall2 = transform.gpt.fuse_into_loop %matmul into %forall
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
    %fusedFill, %forall3 = transform.gpt.fuse_into_loop %fill into %forall2
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// A producer the loop does not read in slices is not fused.
func.func @unread(%a: tensor<16x128xf32>, %b: tensor<16x128xf32>) -> (tensor<16x128xf32>, tensor<16x128xf32>) {
  %empty = tensor.empty() : tensor<16x128xf32>
  // expected-note @below {{producer}}
  %unrelated = linalg.add ins(%a, %b : tensor<16x128xf32>, tensor<16x128xf32>) outs(%empty : tensor<16x128xf32>) -> tensor<16x128xf32>
  %sum = linalg.sub ins(%a, %b : tensor<16x128xf32>, tensor<16x128xf32>) outs(%empty : tensor<16x128xf32>) -> tensor<16x128xf32>
  return %unrelated, %sum : tensor<16x128xf32>, tensor<16x128xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %add = transform.structured.match ops{["linalg.add"]} in %root : (!transform.any_op) -> !transform.any_op
    %sub = transform.structured.match ops{["linalg.sub"]} in %root : (!transform.any_op) -> !transform.any_op
    %piece, %forall = transform.structured.tile_using_forall %sub num_threads [0, 2]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    // expected-error @below {{expected a tileable producer whose result the loop reads in slices}}
    %fused, %forall2 = transform.gpt.fuse_into_loop %add into %forall
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}
