// --transformer-to-linalg of a q6_K packed_matmul: weight [N / P, K * 3 / 16, P] (3 lanes per run of
// 16 weights) and scales [N / P, K / 32 + K / 256, P] (the run scales in pairs, then d). The block
// partial sums take each run's 4 code lanes (nibbles of its lanes 0 and 1, top bits from lane 2)
// against activation lanes that do not mix runs, and weigh the two runs' i32 sums by their int8
// scales; the scaled sum takes 32 * (sc_0 sum_0(code_x) + sc_1 sum_1(code_x)) out in i32 and
// multiplies once per block of 32 by d * d_x in f32.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// CHECK-DAG: #[[XLANE:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>
// CHECK-DAG: #[[WLANE:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d1, d3, d4, d2)>
// CHECK-DAG: #[[PAIR:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d1, d3, d2)>
// CHECK-DAG: #[[SUPER:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d3 floordiv 8, d2)>
// CHECK-LABEL: func.func @packed_matmul_q6_k
// The activation lanes per run: [8, 32 runs, 4 lanes], viewed as [8, 16 blocks, 8].
// CHECK: %[[RUNLANES:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<8x32x4xi32>) attrs = {gpt.quantizes_activations}
// CHECK: %[[SPLIT:.*]] = tensor.expand_shape %[[RUNLANES]] {{\[\[}}0], [1, 2], [3]] output_shape [8, 16, 2, 4]
// CHECK: %[[LANES:.*]] = tensor.collapse_shape %[[SPLIT]] {{\[\[}}0], [1], [2, 3]] : tensor<8x16x2x4xi32> into tensor<8x16x8xi32>
// CHECK: %[[PAIRS:.*]] = tensor.extract_slice %[[S:.*]][0, 0, 0] [3, 16, 32] [1, 1, 1] : tensor<3x18x32xf16> to tensor<3x16x32xf16>
// CHECK: tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2], [3]] output_shape [3, 16, 6, 32] : tensor<3x96x32xi32> into tensor<3x16x6x32xi32>
// CHECK: %[[PARTIALS:.*]] = linalg.generic {indexing_maps = [#[[XLANE]], #[[XLANE]], #[[XLANE]], #[[XLANE]], #[[XLANE]], #[[XLANE]], #[[XLANE]], #[[XLANE]], #[[WLANE]], #[[WLANE]], #[[WLANE]], #[[WLANE]], #[[WLANE]], #[[WLANE]], #[[PAIR]],
// CHECK-SAME: gpt.block_partials
// CHECK-COUNT-4: transformer.lane_dot_u8i8
// CHECK-COUNT-4: transformer.lane_dot_u8i8
// The two run scales (the pair's low byte, sign-extended, and its high one) and their products, in
// an order that follows the C++ compiler's argument evaluation (gcc and clang differ):
// CHECK-DAG: %[[S0:.*]] = arith.shrsi %{{.*}}, %c24_i32{{.*}} : i32
// CHECK-DAG: %[[S1:.*]] = arith.shrsi %{{.*}}, %c8_i32{{.*}} : i32
// CHECK-DAG: %[[W0:.*]] = arith.muli %{{.*}}, %[[S0]] : i32
// CHECK-DAG: %[[W1:.*]] = arith.muli %{{.*}}, %[[S1]] : i32
// CHECK: %[[BOTH:.*]] = arith.addi %[[W0]], %[[W1]] : i32
// CHECK: arith.addi %{{.*}}, %[[BOTH]] : i32
// CHECK: %[[D:.*]] = tensor.extract_slice %[[S]][0, 16, 0] [3, 2, 32] [1, 1, 1] : tensor<3x18x32xf16> to tensor<3x2x32xf16>
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #[[SUPER]],
// CHECK-SAME: ins(%[[PARTIALS]], %[[PAIRS]], %[[D]], %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x3x16x32xi32>, tensor<3x16x32xf16>, tensor<3x2x32xf16>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>)
// CHECK-SAME: gpt.packed_matmul
// CHECK: ^bb0(%[[P:.*]]: i32, %[[SC:.*]]: f16, %[[DW:.*]]: f16, %[[DX:.*]]: f32, %[[C0:.*]]: f32, %[[C1:.*]]: f32, %[[OUT:.*]]: f32):
// CHECK: %[[COMP:.*]] = math.fma %{{.*}}, %[[C1]], %{{.*}} : f32
// CHECK: %[[COMPI:.*]] = arith.fptosi %[[COMP]] : f32 to i32
// CHECK: %[[SUM:.*]] = arith.subi %[[P]], %[[COMPI]] : i32
// CHECK: %[[DF:.*]] = arith.extf %[[DW]] : f16 to f32
// CHECK: %[[SCALE:.*]] = arith.mulf %[[DF]], %[[DX]] : f32
// CHECK: %[[SUMF:.*]] = arith.sitofp %[[SUM]] : i32 to f32
// CHECK: math.fma %[[SUMF]], %[[SCALE]], %[[OUT]] : f32
func.func @packed_matmul_q6_k(%x: tensor<8x512xf32>, %w: tensor<3x96x32xi32>, %s: tensor<3x18x32xf16>) -> tensor<8x96xf32> {
  %0 = transformer.packed_matmul q6_k %x, %w, %s : (tensor<8x512xf32>, tensor<3x96x32xi32>, tensor<3x18x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}

// -----

// q6_K's weight has 3 lanes per 16 weights: K = 512 needs 96 rows, not q4's 64.
func.func @packed_matmul_q6_k_bad_rows(%x: tensor<8x512xf32>, %w: tensor<3x64x32xi32>, %s: tensor<3x18x32xf16>) -> tensor<8x96xf32> {
  // expected-error @+1 {{q6_k weights for K = 512 must have 96 rows (6-bit codes, K * 6 / 32 words per column), got 'tensor<3x64x32xi32>'}}
  %0 = transformer.packed_matmul q6_k %x, %w, %s : (tensor<8x512xf32>, tensor<3x64x32xi32>, tensor<3x18x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}

// -----

func.func @packed_matmul_q6_k_bad_panels(%x: tensor<8x512xf32>, %w: tensor<3x96x32xi32>, %s: tensor<2x18x32xf16>) -> tensor<8x96xf32> {
  // expected-error @+1 {{q6_k scales must be [N / P, K / 256 * 9, P] = [3, 18, 32] (9 per block of 256 weights of a column), got 'tensor<2x18x32xf16>'}}
  %0 = transformer.packed_matmul q6_k %x, %w, %s : (tensor<8x512xf32>, tensor<3x96x32xi32>, tensor<2x18x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}
