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
  %0 = transformer.packed_matmul f32 %x, %w : (tensor<2x4x8xf32>, tensor<3x8x32xf32>) -> tensor<2x4x96xf32>
  return %0 : tensor<2x4x96xf32>
}

// -----

// A bf16 weight multiplies bf16 activations: the rows are rounded to nearest even (in integer
// arithmetic) and paired into lanes, x[m, r] low and x[m, r + K/2] high, from the two contiguous
// halves of each row; the packed matmul accumulates lane dot products over K/2 steps in f32.
// CHECK-LABEL: func.func @packed_matmul_bf16
// CHECK: %[[HALVES:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2]] output_shape [8, 2, 4] : tensor<8x8xf32> into tensor<8x2x4xf32>
// CHECK: %[[LO:.*]] = tensor.extract_slice %[[HALVES]][0, 0, 0] [8, 1, 4] [1, 1, 1] : tensor<8x2x4xf32> to tensor<8x4xf32>
// CHECK: %[[HI:.*]] = tensor.extract_slice %[[HALVES]][0, 1, 0] [8, 1, 4] [1, 1, 1] : tensor<8x2x4xf32> to tensor<8x4xf32>
// CHECK: %[[LANES:.*]] = linalg.generic
// CHECK-SAME: ins(%[[LO]], %[[HI]] : tensor<8x4xf32>, tensor<8x4xf32>) outs(%{{.*}} : tensor<8x4xi32>)
// CHECK: arith.bitcast %{{.*}} : f32 to i32
// CHECK: arith.cmpf uno
// CHECK: linalg.generic
// CHECK-SAME: ins(%[[LANES]], %{{.*}} : tensor<8x4xi32>, tensor<3x4x32xi32>) outs(%{{.*}} : tensor<8x3x32xf32>)
// CHECK-SAME: gpt.packed_matmul
// CHECK: ^bb0(%[[A:.*]]: i32, %[[W:.*]]: i32, %[[ACC:.*]]: f32):
// CHECK: transformer.lane_dot_bf16 %[[ACC]], %[[A]], %[[W]] : i32 -> f32
func.func @packed_matmul_bf16(%x: tensor<8x8xf32>, %w: tensor<3x4x32xi32>) -> tensor<8x96xf32> {
  %0 = transformer.packed_matmul bf16 %x, %w : (tensor<8x8xf32>, tensor<3x4x32xi32>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}

// -----

// q8_0. The activations are quantized per block of 32 (generics marked
// gpt.quantizes_activations): the blocks as rows of 32 give max |x| and the compensation
// 128 * sum(code), d = max / 127, and the lanes pack the codes of x[32 b + q + 8 i] (i < 4) from
// four contiguous runs of 8. The block partial sums (gpt.block_partials) multiply them with the
// weight lanes, each byte's top bit flipped (code + 128, the unsigned operand), in i32; the
// packed matmul proper sums (partial - compensation) * d_w * d_x over blocks.
// CHECK-DAG: #[[QA:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>
// CHECK-DAG: #[[QW:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d1, d3, d4, d2)>
// CHECK-DAG: #[[QP:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d2)>
// CHECK-DAG: #[[SP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3, d2)>
// CHECK-DAG: #[[SS:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d3, d2)>
// CHECK-DAG: #[[SX:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
// CHECK-DAG: #[[SC:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @packed_matmul_q8_0
// CHECK: %[[ROWS:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0, 1], [2]] : tensor<8x2x32xf32> into tensor<16x32xf32>
// CHECK: %[[AMAX:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[ROWS]] : tensor<16x32xf32>)
// CHECK-SAME: gpt.quantizes_activations
// CHECK: math.absf
// CHECK: arith.maximumf
// CHECK: %[[D:.*]] = linalg.generic {{.*}} ins(%[[AMAX]] : tensor<16xf32>)
// CHECK: arith.divf %{{.*}}, %{{.*}} : f32
// CHECK: %[[COMP:.*]] = linalg.generic {{.*}} ins(%[[ROWS]], %[[D]] : tensor<16x32xf32>, tensor<16xf32>)
// 1 / d capped at the largest f32 (a tiny block's 1 / d is infinite):
// CHECK: arith.constant 3.40282347E+38 : f32
// CHECK: arith.minimumf %{{.*}}, %{{.*}} : f32
// CHECK: math.roundeven
// CHECK: arith.constant 1.280000e+02 : f32
// CHECK: %[[RUNS:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2, 3]] output_shape [8, 2, 4, 8] : tensor<8x64xf32> into tensor<8x2x4x8xf32>
// CHECK: tensor.extract_slice %[[RUNS]][0, 0, 3, 0] [8, 2, 1, 8] [1, 1, 1, 1] : tensor<8x2x4x8xf32> to tensor<8x2x8xf32>
// CHECK: %[[XLANES:.*]] = linalg.generic
// CHECK-SAME: outs(%{{.*}} : tensor<8x2x8xi32>) attrs = {gpt.quantizes_activations}
// CHECK: arith.fptosi %{{.*}} : f32 to i32
// CHECK: %[[ZERO:.*]] = linalg.fill {{.*}} -> tensor<8x3x2x32xi32>
// CHECK: %[[W:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2], [3]] output_shape [3, 2, 8, 32] : tensor<3x16x32xi32> into tensor<3x2x8x32xi32>
// CHECK: %[[PARTIALS:.*]] = linalg.generic {indexing_maps = [#[[QA]], #[[QW]], #[[QP]]], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
// CHECK-SAME: ins(%[[XLANES]], %[[W]] : tensor<8x2x8xi32>, tensor<3x2x8x32xi32>) outs(%[[ZERO]] : tensor<8x3x2x32xi32>)
// CHECK-SAME: gpt.block_partials
// CHECK: ^bb0(%[[A:.*]]: i32, %[[Q:.*]]: i32, %[[ACC:.*]]: i32):
// CHECK: %[[U:.*]] = arith.xori %[[Q]], %c-2139062144_i32 : i32
// CHECK: transformer.lane_dot_u8i8 %[[ACC]], %[[U]], %[[A]] : i32 -> i32
// CHECK: linalg.generic {indexing_maps = [#[[SP]], #[[SS]], #[[SX]], #[[SX]], #[[SC]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK-SAME: ins(%[[PARTIALS]], %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x3x2x32xi32>, tensor<3x2x32xf16>, tensor<8x2xf32>, tensor<8x2xf32>) outs(%{{.*}} : tensor<8x3x32xf32>)
// CHECK-SAME: gpt.packed_matmul
// CHECK: ^bb0(%[[P:.*]]: i32, %[[DW:.*]]: f16, %[[DX:.*]]: f32, %[[C:.*]]: f32, %[[OUT:.*]]: f32):
// CHECK: %[[PF:.*]] = arith.sitofp %[[P]] : i32 to f32
// CHECK: %[[SUM:.*]] = arith.subf %[[PF]], %[[C]] : f32
// CHECK: %[[DWF:.*]] = arith.extf %[[DW]] : f16 to f32
// CHECK: %[[SCALE:.*]] = arith.mulf %[[DWF]], %[[DX]] : f32
// CHECK: math.fma %[[SUM]], %[[SCALE]], %[[OUT]] : f32
func.func @packed_matmul_q8_0(%x: tensor<8x64xf32>, %w: tensor<3x16x32xi32>, %s: tensor<3x2x32xf16>) -> tensor<8x96xf32> {
  %0 = transformer.packed_matmul q8_0 %x, %w, %s : (tensor<8x64xf32>, tensor<3x16x32xi32>, tensor<3x2x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}

// -----

// q4_0: a weight lane's low nibbles (unsigned codes) line up with activation lane o of the block
// and its high nibbles with lane o + 4, so the partial sums run over 4 weight lanes per block
// with the activation lanes as two halves; the compensation is 8 * sum(code).
// CHECK-LABEL: func.func @packed_matmul_q4_0
// CHECK: arith.constant 8.000000e+00 : f32
// CHECK: %[[PAIRS:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1], [2, 3]] output_shape [8, 2, 2, 4] : tensor<8x2x8xi32> into tensor<8x2x2x4xi32>
// CHECK: %[[LO:.*]] = tensor.extract_slice %[[PAIRS]][0, 0, 0, 0] [8, 2, 1, 4] [1, 1, 1, 1] : tensor<8x2x2x4xi32> to tensor<8x2x4xi32>
// CHECK: %[[HI:.*]] = tensor.extract_slice %[[PAIRS]][0, 0, 1, 0] [8, 2, 1, 4] [1, 1, 1, 1] : tensor<8x2x2x4xi32> to tensor<8x2x4xi32>
// CHECK: %[[W:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2], [3]] output_shape [3, 2, 4, 32] : tensor<3x8x32xi32> into tensor<3x2x4x32xi32>
// CHECK: %[[PARTIALS:.*]] = linalg.generic
// CHECK-SAME: ins(%[[LO]], %[[HI]], %[[W]] : tensor<8x2x4xi32>, tensor<8x2x4xi32>, tensor<3x2x4x32xi32>)
// CHECK-SAME: gpt.block_partials
// CHECK: ^bb0(%[[A:.*]]: i32, %[[B:.*]]: i32, %[[Q:.*]]: i32, %[[ACC:.*]]: i32):
// CHECK: %[[LOW:.*]] = arith.andi %[[Q]], %c252645135_i32 : i32
// CHECK: %[[SHIFTED:.*]] = arith.shrui %[[Q]], %c4_i32 : i32
// CHECK: %[[HIGH:.*]] = arith.andi %[[SHIFTED]], %c252645135_i32 : i32
// CHECK: %[[SUM:.*]] = transformer.lane_dot_u8i8 %[[ACC]], %[[LOW]], %[[A]] : i32 -> i32
// CHECK: transformer.lane_dot_u8i8 %[[SUM]], %[[HIGH]], %[[B]] : i32 -> i32
// CHECK: linalg.generic
// CHECK-SAME: ins(%[[PARTIALS]], %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x3x2x32xi32>, tensor<3x2x32xf16>, tensor<8x2xf32>, tensor<8x2xf32>)
// CHECK-SAME: gpt.packed_matmul
func.func @packed_matmul_q4_0(%x: tensor<8x64xf32>, %w: tensor<3x8x32xi32>, %s: tensor<3x2x32xf16>) -> tensor<8x96xf32> {
  %0 = transformer.packed_matmul q4_0 %x, %w, %s : (tensor<8x64xf32>, tensor<3x8x32xi32>, tensor<3x2x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}

// -----

// q4_1: q4_0's partial sums over unsigned codes, with no offset to take out; the scales operand's
// rows (block b's scale in row 2 b, its min in 2 b + 1) are split into pairs and read as two views, and a block adds d_x * (d_w * partial + min * sum(code)):
// the min term first, then the scaled partial sum.
// CHECK-LABEL: func.func @packed_matmul_q4_1
// CHECK-NOT: arith.constant 8.000000e+00 : f32
// CHECK: %[[PARTIALS:.*]] = linalg.generic {{.*}}gpt.block_partials
// CHECK: transformer.lane_dot_u8i8
// CHECK: transformer.lane_dot_u8i8
// CHECK: %[[S:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2], [3]] output_shape [3, 2, 2, 32] : tensor<3x4x32xf16> into tensor<3x2x2x32xf16>
// CHECK: %[[D:.*]] = tensor.extract_slice %[[S]][0, 0, 0, 0] [3, 2, 1, 32] [1, 1, 1, 1] : tensor<3x2x2x32xf16> to tensor<3x2x32xf16>
// CHECK: %[[M:.*]] = tensor.extract_slice %[[S]][0, 0, 1, 0] [3, 2, 1, 32] [1, 1, 1, 1] : tensor<3x2x2x32xf16> to tensor<3x2x32xf16>
// CHECK: linalg.generic
// CHECK-SAME: ins(%[[PARTIALS]], %[[D]], %[[M]], %{{.*}}, %{{.*}} : tensor<8x3x2x32xi32>, tensor<3x2x32xf16>, tensor<3x2x32xf16>, tensor<8x2xf32>, tensor<8x2xf32>)
// CHECK-SAME: gpt.packed_matmul
// CHECK: ^bb0(%[[P:.*]]: i32, %[[DW:.*]]: f16, %[[MW:.*]]: f16, %[[DX:.*]]: f32, %[[SX:.*]]: f32, %[[OUT:.*]]: f32):
// CHECK: %[[DWF:.*]] = arith.extf %[[DW]] : f16 to f32
// CHECK: %[[SCALE:.*]] = arith.mulf %[[DWF]], %[[DX]] : f32
// CHECK: %[[MWF:.*]] = arith.extf %[[MW]] : f16 to f32
// CHECK: %[[MINSCALE:.*]] = arith.mulf %[[MWF]], %[[DX]] : f32
// CHECK: %[[WITHMIN:.*]] = math.fma %[[SX]], %[[MINSCALE]], %[[OUT]] : f32
// CHECK: %[[PF:.*]] = arith.sitofp %[[P]] : i32 to f32
// CHECK: math.fma %[[PF]], %[[SCALE]], %[[WITHMIN]] : f32
func.func @packed_matmul_q4_1(%x: tensor<8x64xf32>, %w: tensor<3x8x32xi32>, %s: tensor<3x4x32xf16>) -> tensor<8x96xf32> {
  %0 = transformer.packed_matmul q4_1 %x, %w, %s : (tensor<8x64xf32>, tensor<3x8x32xi32>, tensor<3x4x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}
