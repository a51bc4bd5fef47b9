// --transformer-to-linalg of a q4_K packed_matmul, as llama.cpp's q4_K x q8_K: the activations
// quantized with one scale per super-block of 256 (max |x| / 127 over rows of 256, repeated beside
// each of its 8 blocks for the codes and code sums); the super-block partials sum each sub-block's
// lane dot products from zero and weigh them by its 6-bit scale sc (bits 0-7 of the (sc | m << 8)
// pair) in i32, over a reduction loop of the 8 sub-blocks; the matmul then adds, per super-block,
// d * d_x * partial - dmin * d_x * sum over sub-blocks of m * sum(code), in f32, from scales
// [N / P, K / 32 + K / 128, P] (sub-block rows, then (d, dmin) rows).
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// CHECK-DAG: #[[ROWSUB:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>
// CHECK-DAG: #[[COLSUB:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d1, d3, d4, d2)>
// CHECK-DAG: #[[SUPEROUT:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d2)>
// CHECK-DAG: #[[PARTIAL:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3, d2)>
// CHECK-DAG: #[[COLSUPER:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d3, d2)>
// CHECK-DAG: #[[ROWSUPER:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
// CHECK-LABEL: func.func @packed_matmul_q4_k
// The scale per row and super-block: max |x| over 256.
// CHECK: tensor.expand_shape %{{.*}} output_shape [8, 2, 256] : tensor<8x512xf32> into tensor<8x2x256xf32>
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : tensor<16x256xf32>) {{.*}}gpt.quantizes_activations
// CHECK: math.absf
// CHECK: arith.maximumf
// CHECK: %[[XS:.*]] = tensor.expand_shape %{{.*}} output_shape [8, 2] : tensor<16xf32> into tensor<8x2xf32>
// CHECK: linalg.generic {{.*}} ins(%[[XS]] : tensor<8x2xf32>) outs(%{{.*}} : tensor<8x2x8xf32>) {{.*}}gpt.quantizes_activations
// q4_K's offset-free code sums: no 8 * sum(code) to take out.
// CHECK-NOT: arith.constant 8.000000e+00 : f32
// CHECK: %[[PARTIALS:.*]] = linalg.generic {indexing_maps = [#[[ROWSUB]], #[[ROWSUB]], #[[ROWSUB]], #[[ROWSUB]], #[[ROWSUB]], #[[ROWSUB]], #[[ROWSUB]], #[[ROWSUB]], #[[COLSUB]], #[[COLSUB]], #[[COLSUB]], #[[COLSUB]], #[[COLSUB]], #[[SUPEROUT]]], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
// CHECK-SAME: tensor<3x2x8x32xi32>, tensor<3x2x8x32xf16>) outs(%{{.*}} : tensor<8x3x2x32xi32>) attrs = {gpt.block_partials = 8 : i64}
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK: %[[DOT:.*]] = transformer.lane_dot_u8i8 %[[ZERO]],
// CHECK-COUNT-7: transformer.lane_dot_u8i8
// CHECK: %[[BITS16:.*]] = arith.bitcast %{{.*}} : f16 to i16
// CHECK: %[[BITS:.*]] = arith.extui %[[BITS16]] : i16 to i32
// CHECK: %[[SC:.*]] = arith.andi %[[BITS]], %{{.*}} : i32
// CHECK: %[[WEIGHED:.*]] = arith.muli %{{.*}}, %[[SC]] : i32
// CHECK: arith.addi %{{.*}}, %[[WEIGHED]] : i32
// CHECK: %[[DD:.*]] = tensor.extract_slice %{{.*}}[0, 16, 0] [3, 4, 32] [1, 1, 1] : tensor<3x20x32xf16> to tensor<3x4x32xf16>
// CHECK: linalg.generic {indexing_maps = [#[[PARTIAL]], #[[COLSUPER]], #[[COLSUPER]], #[[ROWSUPER]], #[[COLSUPER]], #[[ROWSUPER]],
// CHECK-SAME: iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[PARTIALS]], %{{.*}}, %{{.*}}, %[[XS]],
// CHECK-SAME: gpt.packed_matmul
// CHECK: ^bb0(%[[P:[a-z0-9_]+]]: i32, %[[DW:[a-z0-9_]+]]: f16, %[[MW:[a-z0-9_]+]]: f16, %[[DX:[a-z0-9_]+]]: f32, %[[PAIR0:[a-z0-9_]+]]: f16, %[[SUM0:[a-z0-9_]+]]: f32,
// The min term: sum over the 8 sub-blocks of m * sum(code), m in bits 8-15 of each pair.
// CHECK: %[[B0:.*]] = arith.bitcast %[[PAIR0]] : f16 to i16
// CHECK: %[[W0:.*]] = arith.extui %[[B0]] : i16 to i32
// CHECK: %[[M0:.*]] = arith.shrui %[[W0]], %{{.*}} : i32
// CHECK: %[[MF0:.*]] = arith.uitofp %[[M0]] : i32 to f32
// CHECK: arith.mulf %[[MF0]], %[[SUM0]] : f32
// CHECK-COUNT-7: math.fma
// CHECK: %[[DF:.*]] = arith.extf %[[DW]] : f16 to f32
// CHECK: %[[SCALE:.*]] = arith.mulf %[[DF]], %[[DX]] : f32
// CHECK: %[[DMINF:.*]] = arith.extf %[[MW]] : f16 to f32
// CHECK: %[[MINSCALE:.*]] = arith.mulf %[[DMINF]], %[[DX]] : f32
// CHECK: %[[PF:.*]] = arith.sitofp %[[P]] : i32 to f32
// CHECK: %[[WITHSCALED:.*]] = math.fma %[[PF]], %[[SCALE]], %{{.*}} : f32
// CHECK: %[[NEG:.*]] = arith.negf %[[MINSCALE]] : f32
// CHECK: math.fma %{{.*}}, %[[NEG]], %[[WITHSCALED]] : f32
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
