// --transformer-shape-inference: unranked results become ranked through ShapeInferenceOpInterface.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-shape-inference | FileCheck %s

// A chain matmul -> gelu -> transpose: each result is refined in turn, and the function result type too.
// CHECK-LABEL: func.func @matmul_gelu_transpose
// CHECK-SAME: -> tensor<16x4xf32>
// CHECK: transformer.matmul %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK: transformer.gelu %{{.*}} : tensor<4x16xf32> -> tensor<4x16xf32>
// CHECK: transformer.transpose %{{.*}} : tensor<4x16xf32> -> tensor<16x4xf32>
// CHECK: return %{{.*}} : tensor<16x4xf32>
func.func @matmul_gelu_transpose(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<*xf32> {
  %0 = transformer.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<*xf32>
  %1 = transformer.gelu %0 : tensor<*xf32> -> tensor<*xf32>
  %2 = transformer.transpose %1 : tensor<*xf32> -> tensor<*xf32>
  return %2 : tensor<*xf32>
}

// -----

// Every op: broadcasting add/mul, unary ops, batched matmul with a shared weight, layer_norm, softmax.
// CHECK-LABEL: func.func @every_op
// CHECK: transformer.add {{.*}} -> tensor<2x4x8xf32>
// CHECK: transformer.mul {{.*}} -> tensor<2x4x8xf32>
// CHECK: transformer.neg {{.*}} -> tensor<2x4x8xf32>
// CHECK: transformer.relu {{.*}} -> tensor<2x4x8xf32>
// CHECK: transformer.layer_norm {{.*}} -> tensor<2x4x8xf32>
// CHECK: transformer.matmul {{.*}} -> tensor<2x4x16xf32>
// CHECK: transformer.transpose {{.*}} -> tensor<2x16x4xf32>
// CHECK: transformer.matmul {{.*}} -> tensor<2x4x4xf32>
// CHECK: transformer.softmax {{.*}} -> tensor<2x4x4xf32>
// CHECK: transformer.constant {{.*}} : tensor<3xf32>
// CHECK: transformer.add {{.*}} -> tensor<2x1x3xf32>
func.func @every_op(%x: tensor<2x4x8xf32>, %bias: tensor<8xf32>, %w: tensor<8x16xf32>, %col: tensor<2x1x1xf32>)
    -> (tensor<*xf32>, tensor<*xf32>) {
  %0 = transformer.add %x, %bias : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<*xf32>
  %1 = transformer.mul %0, %x : (tensor<*xf32>, tensor<2x4x8xf32>) -> tensor<*xf32>
  %2 = transformer.neg %1 : tensor<*xf32> -> tensor<*xf32>
  %3 = transformer.relu %2 : tensor<*xf32> -> tensor<*xf32>
  %4 = transformer.layer_norm %3, %bias, %bias : (tensor<*xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<*xf32>
  %5 = transformer.matmul %4, %w : (tensor<*xf32>, tensor<8x16xf32>) -> tensor<*xf32>
  %6 = transformer.transpose %5 : tensor<*xf32> -> tensor<*xf32>
  %7 = transformer.matmul %5, %6 : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  %8 = transformer.softmax %7 : tensor<*xf32> -> tensor<*xf32>
  %c = transformer.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %9 = transformer.add %col, %c : (tensor<2x1x1xf32>, tensor<3xf32>) -> tensor<*xf32>
  return %8, %9 : tensor<*xf32>, tensor<*xf32>
}

// -----

// Ops the pass does not know are left alone, and so are their users that stay unranked.
// CHECK-LABEL: func.func @unknown_op
// CHECK: tensor.cast %{{.*}} : tensor<4xf32> to tensor<*xf32>
// CHECK: transformer.neg %{{.*}} : tensor<*xf32> -> tensor<*xf32>
// CHECK: transformer.relu %{{.*}} : tensor<4xf32> -> tensor<4xf32>
func.func @unknown_op(%x: tensor<4xf32>) -> (tensor<*xf32>, tensor<*xf32>) {
  %0 = tensor.cast %x : tensor<4xf32> to tensor<*xf32>
  %1 = transformer.neg %0 : tensor<*xf32> -> tensor<*xf32>
  %2 = transformer.relu %x : tensor<4xf32> -> tensor<*xf32>
  return %1, %2 : tensor<*xf32>, tensor<*xf32>
}

// -----

// Dynamic dims stay dynamic; the result is still ranked.
// CHECK-LABEL: func.func @dynamic
// CHECK: transformer.matmul {{.*}} -> tensor<?x16xf32>
func.func @dynamic(%a: tensor<?x8xf32>, %b: tensor<8x16xf32>) -> tensor<*xf32> {
  %0 = transformer.matmul %a, %b : (tensor<?x8xf32>, tensor<8x16xf32>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}

// -----

// A conflict that only shows once shapes are known: an error, not a crash.
func.func @conflict(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<5x16xf32>) -> tensor<*xf32> {
  %0 = transformer.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<*xf32>
  // expected-error @+1 {{operands are not broadcast-compatible: 'tensor<4x16xf32>' and 'tensor<5x16xf32>' (dimension 4 vs 5)}}
  %1 = transformer.add %0, %c : (tensor<*xf32>, tensor<5x16xf32>) -> tensor<*xf32>
  return %1 : tensor<*xf32>
}

// -----

// A ranked result that contradicts the inferred operand shapes is an error.
func.func @ranked_result_conflict(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x4xf32> {
  %0 = transformer.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<*xf32>
  // expected-error @+1 {{result type 'tensor<4x4xf32>' does not match the type 'tensor<4x16xf32>' implied by the operands}}
  %1 = transformer.relu %0 : tensor<*xf32> -> tensor<4x4xf32>
  return %1 : tensor<4x4xf32>
}

// -----

// The model-level ops: one attention head group, from token ids to merged heads.
// CHECK-LABEL: func.func @model_ops
// CHECK-SAME: -> tensor<8x64xf32>
// CHECK: transformer.embedding {{.*}} -> tensor<8x64xf32>
// CHECK: transformer.slice {{.*}} -> tensor<8x64xf32>
// CHECK: transformer.split_heads {{.*}} -> tensor<4x8x16xf32>
// CHECK: transformer.rope {{.*}} -> tensor<4x8x16xf32>
// CHECK: transformer.causal_attention {{.*}} -> tensor<4x8x16xf32>
// CHECK: transformer.merge_heads {{.*}} -> tensor<8x64xf32>
func.func @model_ops(%wte: tensor<256x64xf32>, %ids: tensor<8xi64>, %w: tensor<64x192xf32>) -> tensor<*xf32> {
  %x = transformer.embedding %wte, %ids : (tensor<256x64xf32>, tensor<8xi64>) -> tensor<*xf32>
  %qkv = transformer.matmul %x, %w : (tensor<*xf32>, tensor<64x192xf32>) -> tensor<*xf32>
  %q = transformer.slice %qkv {offset = 0 : i64, size = 64 : i64} : tensor<*xf32> -> tensor<*xf32>
  %h = transformer.split_heads %q {num_heads = 4 : i64} : tensor<*xf32> -> tensor<*xf32>
  %r = transformer.rope %h, %ids : (tensor<*xf32>, tensor<8xi64>) -> tensor<*xf32>
  %a = transformer.causal_attention %r, %r, %h {scale = 0.25 : f32} : (tensor<*xf32>, tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  %m = transformer.merge_heads %a : tensor<*xf32> -> tensor<*xf32>
  return %m : tensor<*xf32>
}

// -----

// Token-major heads: split_heads gives [T, H, d], attention reads it so and writes [T, H, d]
// where its flags say, merge_heads collapses it.
// CHECK-LABEL: func.func @token_major_heads
// CHECK-SAME: -> tensor<8x64xf32>
// CHECK: transformer.split_heads {{.*}} -> tensor<8x4x16xf32>
// CHECK: transformer.causal_attention {{.*}} -> tensor<8x4x16xf32>
// CHECK: transformer.merge_heads {{.*}} -> tensor<8x64xf32>
func.func @token_major_heads(%q: tensor<8x64xf32>, %kv: tensor<4x8x16xf32>) -> tensor<*xf32> {
  %h = transformer.split_heads %q {num_heads = 4 : i64, token_major} : tensor<8x64xf32> -> tensor<*xf32>
  %a = transformer.causal_attention %h, %kv, %kv {query_token_major, result_token_major, scale = 0.25 : f32} : (tensor<*xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  %m = transformer.merge_heads %a {token_major} : tensor<*xf32> -> tensor<*xf32>
  return %m : tensor<*xf32>
}

// -----

// A packed weight [N/P, K, P] = [3, 8, 32] gives N = 96 columns; leading dims of x are kept.
// CHECK-LABEL: func.func @packed_matmul
// CHECK: transformer.packed_matmul f32 %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<3x8x32xf32>) -> tensor<2x4x96xf32>
// CHECK: return %{{.*}} : tensor<2x4x96xf32>
func.func @packed_matmul(%x: tensor<2x4x8xf32>, %w: tensor<3x8x32xf32>) -> tensor<*xf32> {
  %0 = transformer.packed_matmul f32 %x, %w : (tensor<2x4x8xf32>, tensor<3x8x32xf32>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}

// -----

// A q4_0 weight: its codes have K/2 rows, the result still has N = 96 columns.
// CHECK-LABEL: func.func @packed_matmul_q4_0
// CHECK: transformer.packed_matmul q4_0 %{{.*}}, %{{.*}}, %{{.*}} : (tensor<8x64xf32>, tensor<3x8x32xi32>, tensor<3x2x32xf16>) -> tensor<8x96xf32>
func.func @packed_matmul_q4_0(%x: tensor<8x64xf32>, %w: tensor<3x8x32xi32>, %s: tensor<3x2x32xf16>) -> tensor<*xf32> {
  %0 = transformer.packed_matmul q4_0 %x, %w, %s : (tensor<8x64xf32>, tensor<3x8x32xi32>, tensor<3x2x32xf16>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}

// -----

// D = 32 x the scales' block count; one row of D per id.
// CHECK-LABEL: func.func @packed_embedding
// CHECK: transformer.packed_embedding q8_0 %{{.*}}, %{{.*}}, %{{.*}} : (tensor<8x16x32xi32>, tensor<8x2x32xf16>, tensor<5xi64>) -> tensor<5x64xf32>
func.func @packed_embedding(%c: tensor<8x16x32xi32>, %s: tensor<8x2x32xf16>, %ids: tensor<5xi64>) -> tensor<*xf32> {
  %0 = transformer.packed_embedding q8_0 %c, %s, %ids : (tensor<8x16x32xi32>, tensor<8x2x32xf16>, tensor<5xi64>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}

// -----

// The ops of imported graphs: where (three-way broadcast), exp, rsqrt, pow, permute, concat.
// CHECK-LABEL: func.func @imported_ops
// CHECK: transformer.where {{.*}} -> tensor<2x4x8xf32>
// CHECK: transformer.exp {{.*}} -> tensor<2x4x8xf32>
// CHECK: transformer.rsqrt {{.*}} -> tensor<2x4x8xf32>
// CHECK: transformer.pow {{.*}} -> tensor<2x4x8xf32>
// CHECK: transformer.permute {{.*}} -> tensor<8x2x4xf32>
// CHECK: transformer.concat {{.*}} -> tensor<8x4x4xf32>
func.func @imported_ops(%c: tensor<4x1xi1>, %x: tensor<2x4x8xf32>, %s: tensor<1xf32>) -> tensor<*xf32> {
  %0 = transformer.where %c, %x, %s : (tensor<4x1xi1>, tensor<2x4x8xf32>, tensor<1xf32>) -> tensor<*xf32>
  %1 = transformer.exp %0 : tensor<*xf32> -> tensor<*xf32>
  %2 = transformer.rsqrt %1 : tensor<*xf32> -> tensor<*xf32>
  %3 = transformer.pow %2, %s : (tensor<*xf32>, tensor<1xf32>) -> tensor<*xf32>
  %4 = transformer.permute %3 {permutation = array<i64: 2, 0, 1>} : tensor<*xf32> -> tensor<*xf32>
  %5 = transformer.concat %4, %4 {dim = 1 : i64} : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  return %5 : tensor<*xf32>
}

// -----

// silu keeps its operand's shape; mean reduces the last dimension to 1 (rank 1 too).
// CHECK-LABEL: func.func @silu_mean
// CHECK: transformer.silu {{.*}} -> tensor<2x4x8xf32>
// CHECK: transformer.mean {{.*}} -> tensor<2x4x1xf32>
// CHECK: transformer.mean {{.*}} -> tensor<1xf32>
func.func @silu_mean(%x: tensor<2x4x8xf32>, %v: tensor<8xf32>) -> (tensor<*xf32>, tensor<*xf32>) {
  %0 = transformer.silu %x : tensor<2x4x8xf32> -> tensor<*xf32>
  %1 = transformer.mean %0 : tensor<*xf32> -> tensor<*xf32>
  %2 = transformer.mean %v : tensor<8xf32> -> tensor<*xf32>
  return %1, %2 : tensor<*xf32>, tensor<*xf32>
}

// -----

// A Llama block's pieces: RMSNorm, the fused gate/up projection's SwiGLU, and grouped-query
// attention (4 query heads over 2 key/value heads): the result has the query's heads.
// CHECK-LABEL: func.func @llama_ops
// CHECK: transformer.rms_norm {{.*}} -> tensor<8x64xf32>
// CHECK: transformer.swiglu {{.*}} -> tensor<8x96xf32>
// CHECK: transformer.split_heads {{.*}} -> tensor<2x8x16xf32>
// CHECK: transformer.rope {{.*}} -> tensor<2x8x16xf32>
// CHECK: transformer.causal_attention {{.*}} -> tensor<4x8x16xf32>
func.func @llama_ops(%x: tensor<8x64xf32>, %w: tensor<64xf32>, %up: tensor<64x192xf32>, %q: tensor<4x8x16xf32>,
                     %kv: tensor<8x32xf32>, %pos: tensor<8xi64>) -> (tensor<*xf32>, tensor<*xf32>) {
  %n = transformer.rms_norm %x, %w : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<*xf32>
  %h = transformer.matmul %n, %up : (tensor<*xf32>, tensor<64x192xf32>) -> tensor<*xf32>
  %g = transformer.slice %h {offset = 0 : i64, size = 96 : i64} : tensor<*xf32> -> tensor<*xf32>
  %u = transformer.slice %h {offset = 96 : i64, size = 96 : i64} : tensor<*xf32> -> tensor<*xf32>
  %s = transformer.swiglu %g, %u : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  %k = transformer.split_heads %kv {num_heads = 2 : i64} : tensor<8x32xf32> -> tensor<*xf32>
  %r = transformer.rope %k, %pos {interleaved} : (tensor<*xf32>, tensor<8xi64>) -> tensor<*xf32>
  %a = transformer.causal_attention %q, %r, %k {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  return %s, %a : tensor<*xf32>, tensor<*xf32>
}
