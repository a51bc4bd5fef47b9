// --transformer-to-linalg, matmul and packed_matmul: linalg.matmul / batch_matmul, or a generic over panels.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// CHECK-LABEL: func.func @matmul_2d
// CHECK: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[FILL:.*]] = linalg.fill ins(%[[ZERO]] : f32) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8x16xf32>) outs(%[[FILL]] : tensor<4x16xf32>)
func.func @matmul_2d(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %0 = transformer.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

// A weight shared by every batch: the batch folds into M and one 2-D matmul runs.
// CHECK-LABEL: func.func @matmul_shared_weight
// CHECK: %[[FLAT:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<2x4x8xf32> into tensor<8x8xf32>
// CHECK: %[[MM:.*]] = linalg.matmul ins(%[[FLAT]], %{{.*}} : tensor<8x8xf32>, tensor<8x16xf32>)
// CHECK: tensor.expand_shape %[[MM]] {{\[\[}}0, 1], [2]] output_shape [2, 4, 16] : tensor<8x16xf32> into tensor<2x4x16xf32>
func.func @matmul_shared_weight(%x: tensor<2x4x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x4x16xf32> {
  %0 = transformer.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

// -----

// CHECK-LABEL: func.func @matmul_batched
// CHECK: linalg.batch_matmul ins(%{{.*}}, %{{.*}} : tensor<3x4x8xf32>, tensor<3x8x5xf32>) outs(%{{.*}} : tensor<3x4x5xf32>)
func.func @matmul_batched(%a: tensor<3x4x8xf32>, %b: tensor<3x8x5xf32>) -> tensor<3x4x5xf32> {
  %0 = transformer.matmul %a, %b : (tensor<3x4x8xf32>, tensor<3x8x5xf32>) -> tensor<3x4x5xf32>
  return %0 : tensor<3x4x5xf32>
}

// -----

// Rank 4 (batch x heads): the two batch dims fold into one for linalg.batch_matmul.
// CHECK-LABEL: func.func @matmul_rank4
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2], [3]] : tensor<2x3x4x8xf32> into tensor<6x4x8xf32>
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2], [3]] : tensor<2x3x8x5xf32> into tensor<6x8x5xf32>
// CHECK: %[[BMM:.*]] = linalg.batch_matmul
// CHECK: tensor.expand_shape %[[BMM]] {{\[\[}}0, 1], [2], [3]] output_shape [2, 3, 4, 5]
func.func @matmul_rank4(%a: tensor<2x3x4x8xf32>, %b: tensor<2x3x8x5xf32>) -> tensor<2x3x4x5xf32> {
  %0 = transformer.matmul %a, %b : (tensor<2x3x4x8xf32>, tensor<2x3x8x5xf32>) -> tensor<2x3x4x5xf32>
  return %0 : tensor<2x3x4x5xf32>
}

// -----

// A packed weight [N/P, K, P]: one generic over (m, panel, column, k) marked gpt.packed_matmul,
// reading the panel as (panel, k, column); its [M, N/P, P] result is viewed as [M, N] and the
// batch dims of x are folded into M and restored.
// CHECK-DAG: #[[A:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
// CHECK-DAG: #[[W:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d3, d2)>
// CHECK-DAG: #[[C:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @packed_matmul
// CHECK: %[[X:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0, 1], [2]] : tensor<2x4x8xf32> into tensor<8x8xf32>
// CHECK: %[[ZERO:.*]] = linalg.fill {{.*}} -> tensor<8x3x32xf32>
// CHECK: %[[P:.*]] = linalg.generic {indexing_maps = [#[[A]], #[[W]], #[[C]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK-SAME: ins(%[[X]], %{{.*}} : tensor<8x8xf32>, tensor<3x8x32xf32>) outs(%[[ZERO]] : tensor<8x3x32xf32>)
// CHECK-SAME: gpt.packed_matmul
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: %[[N:.*]] = tensor.collapse_shape %[[P]] {{\[}}[0], [1, 2]] : tensor<8x3x32xf32> into tensor<8x96xf32>
// CHECK: tensor.expand_shape %[[N]] {{\[}}[0, 1], [2]] output_shape [2, 4, 96] : tensor<8x96xf32> into tensor<2x4x96xf32>
func.func @packed_matmul(%x: tensor<2x4x8xf32>, %w: tensor<3x8x32xf32>) -> tensor<2x4x96xf32> {
  %0 = transformer.packed_matmul %x, %w : (tensor<2x4x8xf32>, tensor<3x8x32xf32>) -> tensor<2x4x96xf32>
  return %0 : tensor<2x4x96xf32>
}

// -----

