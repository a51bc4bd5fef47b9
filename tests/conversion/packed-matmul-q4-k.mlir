// --transformer-to-linalg of a q4_K packed_matmul: scales [N / P, K / 32 + K / 128, P], the
// sub-blocks' (sc | m << 8) rows read as one view and the super-blocks' (d, dmin) rows as two, each
// at super-block block / 8; a sub-block adds d_x * d * sc * partial - dmin * m * (d_x * sum(code)), the
// products in f32 (no fp16 rounding of d * sc as the q4_1 repacking made), d_x * sum(code) computed
// once per row and block before the matmul.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// CHECK-DAG: #[[PARTIAL:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3, d2)>
// CHECK-DAG: #[[SUB:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d3, d2)>
// CHECK-DAG: #[[SUPER:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d3 floordiv 8, d2)>
// CHECK-LABEL: func.func @packed_matmul_q4_k
// q4_1's offset-free partial sums: no 8 * sum(code) to take out.
// CHECK-NOT: arith.constant 8.000000e+00 : f32
// CHECK: %[[PARTIALS:.*]] = linalg.generic {{.*}}gpt.block_partials
// CHECK: transformer.lane_dot_u8i8
// CHECK: transformer.lane_dot_u8i8
// CHECK: %[[SXDX:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %[[XS:.*]] : tensor<8x16xf32>, tensor<8x16xf32>) {{.*}}gpt.quantizes_activations
// CHECK: arith.mulf
// CHECK: %[[SC:.*]] = tensor.extract_slice %[[S:.*]][0, 0, 0] [3, 16, 32] [1, 1, 1] : tensor<3x20x32xf16> to tensor<3x16x32xf16>
// CHECK: %[[DD:.*]] = tensor.extract_slice %[[S]][0, 16, 0] [3, 4, 32] [1, 1, 1] : tensor<3x20x32xf16> to tensor<3x4x32xf16>
// CHECK: %[[PAIRS:.*]] = tensor.expand_shape %[[DD]] {{\[\[}}0], [1, 2], [3]] output_shape [3, 2, 2, 32]
// CHECK: %[[D:.*]] = tensor.extract_slice %[[PAIRS]][0, 0, 0, 0] [3, 2, 1, 32] [1, 1, 1, 1] : tensor<3x2x2x32xf16> to tensor<3x2x32xf16>
// CHECK: %[[DMIN:.*]] = tensor.extract_slice %[[PAIRS]][0, 0, 1, 0] [3, 2, 1, 32] [1, 1, 1, 1] : tensor<3x2x2x32xf16> to tensor<3x2x32xf16>
// CHECK: linalg.generic {indexing_maps = [#[[PARTIAL]], #[[SUB]], #[[SUPER]], #[[SUPER]],
// CHECK-SAME: ins(%[[PARTIALS]], %[[SC]], %[[D]], %[[DMIN]], %[[XS]], %[[SXDX]] : tensor<8x3x16x32xi32>, tensor<3x16x32xf16>, tensor<3x2x32xf16>, tensor<3x2x32xf16>, tensor<8x16xf32>, tensor<8x16xf32>)
// CHECK-SAME: gpt.packed_matmul
// CHECK: ^bb0(%[[P:.*]]: i32, %[[SCM:.*]]: f16, %[[DW:.*]]: f16, %[[MW:.*]]: f16, %[[DX:.*]]: f32, %[[SX:.*]]: f32, %[[OUT:.*]]: f32):
// CHECK: %[[BITS16:.*]] = arith.bitcast %[[SCM]] : f16 to i16
// CHECK: %[[BITS:.*]] = arith.extui %[[BITS16]] : i16 to i32
// CHECK: %[[SCI:.*]] = arith.andi %[[BITS]], %{{.*}} : i32
// CHECK: %[[SCF:.*]] = arith.uitofp %[[SCI]] : i32 to f32
// CHECK: %[[MI:.*]] = arith.shrui %[[BITS]], %{{.*}} : i32
// CHECK: %[[MF:.*]] = arith.uitofp %[[MI]] : i32 to f32
// CHECK: %[[DF:.*]] = arith.extf %[[DW]] : f16 to f32
// CHECK: %[[SUBSCALE:.*]] = arith.mulf %[[DF]], %[[SCF]] : f32
// CHECK: %[[DMINF:.*]] = arith.extf %[[MW]] : f16 to f32
// CHECK: %[[SUBMIN:.*]] = arith.mulf %[[DMINF]], %[[MF]] : f32
// CHECK: %[[SCALE:.*]] = arith.mulf %[[SUBSCALE]], %[[DX]] : f32
// CHECK: %[[PF:.*]] = arith.sitofp %[[P]] : i32 to f32
// CHECK: %[[WITHSCALED:.*]] = math.fma %[[PF]], %[[SCALE]], %[[OUT]] : f32
// CHECK: %[[NEG:.*]] = arith.negf %[[SUBMIN]] : f32
// CHECK: math.fma %[[SX]], %[[NEG]], %[[WITHSCALED]] : f32
func.func @packed_matmul_q4_k(%x: tensor<8x512xf32>, %w: tensor<3x64x32xi32>, %s: tensor<3x20x32xf16>) -> tensor<8x96xf32> {
  %0 = transformer.packed_matmul q4_k %x, %w, %s : (tensor<8x512xf32>, tensor<3x64x32xi32>, tensor<3x20x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}

// -----

// q4_K's scales are whole super-blocks: K = 512 has 16 sub-block rows and 4 (d, dmin) rows.
func.func @packed_matmul_q4_k_bad_panels(%x: tensor<8x512xf32>, %w: tensor<3x64x32xi32>, %s: tensor<2x20x32xf16>) -> tensor<8x96xf32> {
  // expected-error @+1 {{q4_k scales must be [N / P, K / 256 * 10, P] = [3, 20, 32] (10 per block of 256 weights of a column), got 'tensor<2x20x32xf16>'}}
  %0 = transformer.packed_matmul q4_k %x, %w, %s : (tensor<8x512xf32>, tensor<3x64x32xi32>, tensor<2x20x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}
