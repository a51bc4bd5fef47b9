// --transformer-to-linalg of q5_0 and q5_1 packed_matmuls: q5_K's 5 lane words per block of 32 and
// column (4 nibble words, then the fifth bits: a file's qh as it is), one f16 scale per block
// (q5_0) or q4_1's scale and min rows (q5_1). The activations are quantized per block of 32, as
// for q4_0; the block partials take all 8 lanes and the 5 words of one block in one body (the
// fifth bits moved to bit 4 of each lane's bytes by constant shifts, as q5_K's:
// tests/conversion/packed-matmul-q5-k.mlir), one block per group (`gpt.block_partials` unit), and
// are scaled per block as q4_0's (q5_0: the codes' offset of 16 taken out) or q4_1's (q5_1).
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// CHECK-LABEL: func.func @packed_matmul_q5_0
// The compensation is 16 times each block's code sum.
// CHECK: arith.constant 1.600000e+01 : f32
// CHECK: %[[WORDS:.*]] = tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2, 3], [4]] output_shape [3, 8, 1, 5, 32] : tensor<3x40x32xi32> into tensor<3x8x1x5x32xi32>
// CHECK: %[[FIFTHS:.*]] = tensor.extract_slice %[[WORDS]][0, 0, 0, 4, 0] [3, 8, 1, 1, 32] [1, 1, 1, 1, 1]
// CHECK: %[[PARTIALS:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]
// CHECK-SAME: , %[[FIFTHS]] : {{.*}}) outs(%{{.*}} : tensor<8x3x8x32xi32>) attrs = {gpt.block_partials}
// CHECK: ^bb0(%[[X0:[^:]*]]: i32, %{{[^:]*}}: i32, %{{[^:]*}}: i32, %{{[^:]*}}: i32, %[[X4:[^:]*]]: i32, %{{[^:]*}}: i32, %{{[^:]*}}: i32, %[[X7:[^:]*]]: i32, %[[W0:[^:]*]]: i32, %{{[^:]*}}: i32, %{{[^:]*}}: i32, %{{[^:]*}}: i32, %[[H:[^:]*]]: i32, %[[ACC:[^:]*]]: i32):
// CHECK-DAG: %[[NIBBLES:.*]] = arith.constant 252645135 : i32
// CHECK-DAG: %[[FIFTH:.*]] = arith.constant 269488144 : i32
// Lane 0: the low nibbles of word 0 with bits 0, 8, 16, 24 of the fifth bits moved up by 4, added
// to the accumulator (the partials' zero).
// CHECK: %[[LOW0:.*]] = arith.andi %[[W0]], %[[NIBBLES]] : i32
// CHECK: %[[UP4:.*]] = arith.shli %[[H]], %{{.*}} : i32
// CHECK: %[[BITS0:.*]] = arith.andi %[[UP4]], %[[FIFTH]] : i32
// CHECK: %[[CODE0:.*]] = arith.ori %[[LOW0]], %[[BITS0]] : i32
// CHECK: %[[SUM0:.*]] = transformer.lane_dot_u8i8 %[[ACC]], %[[CODE0]], %[[X0]] : i32
// Lane 4: the high nibbles of word 0 with bits 4, 12, 20, 28 where they are.
// CHECK: %[[BITS4:.*]] = arith.andi %[[H]], %[[FIFTH]] : i32
// CHECK: transformer.lane_dot_u8i8 %[[SUM0]], %{{.*}}, %[[X4]] : i32
// CHECK: %[[LAST:.*]] = transformer.lane_dot_u8i8 %{{.*}}, %{{.*}}, %[[X7]] : i32
// CHECK-NEXT: linalg.yield %[[LAST]] : i32
// q4_0's scaled sum over blocks: the partials, the scales, the activations' scales and compensations.
// CHECK: linalg.generic {{.*}} ins(%[[PARTIALS]], %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x3x8x32xi32>, tensor<3x8x32xf16>, tensor<8x8xf32>, tensor<8x8xf32>)
// CHECK-SAME: gpt.packed_matmul
// CHECK: arith.subf
func.func @packed_matmul_q5_0(%x: tensor<8x256xf32>, %w: tensor<3x40x32xi32>, %s: tensor<3x8x32xf16>) -> tensor<8x96xf32> {
  %0 = transformer.packed_matmul q5_0 %x, %w, %s : (tensor<8x256xf32>, tensor<3x40x32xi32>, tensor<3x8x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}

// -----

// CHECK-LABEL: func.func @packed_matmul_q5_1
// No code offset: each block's min multiplies its plain code sum.
// CHECK-NOT: arith.constant 1.600000e+01 : f32
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<8x3x8x32xi32>) attrs = {gpt.block_partials}
// q4_1's scaled sum: the partials, the scales and the mins (two views of the scale rows), the
// activations' scales and code sums.
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x3x8x32xi32>, tensor<3x8x32xf16>, tensor<3x8x32xf16>, tensor<8x8xf32>, tensor<8x8xf32>)
// CHECK-SAME: gpt.packed_matmul
func.func @packed_matmul_q5_1(%x: tensor<8x256xf32>, %w: tensor<3x40x32xi32>, %s: tensor<3x16x32xf16>) -> tensor<8x96xf32> {
  %0 = transformer.packed_matmul q5_1 %x, %w, %s : (tensor<8x256xf32>, tensor<3x40x32xi32>, tensor<3x16x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}

// -----

// A q5_0 weight is 5 words per 32 weights of a column, and one scale row per block.
func.func @packed_matmul_q5_0_bad_rows(%x: tensor<8x256xf32>, %w: tensor<3x32x32xi32>, %s: tensor<3x8x32xf16>) -> tensor<8x96xf32> {
  // expected-error @+1 {{q5_0 weights for K = 256 must have 40 rows (5-bit codes, K * 5 / 32 words per column), got 'tensor<3x32x32xi32>'}}
  %0 = transformer.packed_matmul q5_0 %x, %w, %s : (tensor<8x256xf32>, tensor<3x32x32xi32>, tensor<3x8x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}
