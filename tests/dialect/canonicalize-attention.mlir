// Canonicalization recovering transformer.causal_attention from attention written out op by op
// (RecoverAttention.h), as the PyTorch importer emits it, and grouped-query attention from
// repeated key/value heads: positive and negative cases.
// RUN: gpt-opt %s --split-input-file --canonicalize | FileCheck %s

// A lower-triangular constant mask (nanoGPT's `tril` buffer), the scale as a splat product.
// CHECK-LABEL: func.func @tril_constant
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8xf32>, %[[K:.*]]: tensor<2x4x8xf32>, %[[V:.*]]: tensor<2x4x8xf32>)
// CHECK-NEXT: %[[A:.*]] = transformer.causal_attention %[[Q]], %[[K]], %[[V]] {scale = 0.35355{{[0-9]+}} : f32}
// CHECK-SAME: -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[A]]
func.func @tril_constant(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %kt = transformer.transpose %k : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  %s = transformer.matmul %q, %kt : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %c = transformer.constant dense<0.353553385> : tensor<1xf32>
  %ss = transformer.mul %s, %c : (tensor<2x4x4xf32>, tensor<1xf32>) -> tensor<2x4x4xf32>
  %mask = arith.constant dense<[[true, false, false, false], [true, true, false, false],
                                [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %fill = transformer.constant dense<0xFF800000> : tensor<1xf32>
  %m = transformer.where %mask, %ss, %fill : (tensor<4x4xi1>, tensor<2x4x4xf32>, tensor<1xf32>) -> tensor<2x4x4xf32>
  %p = transformer.softmax %m : tensor<2x4x4xf32> -> tensor<2x4x4xf32>
  %y = transformer.matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// masked_fill(scores, mask, -inf) with the excluded positions (`tril == 0`) as the condition and
// HF's finfo(float32).min as the fill; no scale (1).
// CHECK-LABEL: func.func @masked_fill_form
// CHECK: transformer.causal_attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f32}
// CHECK-NOT: transformer.where
func.func @masked_fill_form(%q: tensor<2x3x8xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  %kt = transformer.transpose %k : tensor<2x3x8xf32> -> tensor<2x8x3xf32>
  %s = transformer.matmul %q, %kt : (tensor<2x3x8xf32>, tensor<2x8x3xf32>) -> tensor<2x3x3xf32>
  %excluded = arith.constant dense<[[false, true, true], [false, false, true], [false, false, false]]> : tensor<3x3xi1>
  %fill = transformer.constant dense<-3.40282347e+38> : tensor<1xf32>
  %m = transformer.where %excluded, %fill, %s : (tensor<3x3xi1>, tensor<1xf32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %p = transformer.softmax %m : tensor<2x3x3xf32> -> tensor<2x3x3xf32>
  %y = transformer.matmul %p, %v : (tensor<2x3x3xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// The mask built from index comparisons: key j kept from query i iff j <= i (`arange(T)[None, :]
// <= arange(T)[:, None]`), here written as i >= j.
// CHECK-LABEL: func.func @iota_comparison
// CHECK-NOT: arith.cmpi
// CHECK: transformer.causal_attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f32}
// CHECK-NOT: mask
func.func @iota_comparison(%q: tensor<2x4x16xf32>, %k: tensor<2x4x16xf32>, %v: tensor<2x4x16xf32>) -> tensor<2x4x16xf32> {
  %rows = tensor.generate {
  ^bb0(%i: index, %j: index):
    tensor.yield %i : index
  } : tensor<4x4xindex>
  %cols = tensor.generate {
  ^bb0(%i: index, %j: index):
    tensor.yield %j : index
  } : tensor<4x4xindex>
  %mask = arith.cmpi sge, %rows, %cols : tensor<4x4xindex>
  %kt = transformer.transpose %k : tensor<2x4x16xf32> -> tensor<2x16x4xf32>
  %s = transformer.matmul %q, %kt : (tensor<2x4x16xf32>, tensor<2x16x4xf32>) -> tensor<2x4x4xf32>
  %c = transformer.constant dense<2.500000e-01> : tensor<1xf32>
  %ss = transformer.mul %c, %s : (tensor<1xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %fill = transformer.constant dense<0xFF800000> : tensor<1xf32>
  %m = transformer.where %mask, %ss, %fill : (tensor<4x4xi1>, tensor<2x4x4xf32>, tensor<1xf32>) -> tensor<2x4x4xf32>
  %p = transformer.softmax %m : tensor<2x4x4xf32> -> tensor<2x4x4xf32>
  %y = transformer.matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// -----

// A constant mask that is not causal (every query sees key 0 and itself: a "sink" pattern)
// becomes the attention's mask operand.
// CHECK-LABEL: func.func @constant_not_causal
// CHECK: %[[M:.*]] = arith.constant dense<{{\[}}[true, false, false], [true, true, false], [true, false, true]]> : tensor<3x3xi1>
// CHECK: transformer.causal_attention %{{.*}}, %{{.*}}, %{{.*}} mask %[[M]] {scale = 5.000000e-01 : f32}
func.func @constant_not_causal(%q: tensor<1x3x4xf32>, %k: tensor<1x3x4xf32>, %v: tensor<1x3x4xf32>) -> tensor<1x3x4xf32> {
  %kt = transformer.transpose %k : tensor<1x3x4xf32> -> tensor<1x4x3xf32>
  %s = transformer.matmul %q, %kt : (tensor<1x3x4xf32>, tensor<1x4x3xf32>) -> tensor<1x3x3xf32>
  %c = transformer.constant dense<5.000000e-01> : tensor<1xf32>
  %ss = transformer.mul %s, %c : (tensor<1x3x3xf32>, tensor<1xf32>) -> tensor<1x3x3xf32>
  %mask = arith.constant dense<[[true, false, false], [true, true, false], [true, false, true]]> : tensor<3x3xi1>
  %fill = transformer.constant dense<0xFF800000> : tensor<1xf32>
  %m = transformer.where %mask, %ss, %fill : (tensor<3x3xi1>, tensor<1x3x3xf32>, tensor<1xf32>) -> tensor<1x3x3xf32>
  %p = transformer.softmax %m : tensor<1x3x3xf32> -> tensor<1x3x3xf32>
  %y = transformer.matmul %p, %v : (tensor<1x3x3xf32>, tensor<1x3x4xf32>) -> tensor<1x3x4xf32>
  return %y : tensor<1x3x4xf32>
}

// -----

// A bidirectional iota comparison (j >= i, keys after the query) becomes the mask operand too.
// CHECK-LABEL: func.func @iota_not_causal
// CHECK: %[[M:.*]] = arith.constant dense<{{\[}}[true, true], [false, true]]> : tensor<2x2xi1>
// CHECK: transformer.causal_attention %{{.*}} mask %[[M]]
func.func @iota_not_causal(%q: tensor<1x2x4xf32>, %k: tensor<1x2x4xf32>, %v: tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  %rows = tensor.generate {
  ^bb0(%i: index, %j: index):
    tensor.yield %i : index
  } : tensor<2x2xindex>
  %cols = tensor.generate {
  ^bb0(%i: index, %j: index):
    tensor.yield %j : index
  } : tensor<2x2xindex>
  %mask = arith.cmpi sge, %cols, %rows : tensor<2x2xindex>
  %kt = transformer.transpose %k : tensor<1x2x4xf32> -> tensor<1x4x2xf32>
  %s = transformer.matmul %q, %kt : (tensor<1x2x4xf32>, tensor<1x4x2xf32>) -> tensor<1x2x2xf32>
  %fill = transformer.constant dense<0xFF800000> : tensor<1xf32>
  %m = transformer.where %mask, %s, %fill : (tensor<2x2xi1>, tensor<1x2x2xf32>, tensor<1xf32>) -> tensor<1x2x2xf32>
  %p = transformer.softmax %m : tensor<1x2x2xf32> -> tensor<1x2x2xf32>
  %y = transformer.matmul %p, %v : (tensor<1x2x2xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  return %y : tensor<1x2x4xf32>
}

// -----

// Negative: a mask computed from the inputs (a function argument) is not known at compile time.
// CHECK-LABEL: func.func @mask_from_input
// CHECK-NOT: transformer.causal_attention
// CHECK: transformer.where
func.func @mask_from_input(%q: tensor<1x2x4xf32>, %k: tensor<1x2x4xf32>, %v: tensor<1x2x4xf32>, %mask: tensor<2x2xi1>) -> tensor<1x2x4xf32> {
  %kt = transformer.transpose %k : tensor<1x2x4xf32> -> tensor<1x4x2xf32>
  %s = transformer.matmul %q, %kt : (tensor<1x2x4xf32>, tensor<1x4x2xf32>) -> tensor<1x2x2xf32>
  %fill = transformer.constant dense<0xFF800000> : tensor<1xf32>
  %m = transformer.where %mask, %s, %fill : (tensor<2x2xi1>, tensor<1x2x2xf32>, tensor<1xf32>) -> tensor<1x2x2xf32>
  %p = transformer.softmax %m : tensor<1x2x2xf32> -> tensor<1x2x2xf32>
  %y = transformer.matmul %p, %v : (tensor<1x2x2xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  return %y : tensor<1x2x4xf32>
}

// -----

// Negative: the upper triangle kept with the condition meaning "masked" (where(c, fill, s)):
// query 1 keeps only key 0 and query 0 keeps nothing, so a row would be a softmax of no keys.
// CHECK-LABEL: func.func @row_without_keys
// CHECK-NOT: transformer.causal_attention
// CHECK: transformer.where
func.func @row_without_keys(%q: tensor<1x2x4xf32>, %k: tensor<1x2x4xf32>, %v: tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  %kt = transformer.transpose %k : tensor<1x2x4xf32> -> tensor<1x4x2xf32>
  %s = transformer.matmul %q, %kt : (tensor<1x2x4xf32>, tensor<1x4x2xf32>) -> tensor<1x2x2xf32>
  %masked = arith.constant dense<[[true, true], [false, true]]> : tensor<2x2xi1>
  %fill = transformer.constant dense<0xFF800000> : tensor<1xf32>
  %m = transformer.where %masked, %fill, %s : (tensor<2x2xi1>, tensor<1xf32>, tensor<1x2x2xf32>) -> tensor<1x2x2xf32>
  %p = transformer.softmax %m : tensor<1x2x2xf32> -> tensor<1x2x2xf32>
  %y = transformer.matmul %p, %v : (tensor<1x2x2xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  return %y : tensor<1x2x4xf32>
}

// -----

// Negative: the scale is not a splat (a per-position factor), so it is no attention scale.
// CHECK-LABEL: func.func @scale_not_splat
// CHECK-NOT: transformer.causal_attention
// CHECK: transformer.softmax
func.func @scale_not_splat(%q: tensor<1x2x4xf32>, %k: tensor<1x2x4xf32>, %v: tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  %kt = transformer.transpose %k : tensor<1x2x4xf32> -> tensor<1x4x2xf32>
  %s = transformer.matmul %q, %kt : (tensor<1x2x4xf32>, tensor<1x4x2xf32>) -> tensor<1x2x2xf32>
  %c = transformer.constant dense<[0.5, 0.25]> : tensor<2xf32>
  %ss = transformer.mul %s, %c : (tensor<1x2x2xf32>, tensor<2xf32>) -> tensor<1x2x2xf32>
  %mask = arith.constant dense<[[true, false], [true, true]]> : tensor<2x2xi1>
  %fill = transformer.constant dense<0xFF800000> : tensor<1xf32>
  %m = transformer.where %mask, %ss, %fill : (tensor<2x2xi1>, tensor<1x2x2xf32>, tensor<1xf32>) -> tensor<1x2x2xf32>
  %p = transformer.softmax %m : tensor<1x2x2xf32> -> tensor<1x2x2xf32>
  %y = transformer.matmul %p, %v : (tensor<1x2x2xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  return %y : tensor<1x2x4xf32>
}

// -----

// Negative: a negative scale (the verifier's scale must be > 0).
// CHECK-LABEL: func.func @scale_negative
// CHECK-NOT: transformer.causal_attention
func.func @scale_negative(%q: tensor<1x2x4xf32>, %k: tensor<1x2x4xf32>, %v: tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  %kt = transformer.transpose %k : tensor<1x2x4xf32> -> tensor<1x4x2xf32>
  %s = transformer.matmul %q, %kt : (tensor<1x2x4xf32>, tensor<1x4x2xf32>) -> tensor<1x2x2xf32>
  %c = transformer.constant dense<-5.000000e-01> : tensor<1xf32>
  %ss = transformer.mul %s, %c : (tensor<1x2x2xf32>, tensor<1xf32>) -> tensor<1x2x2xf32>
  %mask = arith.constant dense<[[true, false], [true, true]]> : tensor<2x2xi1>
  %fill = transformer.constant dense<0xFF800000> : tensor<1xf32>
  %m = transformer.where %mask, %ss, %fill : (tensor<2x2xi1>, tensor<1x2x2xf32>, tensor<1xf32>) -> tensor<1x2x2xf32>
  %p = transformer.softmax %m : tensor<1x2x2xf32> -> tensor<1x2x2xf32>
  %y = transformer.matmul %p, %v : (tensor<1x2x2xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  return %y : tensor<1x2x4xf32>
}

// -----

// Negative: the fill is 0, not -inf, so masked scores still count in the softmax.
// CHECK-LABEL: func.func @fill_not_masking
// CHECK-NOT: transformer.causal_attention
func.func @fill_not_masking(%q: tensor<1x2x4xf32>, %k: tensor<1x2x4xf32>, %v: tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  %kt = transformer.transpose %k : tensor<1x2x4xf32> -> tensor<1x4x2xf32>
  %s = transformer.matmul %q, %kt : (tensor<1x2x4xf32>, tensor<1x4x2xf32>) -> tensor<1x2x2xf32>
  %mask = arith.constant dense<[[true, false], [true, true]]> : tensor<2x2xi1>
  %fill = transformer.constant dense<0.000000e+00> : tensor<1xf32>
  %m = transformer.where %mask, %s, %fill : (tensor<2x2xi1>, tensor<1x2x2xf32>, tensor<1xf32>) -> tensor<1x2x2xf32>
  %p = transformer.softmax %m : tensor<1x2x2xf32> -> tensor<1x2x2xf32>
  %y = transformer.matmul %p, %v : (tensor<1x2x2xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  return %y : tensor<1x2x4xf32>
}

// -----

// Negative: wrong operand order, v @ probabilities, is not attention.
// CHECK-LABEL: func.func @wrong_operand_order
// CHECK-NOT: transformer.causal_attention
func.func @wrong_operand_order(%q: tensor<1x2x2xf32>, %k: tensor<1x2x2xf32>, %v: tensor<1x2x2xf32>) -> tensor<1x2x2xf32> {
  %kt = transformer.transpose %k : tensor<1x2x2xf32> -> tensor<1x2x2xf32>
  %s = transformer.matmul %q, %kt : (tensor<1x2x2xf32>, tensor<1x2x2xf32>) -> tensor<1x2x2xf32>
  %mask = arith.constant dense<[[true, false], [true, true]]> : tensor<2x2xi1>
  %fill = transformer.constant dense<0xFF800000> : tensor<1xf32>
  %m = transformer.where %mask, %s, %fill : (tensor<2x2xi1>, tensor<1x2x2xf32>, tensor<1xf32>) -> tensor<1x2x2xf32>
  %p = transformer.softmax %m : tensor<1x2x2xf32> -> tensor<1x2x2xf32>
  %y = transformer.matmul %v, %p : (tensor<1x2x2xf32>, tensor<1x2x2xf32>) -> tensor<1x2x2xf32>
  return %y : tensor<1x2x2xf32>
}

// -----

// Negative: q @ k without the transpose (the scores of k^T, not k) is not attention.
// CHECK-LABEL: func.func @key_not_transposed
// CHECK-NOT: transformer.causal_attention
func.func @key_not_transposed(%q: tensor<1x2x2xf32>, %k: tensor<1x2x2xf32>, %v: tensor<1x2x2xf32>) -> tensor<1x2x2xf32> {
  %s = transformer.matmul %q, %k : (tensor<1x2x2xf32>, tensor<1x2x2xf32>) -> tensor<1x2x2xf32>
  %mask = arith.constant dense<[[true, false], [true, true]]> : tensor<2x2xi1>
  %fill = transformer.constant dense<0xFF800000> : tensor<1xf32>
  %m = transformer.where %mask, %s, %fill : (tensor<2x2xi1>, tensor<1x2x2xf32>, tensor<1xf32>) -> tensor<1x2x2xf32>
  %p = transformer.softmax %m : tensor<1x2x2xf32> -> tensor<1x2x2xf32>
  %y = transformer.matmul %p, %v : (tensor<1x2x2xf32>, tensor<1x2x2xf32>) -> tensor<1x2x2xf32>
  return %y : tensor<1x2x2xf32>
}

// -----

// A batch before the heads ([B, H, T, d], an imported batch of 2): the leading dims are collapsed
// into one for the attention and restored after it.
// CHECK-LABEL: func.func @batched
// CHECK-SAME: (%[[Q:.*]]: tensor<2x3x4x8xf32>, %[[K:.*]]: tensor<2x3x4x8xf32>, %[[V:.*]]: tensor<2x3x4x8xf32>)
// CHECK-DAG: %[[Q3:.*]] = transformer.reshape %[[Q]] : tensor<2x3x4x8xf32> -> tensor<6x4x8xf32>
// CHECK-DAG: %[[K3:.*]] = transformer.reshape %[[K]] : tensor<2x3x4x8xf32> -> tensor<6x4x8xf32>
// CHECK-DAG: %[[V3:.*]] = transformer.reshape %[[V]] : tensor<2x3x4x8xf32> -> tensor<6x4x8xf32>
// CHECK: %[[A:.*]] = transformer.causal_attention %[[Q3]], %[[K3]], %[[V3]] {scale = 1.250000e-01 : f32}
// CHECK-SAME: -> tensor<6x4x8xf32>
// CHECK: %[[Y:.*]] = transformer.reshape %[[A]] : tensor<6x4x8xf32> -> tensor<2x3x4x8xf32>
// CHECK: return %[[Y]]
func.func @batched(%q: tensor<2x3x4x8xf32>, %k: tensor<2x3x4x8xf32>, %v: tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32> {
  %kt = transformer.transpose %k : tensor<2x3x4x8xf32> -> tensor<2x3x8x4xf32>
  %s = transformer.matmul %q, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %c = transformer.constant dense<1.250000e-01> : tensor<1xf32>
  %ss = transformer.mul %s, %c : (tensor<2x3x4x4xf32>, tensor<1xf32>) -> tensor<2x3x4x4xf32>
  %mask = arith.constant dense<[[true, false, false, false], [true, true, false, false],
                                [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %fill = transformer.constant dense<0xFF800000> : tensor<1xf32>
  %m = transformer.where %mask, %ss, %fill : (tensor<4x4xi1>, tensor<2x3x4x4xf32>, tensor<1xf32>) -> tensor<2x3x4x4xf32>
  %p = transformer.softmax %m : tensor<2x3x4x4xf32> -> tensor<2x3x4x4xf32>
  %y = transformer.matmul %p, %v : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %y : tensor<2x3x4x8xf32>
}

// -----

// HF's repeat_kv as imported (2 key/value heads, each copied twice: reshape, broadcast, reshape):
// the attention reads the 2 heads themselves, grouped-query attention.
// CHECK-LABEL: func.func @repeated_key_value_heads
// CHECK-SAME: (%[[Q:.*]]: tensor<4x8x16xf32>, %[[K:.*]]: tensor<2x8x16xf32>, %[[V:.*]]: tensor<2x8x16xf32>)
// CHECK-NEXT: %[[A:.*]] = transformer.causal_attention %[[Q]], %[[K]], %[[V]] {scale = 2.500000e-01 : f32}
// CHECK-SAME: (tensor<4x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<4x8x16xf32>
// CHECK-NEXT: return %[[A]]
func.func @repeated_key_value_heads(%q: tensor<4x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>)
    -> tensor<4x8x16xf32> {
  %k1 = transformer.reshape %k : tensor<2x8x16xf32> -> tensor<2x1x8x16xf32>
  %k2 = transformer.broadcast %k1 : tensor<2x1x8x16xf32> -> tensor<2x2x8x16xf32>
  %k4 = transformer.reshape %k2 : tensor<2x2x8x16xf32> -> tensor<4x8x16xf32>
  %v1 = transformer.reshape %v : tensor<2x8x16xf32> -> tensor<2x1x8x16xf32>
  %v2 = transformer.broadcast %v1 : tensor<2x1x8x16xf32> -> tensor<2x2x8x16xf32>
  %v4 = transformer.reshape %v2 : tensor<2x2x8x16xf32> -> tensor<4x8x16xf32>
  %a = transformer.causal_attention %q, %k4, %v4 {scale = 0.25 : f32}
      : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  return %a : tensor<4x8x16xf32>
}

// -----

// Negative: keys copied in the other order (head h of the result is head h mod 2, a broadcast of
// [1, 2, T, d]) are not grouped-query attention's, though the values are: both stay copies.
// CHECK-LABEL: func.func @heads_repeated_otherwise
// CHECK: %[[K4:.*]] = transformer.reshape %{{.*}} : tensor<2x2x8x16xf32> -> tensor<4x8x16xf32>
// CHECK: %[[V4:.*]] = transformer.reshape %{{.*}} : tensor<2x2x8x16xf32> -> tensor<4x8x16xf32>
// CHECK-NEXT: transformer.causal_attention %{{.*}}, %[[K4]], %[[V4]] {scale
func.func @heads_repeated_otherwise(%q: tensor<4x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>)
    -> tensor<4x8x16xf32> {
  %k1 = transformer.reshape %k : tensor<2x8x16xf32> -> tensor<1x2x8x16xf32>
  %k2 = transformer.broadcast %k1 : tensor<1x2x8x16xf32> -> tensor<2x2x8x16xf32>
  %k4 = transformer.reshape %k2 : tensor<2x2x8x16xf32> -> tensor<4x8x16xf32>
  %v1 = transformer.reshape %v : tensor<2x8x16xf32> -> tensor<2x1x8x16xf32>
  %v2 = transformer.broadcast %v1 : tensor<2x1x8x16xf32> -> tensor<2x2x8x16xf32>
  %v4 = transformer.reshape %v2 : tensor<2x2x8x16xf32> -> tensor<4x8x16xf32>
  %a = transformer.causal_attention %q, %k4, %v4 {scale = 0.25 : f32}
      : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  return %a : tensor<4x8x16xf32>
}
