// --transformer-to-linalg, layer_norm, rms_norm, mean and softmax: row reductions, then one elementwise generic.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// LayerNorm: a row sum, a row sum of squared deviations, then one elementwise generic.
// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[ROW:.*]] = affine_map<(d0, d1) -> (d0)>
// CHECK-DAG: #[[FEAT:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @layer_norm
// CHECK: %[[SUM:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[ROW]]], iterator_types = ["parallel", "reduction"]}
// CHECK: arith.addf
// CHECK: %[[SQ:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ROW]]], iterator_types = ["parallel", "reduction"]}
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ROW]], #[[FEAT]], #[[FEAT]], #[[ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME: ins(%{{.*}}, %[[SUM]], %[[SQ]], %{{.*}}, %{{.*}} :
// CHECK: arith.constant 1.000000e-03 : f32
// CHECK: math.rsqrt
func.func @layer_norm(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = transformer.layer_norm %x, %w, %b {epsilon = 1.0e-3 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Softmax: row max (from -inf), row sum of exp(x - max), then exp(x - max) / sum.
// CHECK-LABEL: func.func @softmax
// CHECK: %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK: linalg.fill ins(%[[NEGINF]] : f32)
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: arith.addf
// CHECK: math.exp
// CHECK: arith.divf
// CHECK-NOT: transformer.
func.func @softmax(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %0 = transformer.softmax %x : tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// -----

// Rank 1: the statistics reduce to scalars (rank-0 tensors read through a map with no results).
// CHECK-LABEL: func.func @softmax_rank_1
// CHECK: linalg.fill {{.*}} -> tensor<f32>
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}], iterator_types = ["reduction"]} ins(%{{.*}} : tensor<8xf32>) outs(%{{.*}} : tensor<f32>)
// CHECK-NOT: transformer.softmax
func.func @softmax_rank_1(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = transformer.softmax %x : tensor<8xf32> -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// CHECK-LABEL: func.func @layer_norm_rank_1
// CHECK: iterator_types = ["reduction"]
// CHECK-NOT: transformer.layer_norm
func.func @layer_norm_rank_1(%x: tensor<8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  %0 = transformer.layer_norm %x, %w, %b {epsilon = 1.0e-5 : f32} : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// RMSNorm: one row reduction (the sum of squares), then x * rsqrt(sum / n + eps) * weight.
// CHECK-LABEL: func.func @rms_norm
// CHECK: %[[SQ:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} ins(%{{.*}} : tensor<4x8xf32>)
// CHECK: arith.mulf %[[IN:.*]], %[[IN]] : f32
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]{{.*}} ins(%{{.*}}, %[[SQ]], %{{.*}} : tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32>)
// CHECK: arith.constant 1.250000e-01 : f32
// CHECK: arith.constant 9.99999997E-7 : f32
// CHECK: math.rsqrt
// CHECK-NOT: arith.subf
// CHECK: linalg.yield
func.func @rms_norm(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = transformer.rms_norm %x, %w {epsilon = 1.0e-6 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Mean over the last dim: a row sum, times 1 / n, expanded back to a trailing dim of 1.
// CHECK-LABEL: func.func @mean
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]{{.*}} ins(%{{.*}} : tensor<2x4x8xf32>) outs(%{{.*}} : tensor<2x4xf32>)
// CHECK: arith.addf
// CHECK: %[[MEAN:.*]] = linalg.generic {{.*}} ins(%[[SUM]] : tensor<2x4xf32>)
// CHECK: arith.constant 1.250000e-01 : f32
// CHECK: arith.mulf
// CHECK: %[[R:.*]] = tensor.expand_shape %[[MEAN]] {{\[\[}}0], [1, 2]] output_shape [2, 4, 1] : tensor<2x4xf32> into tensor<2x4x1xf32>
// CHECK: return %[[R]]
func.func @mean(%x: tensor<2x4x8xf32>) -> tensor<2x4x1xf32> {
  %0 = transformer.mean %x : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  return %0 : tensor<2x4x1xf32>
}

// -----

// The mean of a vector: a rank-0 sum, expanded to tensor<1xf32>.
// CHECK-LABEL: func.func @mean_rank_1
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction"]{{.*}} outs(%{{.*}} : tensor<f32>)
// CHECK: tensor.expand_shape %{{.*}} [] output_shape [1] : tensor<f32> into tensor<1xf32>
func.func @mean_rank_1(%x: tensor<8xf32>) -> tensor<1xf32> {
  %0 = transformer.mean %x : tensor<8xf32> -> tensor<1xf32>
  return %0 : tensor<1xf32>
}
