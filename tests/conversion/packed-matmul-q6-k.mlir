// --transformer-to-linalg of a q6_K packed_matmul: weight [N / P, K * 3 / 16, P] (3 lanes per run of
// 16 weights) and scales [N / P, K / 32 + K / 256, P] (the run scales in pairs, then d). As
// llama.cpp's q6_K x q8_K, the activations have one scale per super-block of 256. The super-block
// partials take each run's 4 code lanes (nibbles of its lanes 0 and 1, top bits from lane 2)
// against activation lanes that do not mix runs, take 32 * sum(code_x) out of each run's i32 sum
// and weigh the two by their int8 scales, over a reduction loop of a super-block's 8 blocks; the
// matmul multiplies once per super-block by d * d_x in f32.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// CHECK-DAG: #[[XLANE:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>
// CHECK-DAG: #[[WLANE:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d1, d3, d4, d2)>
// CHECK-DAG: #[[OUT5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d2)>
// CHECK-DAG: #[[PARTIAL:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3, d2)>
// CHECK-DAG: #[[SUPER:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d3, d2)>
// CHECK-DAG: #[[ROW:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
// CHECK-LABEL: func.func @packed_matmul_q6_k
// The activations' scale per row and super-block: max |x| over 256.
// CHECK: tensor.expand_shape %{{.*}} output_shape [8, 2, 256] : tensor<8x512xf32> into tensor<8x2x256xf32>
// CHECK: %[[XS:.*]] = tensor.expand_shape %{{.*}} output_shape [8, 2] : tensor<16xf32> into tensor<8x2xf32>
// The activation lanes per run: [8, 32 runs, 4 lanes], viewed as [8, 16 blocks, 8].
// CHECK: %[[RUNLANES:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<8x32x4xi32>) attrs = {gpt.quantizes_activations}
// CHECK: %[[SPLIT:.*]] = tensor.expand_shape %[[RUNLANES]] {{\[\[}}0], [1, 2], [3]] output_shape [8, 16, 2, 4]
// CHECK: tensor.collapse_shape %[[SPLIT]] {{\[\[}}0], [1], [2, 3]] : tensor<8x16x2x4xi32> into tensor<8x16x8xi32>
// CHECK: tensor.extract_slice %[[S:.*]][0, 0, 0] [3, 16, 32] [1, 1, 1] : tensor<3x18x32xf16> to tensor<3x16x32xf16>
// CHECK: tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2, 3], [4]] output_shape [3, 2, 8, 6, 32] : tensor<3x96x32xi32> into tensor<3x2x8x6x32xi32>
// CHECK: %[[PARTIALS:.*]] = linalg.generic {indexing_maps = [#[[XLANE]], #[[XLANE]], #[[XLANE]], #[[XLANE]], #[[XLANE]], #[[XLANE]], #[[XLANE]], #[[XLANE]], #[[WLANE]], #[[WLANE]], #[[WLANE]], #[[WLANE]], #[[WLANE]], #[[WLANE]], #[[WLANE]], #[[XLANE]], #[[XLANE]], #[[OUT5]]]
// CHECK-SAME: outs(%{{.*}} : tensor<8x3x2x32xi32>) attrs = {gpt.block_partials = 8 : i64}
// CHECK: ^bb0({{.*}}%[[PAIR:[a-z0-9_]+]]: f16, %[[C0:[a-z0-9_]+]]: f32, %[[C1:[a-z0-9_]+]]: f32, %[[ACC:[a-z0-9_]+]]: i32):
// CHECK-COUNT-4: transformer.lane_dot_u8i8
// CHECK-COUNT-4: transformer.lane_dot_u8i8
// The two run scales (the pair's low byte, sign-extended, and its high one), each run's sum less
// 32 * sum(code_x), and their products, in an order that follows the C++ compiler's argument
// evaluation (gcc and clang differ):
// CHECK-DAG: %[[S0:.*]] = arith.shrsi %{{.*}}, %c24_i32{{.*}} : i32
// CHECK-DAG: %[[S1:.*]] = arith.shrsi %{{.*}}, %c8_i32{{.*}} : i32
// CHECK-DAG: %[[C0I:.*]] = arith.fptosi %[[C0]] : f32 to i32
// CHECK-DAG: %[[T0:.*]] = arith.subi %{{.*}}, %[[C0I]] : i32
// CHECK-DAG: %[[C1I:.*]] = arith.fptosi %[[C1]] : f32 to i32
// CHECK-DAG: %[[T1:.*]] = arith.subi %{{.*}}, %[[C1I]] : i32
// CHECK-DAG: %[[W0:.*]] = arith.muli %[[T0]], %[[S0]] : i32
// CHECK-DAG: %[[W1:.*]] = arith.muli %[[T1]], %[[S1]] : i32
// CHECK: %[[BOTH:.*]] = arith.addi %[[W0]], %[[W1]] : i32
// CHECK: arith.addi %[[ACC]], %[[BOTH]] : i32
// CHECK: %[[D:.*]] = tensor.extract_slice %[[S]][0, 16, 0] [3, 2, 32] [1, 1, 1] : tensor<3x18x32xf16> to tensor<3x2x32xf16>
// CHECK: linalg.generic {indexing_maps = [#[[PARTIAL]], #[[SUPER]], #[[ROW]],
// CHECK-SAME: ins(%[[PARTIALS]], %[[D]], %[[XS]] : tensor<8x3x2x32xi32>, tensor<3x2x32xf16>, tensor<8x2xf32>)
// CHECK-SAME: gpt.packed_matmul
// CHECK: ^bb0(%[[P:.*]]: i32, %[[DW:.*]]: f16, %[[DX:.*]]: f32, %[[OUT:.*]]: f32):
// CHECK: %[[DF:.*]] = arith.extf %[[DW]] : f16 to f32
// CHECK: %[[SCALE:.*]] = arith.mulf %[[DF]], %[[DX]] : f32
// CHECK: %[[SUMF:.*]] = arith.sitofp %[[P]] : i32 to f32
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
