// --transformer-attention-layout: token-major heads where causal_attention alone reads or writes them.
// RUN: gpt-opt %s --split-input-file --transformer-attention-layout | FileCheck %s
// A second run changes nothing.
// RUN: gpt-opt %s --split-input-file --transformer-attention-layout --transformer-attention-layout | FileCheck %s

// The forward program: q, k and v are split from one projection and read only by attention,
// whose result only merge_heads reads. Every layout becomes token-major, types follow.
// CHECK-LABEL: func.func @forward
// CHECK: %[[Q:.*]] = transformer.split_heads %{{.*}} {num_heads = 2 : i64, token_major} : tensor<8x8xf32> -> tensor<8x2x4xf32>
// CHECK: %[[K:.*]] = transformer.split_heads %{{.*}} {num_heads = 2 : i64, token_major} : tensor<8x8xf32> -> tensor<8x2x4xf32>
// CHECK: %[[V:.*]] = transformer.split_heads %{{.*}} {num_heads = 2 : i64, token_major} : tensor<8x8xf32> -> tensor<8x2x4xf32>
// CHECK: %[[A:.*]] = transformer.causal_attention %[[Q]], %[[K]], %[[V]] {key_token_major, query_token_major, result_token_major, scale = 5.000000e-01 : f32, value_token_major}
// CHECK-SAME: : (tensor<8x2x4xf32>, tensor<8x2x4xf32>, tensor<8x2x4xf32>) -> tensor<8x2x4xf32>
// CHECK: transformer.merge_heads %[[A]] {token_major} : tensor<8x2x4xf32> -> tensor<8x8xf32>
func.func @forward(%qkv: tensor<8x24xf32>) -> tensor<8x8xf32> {
  %q = transformer.slice %qkv {offset = 0 : i64, size = 8 : i64} : tensor<8x24xf32> -> tensor<8x8xf32>
  %k = transformer.slice %qkv {offset = 8 : i64, size = 8 : i64} : tensor<8x24xf32> -> tensor<8x8xf32>
  %v = transformer.slice %qkv {offset = 16 : i64, size = 8 : i64} : tensor<8x24xf32> -> tensor<8x8xf32>
  %qh = transformer.split_heads %q {num_heads = 2 : i64} : tensor<8x8xf32> -> tensor<2x8x4xf32>
  %kh = transformer.split_heads %k {num_heads = 2 : i64} : tensor<8x8xf32> -> tensor<2x8x4xf32>
  %vh = transformer.split_heads %v {num_heads = 2 : i64} : tensor<8x8xf32> -> tensor<2x8x4xf32>
  %a = transformer.causal_attention %qh, %kh, %vh {scale = 0.5 : f32} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %m = transformer.merge_heads %a : tensor<2x8x4xf32> -> tensor<8x8xf32>
  return %m : tensor<8x8xf32>
}

// -----

// The step program: k and v reach attention through cache_update, which keeps them head-major;
// only the query and the result become token-major.
// CHECK-LABEL: func.func @step
// CHECK: %[[Q:.*]] = transformer.split_heads %{{.*}} {num_heads = 2 : i64, token_major} : tensor<1x8xf32> -> tensor<1x2x4xf32>
// CHECK: %[[K:.*]] = transformer.split_heads %{{.*}} {num_heads = 2 : i64} : tensor<1x8xf32> -> tensor<2x1x4xf32>
// CHECK: %[[V:.*]] = transformer.split_heads %{{.*}} {num_heads = 2 : i64} : tensor<1x8xf32> -> tensor<2x1x4xf32>
// CHECK: %[[KC:.*]] = transformer.cache_update %[[K]]
// CHECK: %[[VC:.*]] = transformer.cache_update %[[V]]
// CHECK: %[[A:.*]] = transformer.causal_attention %[[Q]], %[[KC]], %[[VC]] offset %{{.*}} {query_token_major, result_token_major, scale = 5.000000e-01 : f32}
// CHECK-SAME: : (tensor<1x2x4xf32>, tensor<2x16x4xf32>, tensor<2x16x4xf32>, index) -> tensor<1x2x4xf32>
// CHECK: transformer.merge_heads %[[A]] {token_major} : tensor<1x2x4xf32> -> tensor<1x8xf32>
func.func @step(%q: tensor<1x8xf32>, %k: tensor<1x8xf32>, %v: tensor<1x8xf32>, %kcache: tensor<2x16x4xf32>,
                %vcache: tensor<2x16x4xf32>, %pos: index) -> (tensor<1x8xf32>, tensor<2x16x4xf32>, tensor<2x16x4xf32>) {
  %qh = transformer.split_heads %q {num_heads = 2 : i64} : tensor<1x8xf32> -> tensor<2x1x4xf32>
  %kh = transformer.split_heads %k {num_heads = 2 : i64} : tensor<1x8xf32> -> tensor<2x1x4xf32>
  %vh = transformer.split_heads %v {num_heads = 2 : i64} : tensor<1x8xf32> -> tensor<2x1x4xf32>
  %kc = transformer.cache_update %kh into %kcache[%pos] : tensor<2x1x4xf32>, tensor<2x16x4xf32> -> tensor<2x16x4xf32>
  %vc = transformer.cache_update %vh into %vcache[%pos] : tensor<2x1x4xf32>, tensor<2x16x4xf32> -> tensor<2x16x4xf32>
  %a = transformer.causal_attention %qh, %kc, %vc offset %pos {scale = 0.5 : f32} : (tensor<2x1x4xf32>, tensor<2x16x4xf32>, tensor<2x16x4xf32>, index) -> tensor<2x1x4xf32>
  %m = transformer.merge_heads %a : tensor<2x1x4xf32> -> tensor<1x8xf32>
  return %m, %kc, %vc : tensor<1x8xf32>, tensor<2x16x4xf32>, tensor<2x16x4xf32>
}

