// --transformer-to-linalg of a q5_K packed_matmul: 5 lane words per sub-block and column (q4_K's 4
// nibble words, then the fifth bits), q4_K's scales. The block partials take all 8 activation lanes
// and the 5 words of a block in one body: activation lane l's codes are its nibbles or'ed with bits
// l + 8 i of the fifth-bit word moved to bit 4 of byte i (shifted left by 4 - l, right by l - 4,
// and masked with 0x10101010). As for q4_K, the activations have one scale per super-block of 256,
// a sub-block's lane dot products start from zero and are weighed by its sc in i32, and the
// super-block partials are scaled as q4_K's (tests/conversion/packed-matmul-q4-k.mlir).
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// CHECK-LABEL: func.func @packed_matmul_q5_k
// The activations are quantized as q4_K's, without a code offset to take out.
// CHECK-NOT: arith.constant 8.000000e+00 : f32
// CHECK: %[[WORDS:.*]] = tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2, 3], [4]] output_shape [3, 2, 8, 5, 32] : tensor<3x80x32xi32> into tensor<3x2x8x5x32xi32>
// CHECK: %[[FIFTHS:.*]] = tensor.extract_slice %[[WORDS]][0, 0, 0, 4, 0] [3, 2, 8, 1, 32] [1, 1, 1, 1, 1]
// CHECK: %[[PARTIALS:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]
// CHECK-SAME: , %[[FIFTHS]], %{{.*}} : {{.*}}) outs(%{{.*}} : tensor<8x3x2x32xi32>) attrs = {gpt.block_partials = 8 : i64}
// CHECK: ^bb0(%[[X0:[^:]*]]: i32, %[[X1:[^:]*]]: i32, %[[X2:[^:]*]]: i32, %[[X3:[^:]*]]: i32, %[[X4:[^:]*]]: i32, %[[X5:[^:]*]]: i32, %[[X6:[^:]*]]: i32, %[[X7:[^:]*]]: i32, %[[W0:[^:]*]]: i32, %[[W1:[^:]*]]: i32, %[[W2:[^:]*]]: i32, %[[W3:[^:]*]]: i32, %[[H:[^:]*]]: i32, %[[PAIR:[^:]*]]: f16, %[[ACC:[^:]*]]: i32):
// CHECK-DAG: %[[NIBBLES:.*]] = arith.constant 252645135 : i32
// CHECK-DAG: %[[FIFTH:.*]] = arith.constant 269488144 : i32
// Lane 0: the low nibbles of word 0 with bits 0, 8, 16, 24 of the fifth bits moved up by 4.
// CHECK: %[[LOW0:.*]] = arith.andi %[[W0]], %[[NIBBLES]] : i32
// CHECK: %[[HIGH0S:.*]] = arith.shrui %[[W0]], %{{.*}} : i32
// CHECK: %[[HIGH0:.*]] = arith.andi %[[HIGH0S]], %[[NIBBLES]] : i32
// CHECK: %[[UP4:.*]] = arith.shli %[[H]], %{{.*}} : i32
// CHECK: %[[BITS0:.*]] = arith.andi %[[UP4]], %[[FIFTH]] : i32
// CHECK: %[[CODE0:.*]] = arith.ori %[[LOW0]], %[[BITS0]] : i32
// CHECK: %[[SUM0:.*]] = transformer.lane_dot_u8i8 %{{c0.*}}, %[[CODE0]], %[[X0]] : i32
// Lane 4: the high nibbles of word 0 with bits 4, 12, 20, 28 where they are.
// CHECK: %[[BITS4:.*]] = arith.andi %[[H]], %[[FIFTH]] : i32
// CHECK: %[[CODE4:.*]] = arith.ori %[[HIGH0]], %[[BITS4]] : i32
// CHECK: %[[SUM4:.*]] = transformer.lane_dot_u8i8 %[[SUM0]], %[[CODE4]], %[[X4]] : i32
// Lanes 1, 5, 2, 6, 3, 7: shifted left by 3, right by 1, left by 2, right by 2, left by 1, right by 3.
// CHECK: %[[C3:.*]] = arith.constant 3 : i32
// CHECK-NEXT: arith.shli %[[H]], %[[C3]] : i32
// CHECK: %[[C1:.*]] = arith.constant 1 : i32
// CHECK-NEXT: arith.shrui %[[H]], %[[C1]] : i32
// CHECK: %[[C2:.*]] = arith.constant 2 : i32
// CHECK-NEXT: arith.shli %[[H]], %[[C2]] : i32
// CHECK: %[[C2B:.*]] = arith.constant 2 : i32
// CHECK-NEXT: arith.shrui %[[H]], %[[C2B]] : i32
// CHECK: %[[C1B:.*]] = arith.constant 1 : i32
// CHECK-NEXT: arith.shli %[[H]], %[[C1B]] : i32
// Lane 7: word 3's high nibbles, bits 7, 15, 23, 31 moved down by 3.
// CHECK: %[[C3B:.*]] = arith.constant 3 : i32
// CHECK-NEXT: %[[DOWN3:.*]] = arith.shrui %[[H]], %[[C3B]] : i32
// CHECK-NEXT: %[[BITS7:.*]] = arith.andi %[[DOWN3]], %[[FIFTH]] : i32
// CHECK-NEXT: %[[CODE7:.*]] = arith.ori %{{.*}}, %[[BITS7]] : i32
// CHECK-NEXT: %[[LAST:.*]] = transformer.lane_dot_u8i8 %{{.*}}, %[[CODE7]], %[[X7]] : i32
// The block's sum weighed by its sc (bits 0-7 of the pair) and added to the super-block's.
// CHECK: %[[BITS:.*]] = arith.extui %{{.*}} : i16 to i32
// CHECK: %[[SC:.*]] = arith.andi %[[BITS]], %{{.*}} : i32
// CHECK: %[[WEIGHED:.*]] = arith.muli %[[LAST]], %[[SC]] : i32
// CHECK: %[[TOTAL:.*]] = arith.addi %[[ACC]], %[[WEIGHED]] : i32
// CHECK: linalg.yield %[[TOTAL]] : i32
// q4_K's scaled sum over super-blocks: the partials, d, dmin, the activations' scales per super-block,
// then each sub-block's (sc | m << 8) and code sum.
// CHECK: linalg.generic {{.*}} ins(%[[PARTIALS]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, {{.*}} : tensor<8x3x2x32xi32>, tensor<3x2x32xf16>, tensor<3x2x32xf16>, tensor<8x2xf32>, tensor<3x2x32xf16>, tensor<8x2xf32>,
// CHECK-SAME: gpt.packed_matmul
func.func @packed_matmul_q5_k(%x: tensor<8x512xf32>, %w: tensor<3x80x32xi32>, %s: tensor<3x20x32xf16>) -> tensor<8x96xf32> {
  %0 = transformer.packed_matmul q5_k %x, %w, %s : (tensor<8x512xf32>, tensor<3x80x32xi32>, tensor<3x20x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}

// -----

// A q5_k weight is 5 words per 32 weights of a column: K = 512 takes 80 rows, not q4_k's 64.
func.func @packed_matmul_q5_k_bad_rows(%x: tensor<8x512xf32>, %w: tensor<3x64x32xi32>, %s: tensor<3x20x32xf16>) -> tensor<8x96xf32> {
  // expected-error @+1 {{q5_k weights for K = 512 must have 80 rows (5-bit codes, K * 5 / 32 words per column), got 'tensor<3x64x32xi32>'}}
  %0 = transformer.packed_matmul q5_k %x, %w, %s : (tensor<8x512xf32>, tensor<3x64x32xi32>, tensor<3x20x32xf16>) -> tensor<8x96xf32>
  return %0 : tensor<8x96xf32>
}
