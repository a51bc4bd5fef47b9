// DRR canonicalization patterns of the transformer dialect, positive and negative cases,
// written in generic op syntax so the custom printer/parser play no part in the input.
// RUN: gpt-opt %s --split-input-file --canonicalize | FileCheck %s

// add(x, 0) = x, with the zero broadcast from a bias-shaped constant.
// CHECK-LABEL: func.func @add_zero_right
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: return %[[X]]
func.func @add_zero_right(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %zero = "transformer.constant"() {value = dense<0.0> : tensor<8xf32>} : () -> tensor<8xf32>
  %0 = "transformer.add"(%x, %zero) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// add(0, x) = x
// CHECK-LABEL: func.func @add_zero_left
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: return %[[X]]
func.func @add_zero_left(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %zero = "transformer.constant"() {value = dense<0.0> : tensor<4x8xf32>} : () -> tensor<4x8xf32>
  %0 = "transformer.add"(%zero, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Negative: the zero broadcasts x to a larger shape, so x cannot replace the sum.
// CHECK-LABEL: func.func @add_zero_broadcasts_x
// CHECK: %[[SUM:.*]] = transformer.add
// CHECK-NEXT: return %[[SUM]] : tensor<4x8xf32>
func.func @add_zero_broadcasts_x(%x: tensor<8xf32>) -> tensor<4x8xf32> {
  %zero = "transformer.constant"() {value = dense<0.0> : tensor<4x8xf32>} : () -> tensor<4x8xf32>
  %0 = "transformer.add"(%x, %zero) : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Negative: a constant that is not all zeros.
// CHECK-LABEL: func.func @add_nonzero
// CHECK: transformer.add
func.func @add_nonzero(%x: tensor<2xf32>) -> tensor<2xf32> {
  %c = "transformer.constant"() {value = dense<[0.0, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %0 = "transformer.add"(%x, %c) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// Negative: the result type is unranked, so replacing it by a ranked x would change its type.
// CHECK-LABEL: func.func @add_zero_unranked_result
// CHECK: transformer.add
func.func @add_zero_unranked_result(%x: tensor<4xf32>) -> tensor<*xf32> {
  %zero = "transformer.constant"() {value = dense<0.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %0 = "transformer.add"(%x, %zero) : (tensor<4xf32>, tensor<4xf32>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}

// -----

// mul(x, 1) = x
// CHECK-LABEL: func.func @mul_one_right
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: return %[[X]]
func.func @mul_one_right(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %one = "transformer.constant"() {value = dense<1.0> : tensor<8xf32>} : () -> tensor<8xf32>
  %0 = "transformer.mul"(%x, %one) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// mul(1, x) = x
// CHECK-LABEL: func.func @mul_one_left
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: return %[[X]]
func.func @mul_one_left(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %one = "transformer.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %0 = "transformer.mul"(%one, %x) : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Negative: multiplying by 2 is not the identity.
// CHECK-LABEL: func.func @mul_two
// CHECK: transformer.mul
func.func @mul_two(%x: tensor<4xf32>) -> tensor<4xf32> {
  %two = "transformer.constant"() {value = dense<2.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %0 = "transformer.mul"(%x, %two) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Negative: the ones broadcast x to a larger shape.
// CHECK-LABEL: func.func @mul_one_broadcasts_x
// CHECK: transformer.mul
func.func @mul_one_broadcasts_x(%x: tensor<8xf32>) -> tensor<2x8xf32> {
  %one = "transformer.constant"() {value = dense<1.0> : tensor<2x8xf32>} : () -> tensor<2x8xf32>
  %0 = "transformer.mul"(%x, %one) : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

// neg(neg(x)) = x
// CHECK-LABEL: func.func @neg_neg
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: return %[[X]]
func.func @neg_neg(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "transformer.neg"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "transformer.neg"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// Negative: a single neg stays; neg(neg(neg(x))) = neg(x).
// CHECK-LABEL: func.func @neg_neg_neg
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-NEXT: %[[N:.*]] = transformer.neg %[[X]]
// CHECK-NEXT: return %[[N]]
func.func @neg_neg_neg(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "transformer.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "transformer.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "transformer.neg"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// transpose(transpose(x)) = x, on a batched tensor.
// CHECK-LABEL: func.func @transpose_transpose
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>)
// CHECK-NEXT: return %[[X]]
func.func @transpose_transpose(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %0 = "transformer.transpose"(%x) : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32>
  %1 = "transformer.transpose"(%0) : (tensor<2x8x4xf32>) -> tensor<2x4x8xf32>
  return %1 : tensor<2x4x8xf32>
}

// -----

// Negative: the inner result is unranked and the outer one too, so the pair cannot be dropped
// without changing the returned type.
// CHECK-LABEL: func.func @transpose_transpose_unranked
// CHECK-COUNT-2: transformer.transpose
func.func @transpose_transpose_unranked(%x: tensor<4x8xf32>) -> tensor<*xf32> {
  %0 = "transformer.transpose"(%x) : (tensor<4x8xf32>) -> tensor<*xf32>
  %1 = "transformer.transpose"(%0) : (tensor<*xf32>) -> tensor<*xf32>
  return %1 : tensor<*xf32>
}

// -----

// Constant folding: add with broadcasting, mul, transpose and neg of constants all fold into one
// constant. a + b = [[11, 22], [13, 24]]; * a = [[11, 44], [39, 96]]; transposed and negated.
// CHECK-LABEL: func.func @fold_constants
// CHECK-NEXT: %[[C:.*]] = transformer.constant dense<{{\[\[}}-1.100000e+01, -3.900000e+01], [-4.400000e+01, -9.600000e+01]]> : tensor<2x2xf32>
// CHECK-NEXT: return %[[C]]
func.func @fold_constants() -> tensor<2x2xf32> {
  %a = "transformer.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %b = "transformer.constant"() {value = dense<[10.0, 20.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %0 = "transformer.add"(%a, %b) : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
  %1 = "transformer.mul"(%0, %a) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %2 = "transformer.transpose"(%1) : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %3 = "transformer.neg"(%2) : (tensor<2x2xf32>) -> tensor<2x2xf32>
  return %3 : tensor<2x2xf32>
}

// -----

// Folding a batched, non-square transpose: [2,2,3] -> [2,3,2].
// CHECK-LABEL: func.func @fold_batched_transpose
// CHECK-NEXT: transformer.constant dense<{{\[\[\[}}0.000000e+00, 3.000000e+00], [1.000000e+00, 4.000000e+00], [2.000000e+00, 5.000000e+00]], {{\[\[}}6.000000e+00, 9.000000e+00], [7.000000e+00, 1.000000e+01], [8.000000e+00, 1.100000e+01]]]> : tensor<2x3x2xf32>
func.func @fold_batched_transpose() -> tensor<2x3x2xf32> {
  %a = "transformer.constant"() {value = dense<[[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], [[6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]]> : tensor<2x2x3xf32>} : () -> tensor<2x2x3xf32>
  %0 = "transformer.transpose"(%a) : (tensor<2x2x3xf32>) -> tensor<2x3x2xf32>
  return %0 : tensor<2x3x2xf32>
}

// -----

// Folding broadcasts a column against a row: [[1], [2]] * [10, 20, 30].
// CHECK-LABEL: func.func @fold_outer_product
// CHECK-NEXT: transformer.constant dense<{{\[\[}}1.000000e+01, 2.000000e+01, 3.000000e+01], [2.000000e+01, 4.000000e+01, 6.000000e+01]]> : tensor<2x3xf32>
func.func @fold_outer_product() -> tensor<2x3xf32> {
  %col = "transformer.constant"() {value = dense<[[1.0], [2.0]]> : tensor<2x1xf32>} : () -> tensor<2x1xf32>
  %row = "transformer.constant"() {value = dense<[10.0, 20.0, 30.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %0 = "transformer.mul"(%col, %row) : (tensor<2x1xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// Negative: an unranked result is not folded (the constant's type would differ from it).
// CHECK-LABEL: func.func @no_fold_unranked
// CHECK: transformer.neg
func.func @no_fold_unranked() -> tensor<*xf32> {
  %a = "transformer.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %0 = "transformer.neg"(%a) : (tensor<2xf32>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}

// -----

// Negative: an operand that is not a constant blocks folding.
// CHECK-LABEL: func.func @no_fold_argument
// CHECK: transformer.add
func.func @no_fold_argument(%x: tensor<2xf32>) -> tensor<2xf32> {
  %a = "transformer.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %0 = "transformer.add"(%a, %x) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// merge_heads(split_heads(x)) = x
// CHECK-LABEL: func.func @merge_split_heads
// CHECK-SAME: (%[[X:.*]]: tensor<8x64xf32>)
// CHECK-NEXT: return %[[X]]
func.func @merge_split_heads(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %0 = "transformer.split_heads"(%x) {num_heads = 4 : i64} : (tensor<8x64xf32>) -> tensor<4x8x16xf32>
  %1 = "transformer.merge_heads"(%0) : (tensor<4x8x16xf32>) -> tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}

// -----

// split_heads(merge_heads(x), 4) = x for x with 4 heads.
// CHECK-LABEL: func.func @split_merge_heads
// CHECK-SAME: (%[[X:.*]]: tensor<4x8x16xf32>)
// CHECK-NEXT: return %[[X]]
func.func @split_merge_heads(%x: tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
  %0 = "transformer.merge_heads"(%x) : (tensor<4x8x16xf32>) -> tensor<8x64xf32>
  %1 = "transformer.split_heads"(%0) {num_heads = 4 : i64} : (tensor<8x64xf32>) -> tensor<4x8x16xf32>
  return %1 : tensor<4x8x16xf32>
}

// -----

// merge_heads(split_heads(x)) = x, both token-major (two views).
// CHECK-LABEL: func.func @merge_split_heads_token_major
// CHECK-SAME: (%[[X:.*]]: tensor<8x64xf32>)
// CHECK-NEXT: return %[[X]]
func.func @merge_split_heads_token_major(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %0 = "transformer.split_heads"(%x) {num_heads = 4 : i64, token_major} : (tensor<8x64xf32>) -> tensor<8x4x16xf32>
  %1 = "transformer.merge_heads"(%0) {token_major} : (tensor<8x4x16xf32>) -> tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}

// -----

// split_heads(merge_heads(x), 4) = x, both token-major.
// CHECK-LABEL: func.func @split_merge_heads_token_major
// CHECK-SAME: (%[[X:.*]]: tensor<8x4x16xf32>)
// CHECK-NEXT: return %[[X]]
func.func @split_merge_heads_token_major(%x: tensor<8x4x16xf32>) -> tensor<8x4x16xf32> {
  %0 = "transformer.merge_heads"(%x) {token_major} : (tensor<8x4x16xf32>) -> tensor<8x64xf32>
  %1 = "transformer.split_heads"(%0) {num_heads = 4 : i64, token_major} : (tensor<8x64xf32>) -> tensor<8x4x16xf32>
  return %1 : tensor<8x4x16xf32>
}

// -----

// Negative: split token-major, merged head-major (4 tokens of 4 heads, so the types agree) is a
// real transpose of the heads, not x.
// CHECK-LABEL: func.func @merge_split_heads_mixed_layout
// CHECK: transformer.split_heads
// CHECK: transformer.merge_heads
func.func @merge_split_heads_mixed_layout(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = "transformer.split_heads"(%x) {num_heads = 4 : i64, token_major} : (tensor<4x64xf32>) -> tensor<4x4x16xf32>
  %1 = "transformer.merge_heads"(%0) : (tensor<4x4x16xf32>) -> tensor<4x64xf32>
  return %1 : tensor<4x64xf32>
}

// -----

// Negative: merged token-major, split head-major: the same, the other way round.
// CHECK-LABEL: func.func @split_merge_heads_mixed_layout
// CHECK: transformer.merge_heads
// CHECK: transformer.split_heads
func.func @split_merge_heads_mixed_layout(%x: tensor<4x4x16xf32>) -> tensor<4x4x16xf32> {
  %0 = "transformer.merge_heads"(%x) {token_major} : (tensor<4x4x16xf32>) -> tensor<4x64xf32>
  %1 = "transformer.split_heads"(%0) {num_heads = 4 : i64} : (tensor<4x64xf32>) -> tensor<4x4x16xf32>
  return %1 : tensor<4x4x16xf32>
}

// -----

// Negative: re-splitting into a different number of heads is a real reshuffle.
// CHECK-LABEL: func.func @split_merge_other_heads
// CHECK: transformer.merge_heads
// CHECK: transformer.split_heads
func.func @split_merge_other_heads(%x: tensor<4x8x16xf32>) -> tensor<2x8x32xf32> {
  %0 = "transformer.merge_heads"(%x) : (tensor<4x8x16xf32>) -> tensor<8x64xf32>
  %1 = "transformer.split_heads"(%0) {num_heads = 2 : i64} : (tensor<8x64xf32>) -> tensor<2x8x32xf32>
  return %1 : tensor<2x8x32xf32>
}

// -----

// A splat stands for all its elements without storing them: add(x, 0) checks the zero once (it
// once looped over all 10^14 elements), and folds of splats give splats (they once allocated every
// element and ran out of memory).
// CHECK-LABEL: func.func @huge_splats
// CHECK-SAME: (%[[X:.*]]: tensor<10000000x10000000xf32>)
// CHECK-DAG: %[[NEG:.*]] = transformer.constant dense<-1.000000e+00> : tensor<10000000x10000000xf32>
// CHECK-DAG: %[[T:.*]] = transformer.constant dense<2.000000e+00> : tensor<10000000x10000000xf32>
// CHECK-DAG: %[[SUM:.*]] = transformer.constant dense<3.000000e+00> : tensor<10000000x10000000xf32>
// CHECK: return %[[X]], %[[NEG]], %[[T]], %[[SUM]]
func.func @huge_splats(%x: tensor<10000000x10000000xf32>)
    -> (tensor<10000000x10000000xf32>, tensor<10000000x10000000xf32>, tensor<10000000x10000000xf32>, tensor<10000000x10000000xf32>) {
  %zero = "transformer.constant"() {value = dense<0.0> : tensor<10000000x10000000xf32>} : () -> tensor<10000000x10000000xf32>
  %one = "transformer.constant"() {value = dense<1.0> : tensor<10000000x10000000xf32>} : () -> tensor<10000000x10000000xf32>
  %two = "transformer.constant"() {value = dense<2.0> : tensor<10000000x10000000xf32>} : () -> tensor<10000000x10000000xf32>
  %0 = "transformer.add"(%x, %zero) : (tensor<10000000x10000000xf32>, tensor<10000000x10000000xf32>) -> tensor<10000000x10000000xf32>
  %1 = "transformer.neg"(%one) : (tensor<10000000x10000000xf32>) -> tensor<10000000x10000000xf32>
  %2 = "transformer.transpose"(%two) : (tensor<10000000x10000000xf32>) -> tensor<10000000x10000000xf32>
  %3 = "transformer.add"(%one, %two) : (tensor<10000000x10000000xf32>, tensor<10000000x10000000xf32>) -> tensor<10000000x10000000xf32>
  return %0, %1, %2, %3 : tensor<10000000x10000000xf32>, tensor<10000000x10000000xf32>, tensor<10000000x10000000xf32>, tensor<10000000x10000000xf32>
}

// -----

// Negative: a non-splat result of 2^21 elements (over the 2^20 fold limit) is left to run time.
// CHECK-LABEL: func.func @large_non_splat_fold
// CHECK: transformer.add
func.func @large_non_splat_fold() -> tensor<1048576x2xf32> {
  %row = "transformer.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %col = "transformer.constant"() {value = dense<1.0> : tensor<1048576x1xf32>} : () -> tensor<1048576x1xf32>
  %0 = "transformer.add"(%col, %row) : (tensor<1048576x1xf32>, tensor<2xf32>) -> tensor<1048576x2xf32>
  return %0 : tensor<1048576x2xf32>
}

// -----

// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) = gelu(x), as nanoGPT writes it and
// gpt.compile_module imports it (scalars as tensor<1xf32> constants, x^3 as (x * x) * x).
// CHECK-LABEL: func.func @recover_tanh_gelu
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[G:.*]] = transformer.gelu %[[X]] : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @recover_tanh_gelu(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %half = "transformer.constant"() {value = dense<0.5> : tensor<1xf32>} : () -> tensor<1xf32>
  %one = "transformer.constant"() {value = dense<1.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %c = "transformer.constant"() {value = dense<0.044715> : tensor<1xf32>} : () -> tensor<1xf32>
  %s = "transformer.constant"() {value = dense<0.797884583> : tensor<1xf32>} : () -> tensor<1xf32>
  %hx = "transformer.mul"(%x, %half) : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  %x2 = "transformer.mul"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %x3 = "transformer.mul"(%x2, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %cx3 = "transformer.mul"(%x3, %c) : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  %p = "transformer.add"(%x, %cx3) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %sp = "transformer.mul"(%p, %s) : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  %t = "transformer.tanh"(%sp) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %t1 = "transformer.add"(%t, %one) : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  %0 = "transformer.mul"(%hx, %t1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// The same with every commutative operand pair the other way round, and x * (x * x).
// CHECK-LABEL: func.func @recover_tanh_gelu_commuted
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[G:.*]] = transformer.gelu %[[X]]
// CHECK-NEXT: return %[[G]]
func.func @recover_tanh_gelu_commuted(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %half = "transformer.constant"() {value = dense<0.5> : tensor<1xf32>} : () -> tensor<1xf32>
  %one = "transformer.constant"() {value = dense<1.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %c = "transformer.constant"() {value = dense<0.044715> : tensor<1xf32>} : () -> tensor<1xf32>
  %s = "transformer.constant"() {value = dense<0.797884583> : tensor<1xf32>} : () -> tensor<1xf32>
  %hx = "transformer.mul"(%half, %x) : (tensor<1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %x2 = "transformer.mul"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %x3 = "transformer.mul"(%x, %x2) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %cx3 = "transformer.mul"(%c, %x3) : (tensor<1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %p = "transformer.add"(%cx3, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %sp = "transformer.mul"(%s, %p) : (tensor<1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t = "transformer.tanh"(%sp) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %t1 = "transformer.add"(%one, %t) : (tensor<1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %0 = "transformer.mul"(%t1, %hx) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Negative: 0.04 is not GELU's cubic coefficient, so the product stays as written.
// CHECK-LABEL: func.func @tanh_gelu_wrong_coefficient
// CHECK: transformer.tanh
// CHECK-NOT: transformer.gelu
func.func @tanh_gelu_wrong_coefficient(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %half = "transformer.constant"() {value = dense<0.5> : tensor<1xf32>} : () -> tensor<1xf32>
  %one = "transformer.constant"() {value = dense<1.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %c = "transformer.constant"() {value = dense<0.04> : tensor<1xf32>} : () -> tensor<1xf32>
  %s = "transformer.constant"() {value = dense<0.797884583> : tensor<1xf32>} : () -> tensor<1xf32>
  %hx = "transformer.mul"(%x, %half) : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  %x2 = "transformer.mul"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %x3 = "transformer.mul"(%x2, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %cx3 = "transformer.mul"(%x3, %c) : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  %p = "transformer.add"(%x, %cx3) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %sp = "transformer.mul"(%p, %s) : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  %t = "transformer.tanh"(%sp) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %t1 = "transformer.add"(%t, %one) : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  %0 = "transformer.mul"(%hx, %t1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// weight * (x * rsqrt(mean(x * x) + eps)) = rms_norm(x, weight, eps), as HF's LlamaRMSNorm is
// imported by gpt.compile_module (x^2 as x * x, eps a tensor<1xf32> splat).
// CHECK-LABEL: func.func @recover_rms_norm
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[N:.*]] = transformer.rms_norm %[[X]], %[[W]] {epsilon = 9.99999997E-7 : f32}
// CHECK-SAME: (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[N]]
func.func @recover_rms_norm(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %eps = "transformer.constant"() {value = dense<1.0e-6> : tensor<1xf32>} : () -> tensor<1xf32>
  %x2 = "transformer.mul"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = "transformer.mean"(%x2) : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %v = "transformer.add"(%m, %eps) : (tensor<4x1xf32>, tensor<1xf32>) -> tensor<4x1xf32>
  %r = "transformer.rsqrt"(%v) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = "transformer.mul"(%x, %r) : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %0 = "transformer.mul"(%w, %n) : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// The same with every commutative operand pair the other way round, rank 3, and epsilon 1e-5 (the
// attribute's default, so not printed).
// CHECK-LABEL: func.func @recover_rms_norm_commuted
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[N:.*]] = transformer.rms_norm %[[X]], %[[W]] : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[N]]
func.func @recover_rms_norm_commuted(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %eps = "transformer.constant"() {value = dense<1.0e-5> : tensor<1xf32>} : () -> tensor<1xf32>
  %x2 = "transformer.mul"(%x, %x) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %m = "transformer.mean"(%x2) : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %v = "transformer.add"(%eps, %m) : (tensor<1xf32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %r = "transformer.rsqrt"(%v) : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %n = "transformer.mul"(%r, %x) : (tensor<2x4x1xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %0 = "transformer.mul"(%n, %w) : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// -----

// Without a weight: rms_norm with a weight of ones.
// CHECK-LABEL: func.func @recover_rms_norm_unweighted
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[ONES:.*]] = transformer.constant dense<1.000000e+00> : tensor<8xf32>
// CHECK-NEXT: %[[N:.*]] = transformer.rms_norm %[[X]], %[[ONES]] {epsilon = 9.99999997E-7 : f32}
// CHECK-NEXT: return %[[N]]
func.func @recover_rms_norm_unweighted(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %eps = "transformer.constant"() {value = dense<1.0e-6> : tensor<1xf32>} : () -> tensor<1xf32>
  %x2 = "transformer.mul"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = "transformer.mean"(%x2) : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %v = "transformer.add"(%m, %eps) : (tensor<4x1xf32>, tensor<1xf32>) -> tensor<4x1xf32>
  %r = "transformer.rsqrt"(%v) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %0 = "transformer.mul"(%x, %r) : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Negative: the unweighted norm is also returned, so the weight stays a product (folding it
// would compute the norm twice).
// CHECK-LABEL: func.func @rms_norm_weight_not_folded_into_a_shared_norm
// CHECK: %[[N:.*]] = transformer.rms_norm
// CHECK-NEXT: %[[Y:.*]] = transformer.mul %{{.*}}, %[[N]]
// CHECK-NEXT: return %[[Y]], %[[N]]
func.func @rms_norm_weight_not_folded_into_a_shared_norm(%x: tensor<4x8xf32>, %w: tensor<8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %eps = "transformer.constant"() {value = dense<1.0e-6> : tensor<1xf32>} : () -> tensor<1xf32>
  %x2 = "transformer.mul"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = "transformer.mean"(%x2) : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %v = "transformer.add"(%m, %eps) : (tensor<4x1xf32>, tensor<1xf32>) -> tensor<4x1xf32>
  %r = "transformer.rsqrt"(%v) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = "transformer.mul"(%x, %r) : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %0 = "transformer.mul"(%w, %n) : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0, %n : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Negative: the mean of x * y is not x's mean square, and an epsilon of 0 is not RMSNorm's
// (rms_norm requires a positive one).
// CHECK-LABEL: func.func @rms_norm_not_of_x
// CHECK-NOT: transformer.rms_norm
// CHECK: return
func.func @rms_norm_not_of_x(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %eps = "transformer.constant"() {value = dense<1.0e-6> : tensor<1xf32>} : () -> tensor<1xf32>
  %zero = "transformer.constant"() {value = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %xy = "transformer.mul"(%x, %y) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = "transformer.mean"(%xy) : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %v = "transformer.add"(%m, %eps) : (tensor<4x1xf32>, tensor<1xf32>) -> tensor<4x1xf32>
  %r = "transformer.rsqrt"(%v) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %0 = "transformer.mul"(%x, %r) : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %x2 = "transformer.mul"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m2 = "transformer.mean"(%x2) : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %v2 = "transformer.add"(%m2, %zero) : (tensor<4x1xf32>, tensor<1xf32>) -> tensor<4x1xf32>
  %r2 = "transformer.rsqrt"(%v2) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %1 = "transformer.mul"(%x, %r2) : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// silu(g) * u = swiglu(g, u), in either operand order, as HF's LlamaMLP is imported.
// CHECK-LABEL: func.func @recover_swiglu
// CHECK-SAME: (%[[G:.*]]: tensor<4x16xf32>, %[[U:.*]]: tensor<4x16xf32>)
// CHECK-NEXT: %[[A:.*]] = transformer.swiglu %[[G]], %[[U]] : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[B:.*]] = transformer.swiglu %[[U]], %[[G]]
// CHECK-NEXT: return %[[A]], %[[B]]
func.func @recover_swiglu(%g: tensor<4x16xf32>, %u: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %s = "transformer.silu"(%g) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %0 = "transformer.mul"(%s, %u) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %t = "transformer.silu"(%u) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %1 = "transformer.mul"(%g, %t) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %0, %1 : tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// Negative: swiglu does not broadcast, so silu(g) times a row stays a product.
// CHECK-LABEL: func.func @swiglu_not_broadcast
// CHECK: transformer.silu
// CHECK-NEXT: transformer.mul
// CHECK-NOT: transformer.swiglu
func.func @swiglu_not_broadcast(%g: tensor<4x16xf32>, %u: tensor<16xf32>) -> tensor<4x16xf32> {
  %s = "transformer.silu"(%g) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %0 = "transformer.mul"(%s, %u) : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}