// -----

// RoPE: q and k reach attention through rope, which reads [H, T, d]; only v is split for
// attention alone.
// CHECK-LABEL: func.func @rope
// CHECK: %[[Q:.*]] = transformer.split_heads %{{.*}} {num_heads = 2 : i64} : tensor<8x8xf32> -> tensor<2x8x4xf32>
// CHECK: %[[V:.*]] = transformer.split_heads %{{.*}} {num_heads = 2 : i64, token_major} : tensor<8x8xf32> -> tensor<8x2x4xf32>
// CHECK: %[[R:.*]] = transformer.rope %[[Q]]
// CHECK: transformer.causal_attention %[[R]], %[[R]], %[[V]] {result_token_major, scale = 5.000000e-01 : f32, value_token_major}
// CHECK-SAME: : (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<8x2x4xf32>) -> tensor<8x2x4xf32>
func.func @rope(%q: tensor<8x8xf32>, %v: tensor<8x8xf32>, %pos: tensor<8xi64>) -> tensor<8x8xf32> {
  %qh = transformer.split_heads %q {num_heads = 2 : i64} : tensor<8x8xf32> -> tensor<2x8x4xf32>
  %vh = transformer.split_heads %v {num_heads = 2 : i64} : tensor<8x8xf32> -> tensor<2x8x4xf32>
  %r = transformer.rope %qh, %pos : (tensor<2x8x4xf32>, tensor<8xi64>) -> tensor<2x8x4xf32>
  %a = transformer.causal_attention %r, %r, %vh {scale = 0.5 : f32} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %m = transformer.merge_heads %a : tensor<2x8x4xf32> -> tensor<8x8xf32>
  return %m : tensor<8x8xf32>
}

// -----

// One split read as both key and value: both operands become token-major.
// CHECK-LABEL: func.func @shared_key_value
// CHECK: %[[KV:.*]] = transformer.split_heads %{{.*}} {num_heads = 2 : i64, token_major} : tensor<8x8xf32> -> tensor<8x2x4xf32>
// CHECK: transformer.causal_attention %{{.*}}, %[[KV]], %[[KV]] {key_token_major, scale = 5.000000e-01 : f32, value_token_major}
// CHECK-SAME: : (tensor<2x8x4xf32>, tensor<8x2x4xf32>, tensor<8x2x4xf32>) -> tensor<2x8x4xf32>
func.func @shared_key_value(%q: tensor<2x8x4xf32>, %x: tensor<8x8xf32>) -> tensor<2x8x4xf32> {
  %kv = transformer.split_heads %x {num_heads = 2 : i64} : tensor<8x8xf32> -> tensor<2x8x4xf32>
  %a = transformer.causal_attention %q, %kv, %kv {scale = 0.5 : f32} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  return %a : tensor<2x8x4xf32>
}

// -----

// Negative: a split_heads that something besides attention reads, and an attention result that
// something besides merge_heads reads, keep the head-major layout.
// CHECK-LABEL: func.func @other_users
// CHECK: %[[Q:.*]] = transformer.split_heads %{{.*}} {num_heads = 2 : i64} : tensor<8x8xf32> -> tensor<2x8x4xf32>
// CHECK: %[[A:.*]] = transformer.causal_attention %[[Q]], %[[Q]], %[[Q]] {scale = 5.000000e-01 : f32}
// CHECK-SAME: -> tensor<2x8x4xf32>
// CHECK: transformer.merge_heads %[[A]] : tensor<2x8x4xf32> -> tensor<8x8xf32>
func.func @other_users(%x: tensor<8x8xf32>) -> (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<8x8xf32>) {
  %q = transformer.split_heads %x {num_heads = 2 : i64} : tensor<8x8xf32> -> tensor<2x8x4xf32>
  %a = transformer.causal_attention %q, %q, %q {scale = 0.5 : f32} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %m = transformer.merge_heads %a : tensor<2x8x4xf32> -> tensor<8x8xf32>
  return %q, %a, %m : tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<8x8xf32>
}

// -----

// Negative: merge_heads of something other than attention stays a head-major merge.
// CHECK-LABEL: func.func @merge_of_other
// CHECK: transformer.merge_heads %{{.*}} : tensor<2x8x4xf32> -> tensor<8x8xf32>
func.func @merge_of_other(%h: tensor<2x8x4xf32>) -> tensor<8x8xf32> {
  %n = transformer.neg %h : tensor<2x8x4xf32> -> tensor<2x8x4xf32>
  %m = transformer.merge_heads %n : tensor<2x8x4xf32> -> tensor<8x8xf32>
  return %m : tensor<8x8xf32>
}