// A bf16 weight is widened to f32 as it is read; the product accumulates in f32.
// CHECK-LABEL: func.func @packed_matmul_bf16
// CHECK: linalg.generic
// CHECK-SAME: ins(%{{.*}}, %{{.*}} : tensor<8x8xf32>, tensor<3x8x32xbf16>) outs(%{{.*}} : tensor<8x3x32xf32>)
// CHECK: ^bb0(%[[A:.*]]: f32, %[[W:.*]]: bf16, %[[ACC:.*]]: f32):
// CHECK: %[[WIDE:.*]] = arith.extf %[[W]] : bf16 to f32
// CHECK: %[[PROD:.*]] = arith.mulf %[[A]], %[[WIDE]] : f32
// CHECK: arith.addf %[[ACC]], %[[PROD]] : f32
func.func @packed_matmul_bf16(%x: tensor<8x8xf32>, %w: tensor<3x8x32xbf16>) -> tensor<8x96xf32> {
  %0 = transformer.packed_matmul %x, %w : (tensor<8x8xf32>, tensor<3x8x32xbf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}

// -----

// q8_0, in two generics. The block partial sums (marked gpt.block_partials) split K into
// (block, index in block): the lhs viewed as [M, K/32, 32], the codes as [N/P, K/32, 32, P],
// each code widened (sitofp) and accumulated with an fma into [M, N/P, K/32, P]. The packed
// matmul proper then sums the partials over blocks, each times its block's scale: one multiply
// per block, not per weight.
// CHECK-DAG: #[[QA:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>
// CHECK-DAG: #[[QW:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d1, d3, d4, d2)>
// CHECK-DAG: #[[QP:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d2)>
// CHECK-DAG: #[[SP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3, d2)>
// CHECK-DAG: #[[SS:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d3, d2)>
// CHECK-DAG: #[[SC:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @packed_matmul_q8_0
// CHECK: %[[ZERO:.*]] = linalg.fill {{.*}} -> tensor<8x3x2x32xf32>
// CHECK: %[[X:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2]] output_shape [8, 2, 32] : tensor<8x64xf32> into tensor<8x2x32xf32>
// CHECK: %[[W:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2], [3]] output_shape [3, 2, 32, 32] : tensor<3x64x32xi8> into tensor<3x2x32x32xi8>
// CHECK: %[[PARTIALS:.*]] = linalg.generic {indexing_maps = [#[[QA]], #[[QW]], #[[QP]]], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
// CHECK-SAME: ins(%[[X]], %[[W]] : tensor<8x2x32xf32>, tensor<3x2x32x32xi8>) outs(%[[ZERO]] : tensor<8x3x2x32xf32>)
// CHECK-SAME: gpt.block_partials
// CHECK: ^bb0(%[[A:.*]]: f32, %[[Q:.*]]: i8, %[[ACC:.*]]: f32):
// CHECK: %[[QF:.*]] = arith.sitofp %[[Q]] : i8 to f32
// CHECK: math.fma %[[A]], %[[QF]], %[[ACC]] : f32
// CHECK: linalg.generic {indexing_maps = [#[[SP]], #[[SS]], #[[SC]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK-SAME: ins(%[[PARTIALS]], %{{.*}} : tensor<8x3x2x32xf32>, tensor<3x2x32xf16>) outs(%{{.*}} : tensor<8x3x32xf32>)
// CHECK-SAME: gpt.packed_matmul
// CHECK: ^bb0(%[[P:.*]]: f32, %[[D:.*]]: f16, %[[OUT:.*]]: f32):
// CHECK: %[[DF:.*]] = arith.extf %[[D]] : f16 to f32
// CHECK: math.fma %[[P]], %[[DF]], %[[OUT]] : f32
func.func @packed_matmul_q8_0(%x: tensor<8x64xf32>, %w: tensor<3x64x32xi8>, %s: tensor<3x2x32xf16>) -> tensor<8x96xf32> {
  %0 = transformer.packed_matmul %x, %w, %s : (tensor<8x64xf32>, tensor<3x64x32xi8>, tensor<3x2x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}

// -----

// q4_0: byte i of a block holds weight i (low nibble) and weight i + 16 (high nibble), so the
// partial sums run over the 16 bytes of each block and read the lhs as its two halves; each
// nibble c contributes (c - 8) times its activation. The scaled sum over blocks is as for q8_0.
// CHECK-LABEL: func.func @packed_matmul_q4_0
// CHECK: %[[X:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2, 3]] output_shape [8, 2, 2, 16] : tensor<8x64xf32> into tensor<8x2x2x16xf32>
// CHECK: %[[W:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2], [3]] output_shape [3, 2, 16, 32] : tensor<3x32x32xi8> into tensor<3x2x16x32xi8>
// CHECK: %[[LO:.*]] = tensor.extract_slice %[[X]][0, 0, 0, 0] [8, 2, 1, 16] [1, 1, 1, 1] : tensor<8x2x2x16xf32> to tensor<8x2x16xf32>
// CHECK: %[[HI:.*]] = tensor.extract_slice %[[X]][0, 0, 1, 0] [8, 2, 1, 16] [1, 1, 1, 1] : tensor<8x2x2x16xf32> to tensor<8x2x16xf32>
// CHECK: %[[PARTIALS:.*]] = linalg.generic
// CHECK-SAME: ins(%[[LO]], %[[HI]], %[[W]] : tensor<8x2x16xf32>, tensor<8x2x16xf32>, tensor<3x2x16x32xi8>)
// CHECK-SAME: gpt.block_partials
// CHECK: ^bb0(%[[A:.*]]: f32, %[[B:.*]]: f32, %[[Q:.*]]: i8, %[[ACC:.*]]: f32):
// CHECK-DAG: %[[LOW:.*]] = arith.andi %[[Q]], %c15_i8 : i8
// CHECK-DAG: %[[HIGH:.*]] = arith.shrui %[[Q]], %c4_i8 : i8
// CHECK: arith.subi %[[LOW]], %c8_i8 : i8
// CHECK: arith.subi %[[HIGH]], %{{.*}} : i8
// CHECK: %[[SUM:.*]] = math.fma %[[A]], %{{.*}}, %[[ACC]] : f32
// CHECK: math.fma %[[B]], %{{.*}}, %[[SUM]] : f32
// CHECK: linalg.generic
// CHECK-SAME: ins(%[[PARTIALS]], %{{.*}} : tensor<8x3x2x32xf32>, tensor<3x2x32xf16>)
// CHECK-SAME: gpt.packed_matmul
func.func @packed_matmul_q4_0(%x: tensor<8x64xf32>, %w: tensor<3x32x32xi8>, %s: tensor<3x2x32xf16>) -> tensor<8x96xf32> {
  %0 = transformer.packed_matmul %x, %w, %s : (tensor<8x64xf32>, tensor<3x32x32xi8>, tensor<3x2x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}
