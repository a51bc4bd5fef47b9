// Round trip of every transformer op through the custom assembly format, and through the generic form.
// RUN: gpt-opt %s | gpt-opt | FileCheck %s
// RUN: gpt-opt %s --mlir-print-op-generic | gpt-opt | FileCheck %s

// CHECK-LABEL: func.func @constant
func.func @constant() -> tensor<2x2xf32> {
  // CHECK: transformer.constant dense<{{\[\[}}1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>
  %0 = transformer.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// CHECK-LABEL: func.func @elementwise
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>)
func.func @elementwise(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // CHECK: %[[ADD:.*]] = transformer.add %[[X]], %[[B]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %0 = transformer.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: %[[MUL:.*]] = transformer.mul %[[ADD]], %[[ADD]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = transformer.mul %0, %0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: %[[NEG:.*]] = transformer.neg %[[MUL]] : tensor<4x8xf32> -> tensor<4x8xf32>
  %2 = transformer.neg %1 : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK: %[[RELU:.*]] = transformer.relu %[[NEG]] : tensor<4x8xf32> -> tensor<4x8xf32>
  %3 = transformer.relu %2 : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK: %[[GELU:.*]] = transformer.gelu %[[RELU]] : tensor<4x8xf32> -> tensor<4x8xf32>
  %4 = transformer.gelu %3 : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK: %[[SM:.*]] = transformer.softmax %[[GELU]] : tensor<4x8xf32> -> tensor<4x8xf32>
  %5 = transformer.softmax %4 : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK: return %[[SM]]
  return %5 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @shapes
func.func @shapes(%x: tensor<2x4x8xf32>, %w: tensor<8x16xf32>, %y: tensor<2x8x3xf32>) -> (tensor<2x8x4xf32>, tensor<2x4x16xf32>, tensor<2x4x3xf32>) {
  // CHECK: transformer.transpose %{{.*}} : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  %0 = transformer.transpose %x : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  // CHECK: transformer.matmul %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %1 = transformer.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: transformer.matmul %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<2x8x3xf32>) -> tensor<2x4x3xf32>
  %2 = transformer.matmul %x, %y : (tensor<2x4x8xf32>, tensor<2x8x3xf32>) -> tensor<2x4x3xf32>
  return %0, %1, %2 : tensor<2x8x4xf32>, tensor<2x4x16xf32>, tensor<2x4x3xf32>
}

// A weight packed in column panels: [N/P, K, P] = [2, 8, 32] stands for an 8x64 weight.
// CHECK-LABEL: func.func @packed_matmul
func.func @packed_matmul(%x: tensor<2x4x8xf32>, %w: tensor<2x8x32xf32>) -> tensor<2x4x64xf32> {
  // CHECK: transformer.packed_matmul f32 %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<2x8x32xf32>) -> tensor<2x4x64xf32>
  %0 = transformer.packed_matmul f32 %x, %w : (tensor<2x4x8xf32>, tensor<2x8x32xf32>) -> tensor<2x4x64xf32>
  return %0 : tensor<2x4x64xf32>
}

// The same with the weight stored in bf16 lanes: [N/P, K/2, P] i32, two weights per lane.
// CHECK-LABEL: func.func @packed_matmul_bf16
func.func @packed_matmul_bf16(%x: tensor<4x8xf32>, %w: tensor<2x4x32xi32>) -> tensor<4x64xf32> {
  // CHECK: transformer.packed_matmul bf16 %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<2x4x32xi32>) -> tensor<4x64xf32>
  %0 = transformer.packed_matmul bf16 %x, %w : (tensor<4x8xf32>, tensor<2x4x32xi32>) -> tensor<4x64xf32>
  return %0 : tensor<4x64xf32>
}

// q8_0 (4 int8 codes per lane, [N/P, K/4, P] i32) and q4_0 (8 4-bit codes per lane,
// [N/P, K/8, P] i32), each with its f16 scales [N/P, K/32, P].
// CHECK-LABEL: func.func @packed_matmul_block_quantized
func.func @packed_matmul_block_quantized(%x: tensor<4x64xf32>, %q8: tensor<2x16x32xi32>, %q4: tensor<2x8x32xi32>,
                                         %d: tensor<2x2x32xf16>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  // CHECK: transformer.packed_matmul q8_0 %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x64xf32>, tensor<2x16x32xi32>, tensor<2x2x32xf16>) -> tensor<4x64xf32>
  %0 = transformer.packed_matmul q8_0 %x, %q8, %d : (tensor<4x64xf32>, tensor<2x16x32xi32>, tensor<2x2x32xf16>) -> tensor<4x64xf32>
  // CHECK: transformer.packed_matmul q4_0 %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x64xf32>, tensor<2x8x32xi32>, tensor<2x2x32xf16>) -> tensor<4x64xf32>
  %1 = transformer.packed_matmul q4_0 %x, %q4, %d : (tensor<4x64xf32>, tensor<2x8x32xi32>, tensor<2x2x32xf16>) -> tensor<4x64xf32>
  return %0, %1 : tensor<4x64xf32>, tensor<4x64xf32>
}

// The multiply-adds of one 32-bit lane, on scalars or vectors.
// CHECK-LABEL: func.func @lane_dots
func.func @lane_dots(%f: f32, %i: i32, %a: i32, %b: i32, %vf: vector<16xf32>, %vi: vector<16xi32>, %va: vector<16xi32>)
    -> (f32, i32, vector<16xf32>, vector<16xi32>) {
  // CHECK: transformer.lane_dot_bf16 %{{.*}}, %{{.*}}, %{{.*}} : i32 -> f32
  %0 = transformer.lane_dot_bf16 %f, %a, %b : i32 -> f32
  // CHECK: transformer.lane_dot_u8i8 %{{.*}}, %{{.*}}, %{{.*}} : i32 -> i32
  %1 = transformer.lane_dot_u8i8 %i, %a, %b : i32 -> i32
  // CHECK: transformer.lane_dot_bf16 %{{.*}}, %{{.*}}, %{{.*}} : vector<16xi32> -> vector<16xf32>
  %2 = transformer.lane_dot_bf16 %vf, %va, %va : vector<16xi32> -> vector<16xf32>
  // CHECK: transformer.lane_dot_u8i8 %{{.*}}, %{{.*}}, %{{.*}} : vector<16xi32> -> vector<16xi32>
  %3 = transformer.lane_dot_u8i8 %vi, %va, %va : vector<16xi32> -> vector<16xi32>
  return %0, %1, %2, %3 : f32, i32, vector<16xf32>, vector<16xi32>
}

// A tied embedding stored as a q8_0 LM head: codes [V'/P, D/4, P] i32 and scales [V'/P, D/32, P].
// CHECK-LABEL: func.func @packed_embedding
func.func @packed_embedding(%c: tensor<8x16x32xi32>, %s: tensor<8x2x32xf16>, %ids: tensor<5xi64>) -> tensor<5x64xf32> {
  // CHECK: transformer.packed_embedding q8_0 %{{.*}}, %{{.*}}, %{{.*}} : (tensor<8x16x32xi32>, tensor<8x2x32xf16>, tensor<5xi64>) -> tensor<5x64xf32>
  %0 = transformer.packed_embedding q8_0 %c, %s, %ids : (tensor<8x16x32xi32>, tensor<8x2x32xf16>, tensor<5xi64>) -> tensor<5x64xf32>
  return %0 : tensor<5x64xf32>
}

// A q6_k table (a GGUF file's Q6_K, kept): D = 256 from 48 lane rows (6-bit codes), scales 8 rows
// of run scales and d.
// CHECK-LABEL: func.func @packed_embedding_q6_k
func.func @packed_embedding_q6_k(%c: tensor<8x48x32xi32>, %s: tensor<8x9x32xf16>, %ids: tensor<5xi64>) -> tensor<5x256xf32> {
  // CHECK: transformer.packed_embedding q6_k %{{.*}}, %{{.*}}, %{{.*}} : (tensor<8x48x32xi32>, tensor<8x9x32xf16>, tensor<5xi64>) -> tensor<5x256xf32>
  %0 = transformer.packed_embedding q6_k %c, %s, %ids : (tensor<8x48x32xi32>, tensor<8x9x32xf16>, tensor<5xi64>) -> tensor<5x256xf32>
  return %0 : tensor<5x256xf32>
}

// CHECK-LABEL: func.func @llama_ops
func.func @llama_ops(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %g: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  // The default epsilon is elided.
  // CHECK: transformer.rms_norm %{{[^ ]*}}, %{{[^ ]*}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %0 = transformer.rms_norm %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: transformer.rms_norm %{{[^ ]*}}, %{{[^ ]*}} {epsilon = 9.99999997E-7 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = transformer.rms_norm %x, %w {epsilon = 1.0e-6 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: transformer.swiglu %{{[^ ]*}}, %{{[^ ]*}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = transformer.swiglu %g, %0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0, %1, %2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @rope_and_gqa
func.func @rope_and_gqa(%q: tensor<4x8x16xf32>, %k: tensor<2x8x16xf32>, %pos: tensor<8xi64>, %kc: tensor<2x64x16xf32>, %off: index)
    -> (tensor<4x8x16xf32>, tensor<4x8x16xf32>) {
  // CHECK: transformer.rope %{{.*}}, %{{.*}} {base = 5.000000e+05 : f32, interleaved, scaling = array<f32: 3.200000e+01, 1.000000e+00, 4.000000e+00, 8.192000e+03>} : (tensor<2x8x16xf32>, tensor<8xi64>) -> tensor<2x8x16xf32>
  %r = transformer.rope %k, %pos {base = 500000.0 : f32, interleaved, scaling = array<f32: 32.0, 1.0, 4.0, 8192.0>} : (tensor<2x8x16xf32>, tensor<8xi64>) -> tensor<2x8x16xf32>
  // Grouped-query attention: 4 query heads over 2 key/value heads.
  // CHECK: transformer.causal_attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f32} : (tensor<4x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<4x8x16xf32>
  %a = transformer.causal_attention %q, %r, %k {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<4x8x16xf32>
  // CHECK: transformer.causal_attention %{{.*}}, %{{.*}}, %{{.*}} offset %{{.*}} {scale = 2.500000e-01 : f32} : (tensor<4x8x16xf32>, tensor<2x64x16xf32>, tensor<2x64x16xf32>, index) -> tensor<4x8x16xf32>
  %d = transformer.causal_attention %q, %kc, %kc offset %off {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<2x64x16xf32>, tensor<2x64x16xf32>, index) -> tensor<4x8x16xf32>
  return %a, %d : tensor<4x8x16xf32>, tensor<4x8x16xf32>
}

// CHECK-LABEL: func.func @layer_norm
func.func @layer_norm(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  // The default epsilon (1e-5) is elided.
  // CHECK: transformer.layer_norm %[[X:[^ ]*]], %{{[^ ]*}}, %{{[^ ]*}} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %0 = transformer.layer_norm %x, %w, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: transformer.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 1.000000e-03 : f32}
  %1 = transformer.layer_norm %x, %w, %b {epsilon = 1.0e-3 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// Unranked and dynamic types are accepted everywhere.
// CHECK-LABEL: func.func @unranked
func.func @unranked(%x: tensor<*xf32>, %y: tensor<?x8xf32>) -> tensor<*xf32> {
  // CHECK: transformer.add %{{.*}}, %{{.*}} : (tensor<*xf32>, tensor<?x8xf32>) -> tensor<*xf32>
  %0 = transformer.add %x, %y : (tensor<*xf32>, tensor<?x8xf32>) -> tensor<*xf32>
  // CHECK: transformer.matmul %{{.*}}, %{{.*}} : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  %1 = transformer.matmul %0, %0 : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  return %1 : tensor<*xf32>
}

// CHECK-LABEL: func.func @model_ops
func.func @model_ops(%wte: tensor<256x64xf32>, %ids: tensor<8xi64>, %qkv: tensor<8x192xf32>, %pos: index)
    -> (tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>) {
  // CHECK: transformer.embedding %{{.*}}, %{{.*}} : (tensor<256x64xf32>, tensor<8xi64>) -> tensor<8x64xf32>
  %x = transformer.embedding %wte, %ids : (tensor<256x64xf32>, tensor<8xi64>) -> tensor<8x64xf32>
  // CHECK: transformer.slice %{{.*}} {offset = 64 : i64, size = 64 : i64} : tensor<8x192xf32> -> tensor<8x64xf32>
  %k = transformer.slice %qkv {offset = 64 : i64, size = 64 : i64} : tensor<8x192xf32> -> tensor<8x64xf32>
  // CHECK: transformer.split_heads %{{.*}} {num_heads = 4 : i64} : tensor<8x64xf32> -> tensor<4x8x16xf32>
  %h = transformer.split_heads %k {num_heads = 4 : i64} : tensor<8x64xf32> -> tensor<4x8x16xf32>
  // CHECK: transformer.rope %{{.*}}, %{{.*}} : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<4x8x16xf32>
  %r = transformer.rope %h, %ids : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<4x8x16xf32>
  // CHECK: transformer.rope %{{.*}}, %{{.*}} {base = 5.000000e+05 : f32}
  %r2 = transformer.rope %h, %ids {base = 500000.0 : f32} : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<4x8x16xf32>
  // CHECK: transformer.causal_attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %a = transformer.causal_attention %r, %r2, %h {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  // CHECK: transformer.causal_attention %{{.*}}, %{{.*}}, %{{.*}} offset %{{.*}} {scale = 2.500000e-01 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, index) -> tensor<4x8x16xf32>
  %d = transformer.causal_attention %r, %r2, %h offset %pos {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, index) -> tensor<4x8x16xf32>
  // A sliding window of 3 keys per query.
  // CHECK: transformer.causal_attention %{{.*}}, %{{.*}}, %{{.*}} offset %{{.*}} {scale = 2.500000e-01 : f32, window = 3 : i64} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, index) -> tensor<4x8x16xf32>
  %w = transformer.causal_attention %r, %r2, %h offset %pos {scale = 0.25 : f32, window = 3 : i64} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, index) -> tensor<4x8x16xf32>
  // CHECK: transformer.merge_heads %{{.*}} : tensor<4x8x16xf32> -> tensor<8x64xf32>
  %m = transformer.merge_heads %a : tensor<4x8x16xf32> -> tensor<8x64xf32>
  %m2 = transformer.merge_heads %d : tensor<4x8x16xf32> -> tensor<8x64xf32>
  %m3 = transformer.merge_heads %w : tensor<4x8x16xf32> -> tensor<8x64xf32>
  return %x, %m, %m2, %m3 : tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>
}

// Token-major heads ([T, H, d]) around attention, as --transformer-attention-layout leaves them.
// CHECK-LABEL: func.func @token_major_heads
func.func @token_major_heads(%x: tensor<8x64xf32>, %kc: tensor<4x64x16xf32>, %pos: index) -> (tensor<8x64xf32>, tensor<8x64xf32>) {
  // CHECK: transformer.split_heads %{{.*}} {num_heads = 4 : i64, token_major} : tensor<8x64xf32> -> tensor<8x4x16xf32>
  %h = transformer.split_heads %x {num_heads = 4 : i64, token_major} : tensor<8x64xf32> -> tensor<8x4x16xf32>
  // CHECK: transformer.causal_attention %{{.*}}, %{{.*}}, %{{.*}} {key_token_major, query_token_major, result_token_major, scale = 2.500000e-01 : f32, value_token_major} : (tensor<8x4x16xf32>, tensor<8x4x16xf32>, tensor<8x4x16xf32>) -> tensor<8x4x16xf32>
  %a = transformer.causal_attention %h, %h, %h {query_token_major, key_token_major, value_token_major, result_token_major, scale = 0.25 : f32} : (tensor<8x4x16xf32>, tensor<8x4x16xf32>, tensor<8x4x16xf32>) -> tensor<8x4x16xf32>
  // A token-major query against a head-major cache, with a head-major result.
  // CHECK: transformer.causal_attention %{{.*}}, %{{.*}}, %{{.*}} offset %{{.*}} {query_token_major, scale = 2.500000e-01 : f32} : (tensor<8x4x16xf32>, tensor<4x64x16xf32>, tensor<4x64x16xf32>, index) -> tensor<4x8x16xf32>
  %d = transformer.causal_attention %h, %kc, %kc offset %pos {query_token_major, scale = 0.25 : f32} : (tensor<8x4x16xf32>, tensor<4x64x16xf32>, tensor<4x64x16xf32>, index) -> tensor<4x8x16xf32>
  // CHECK: transformer.merge_heads %{{.*}} {token_major} : tensor<8x4x16xf32> -> tensor<8x64xf32>
  %m = transformer.merge_heads %a {token_major} : tensor<8x4x16xf32> -> tensor<8x64xf32>
  // CHECK: transformer.merge_heads %{{.*}} : tensor<4x8x16xf32> -> tensor<8x64xf32>
  %m2 = transformer.merge_heads %d : tensor<4x8x16xf32> -> tensor<8x64xf32>
  return %m, %m2 : tensor<8x64xf32>, tensor<8x64xf32>
}

// An attention mask as data: an i1 [Tq, Tk] operand, and the tile classification recorded on the op.
// CHECK-LABEL: func.func @masked_attention
func.func @masked_attention(%q: tensor<2x64x4xf32>, %mask: tensor<64x64xi1>) -> tensor<2x64x4xf32> {
  // CHECK: transformer.causal_attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} {scale = 5.000000e-01 : f32, tile_classes = ["PE", "FP"], tile_sizes = array<i64: 32, 32>} : (tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<64x64xi1>) -> tensor<2x64x4xf32>
  %a = transformer.causal_attention %q, %q, %q mask %mask {scale = 0.5 : f32, tile_classes = ["PE", "FP"], tile_sizes = array<i64: 32, 32>} : (tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<64x64xi1>) -> tensor<2x64x4xf32>
  return %a : tensor<2x64x4xf32>
}

// An attention mask as an expression of positions: the `visible` region (prefix-LM, prefix 4),
// with a runtime offset (a prefill chunk).
// CHECK-LABEL: func.func @mask_expression
func.func @mask_expression(%q: tensor<2x8x4xf32>, %k: tensor<2x64x4xf32>, %pos: index) -> tensor<2x8x4xf32> {
  // CHECK: transformer.causal_attention %{{.*}}, %{{.*}}, %{{.*}} offset %{{.*}} visible {
  // CHECK-NEXT: ^bb0(%[[I:.*]]: index, %[[J:.*]]: index):
  // CHECK-NEXT: %[[C4:.*]] = arith.constant 4 : index
  // CHECK-NEXT: %[[PREFIX:.*]] = arith.cmpi ult, %[[J]], %[[C4]] : index
  // CHECK-NEXT: %[[CAUSAL:.*]] = arith.cmpi ule, %[[J]], %[[I]] : index
  // CHECK-NEXT: %[[SEEN:.*]] = arith.ori %[[PREFIX]], %[[CAUSAL]] : i1
  // CHECK-NEXT: transformer.yield %[[SEEN]] : i1
  // CHECK-NEXT: } {scale = 5.000000e-01 : f32} : (tensor<2x8x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>, index) -> tensor<2x8x4xf32>
  %a = transformer.causal_attention %q, %k, %k offset %pos visible {
  ^bb0(%i: index, %j: index):
    %c4 = arith.constant 4 : index
    %prefix = arith.cmpi ult, %j, %c4 : index
    %causal = arith.cmpi ule, %j, %i : index
    %seen = arith.ori %prefix, %causal : i1
    transformer.yield %seen : i1
  } {scale = 0.5 : f32} : (tensor<2x8x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>, index) -> tensor<2x8x4xf32>
  return %a : tensor<2x8x4xf32>
}

// CHECK-LABEL: func.func @paged_pool
func.func @paged_pool(%q: tensor<4x3x16xf32>, %kp: tensor<32x4x8x16xf32>, %vp: tensor<32x4x8x16xf32>, %slots: tensor<3xi64>, %tables: tensor<2x8xi64>, %seqs: tensor<3xi64>, %pos: tensor<3xi64>) -> tensor<4x3x16xf32> {
  // CHECK: transformer.paged_cache_write %{{.*}} into %{{.*}}[%{{.*}}] : tensor<4x3x16xf32>, tensor<32x4x8x16xf32>, tensor<3xi64> -> tensor<32x4x8x16xf32>
  %kp2 = transformer.paged_cache_write %q into %kp[%slots] : tensor<4x3x16xf32>, tensor<32x4x8x16xf32>, tensor<3xi64> -> tensor<32x4x8x16xf32>
  // CHECK: transformer.paged_attention %{{.*}}, %{{.*}}, %{{.*}} tables %{{.*}} sequences %{{.*}} positions %{{.*}} {scale = 2.500000e-01 : f32} : tensor<4x3x16xf32>, tensor<32x4x8x16xf32>, tensor<32x4x8x16xf32>, tensor<2x8xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<4x3x16xf32>
  %a = transformer.paged_attention %q, %kp2, %vp tables %tables sequences %seqs positions %pos {scale = 0.25 : f32} : tensor<4x3x16xf32>, tensor<32x4x8x16xf32>, tensor<32x4x8x16xf32>, tensor<2x8xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<4x3x16xf32>
  // CHECK: transformer.paged_attention {{.*}} {scale = 2.500000e-01 : f32, window = 6 : i64}
  %w = transformer.paged_attention %q, %kp2, %vp tables %tables sequences %seqs positions %pos {scale = 0.25 : f32, window = 6 : i64} : tensor<4x3x16xf32>, tensor<32x4x8x16xf32>, tensor<32x4x8x16xf32>, tensor<2x8xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<4x3x16xf32>
  return %a : tensor<4x3x16xf32>
}

// CHECK-LABEL: func.func @gelu_erf
// CHECK: transformer.gelu_erf %{{.*}} : tensor<4x8xf32> -> tensor<4x8xf32>
func.func @gelu_erf(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = transformer.gelu_erf %x : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @tanh
// CHECK: transformer.tanh %{{.*}} : tensor<4x8xf32> -> tensor<4x8xf32>
func.func @tanh(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = transformer.tanh %x : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @where
// CHECK: transformer.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<8x8xi1>, tensor<4x8x8xf32>, tensor<1xf32>) -> tensor<4x8x8xf32>
func.func @where(%c: tensor<8x8xi1>, %x: tensor<4x8x8xf32>, %fill: tensor<1xf32>) -> tensor<4x8x8xf32> {
  %0 = transformer.where %c, %x, %fill : (tensor<8x8xi1>, tensor<4x8x8xf32>, tensor<1xf32>) -> tensor<4x8x8xf32>
  return %0 : tensor<4x8x8xf32>
}

// CHECK-LABEL: func.func @imported_unary
// CHECK: transformer.exp %{{.*}} : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK: transformer.rsqrt %{{.*}} : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK: transformer.pow %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
func.func @imported_unary(%x: tensor<4x8xf32>, %e: tensor<1xf32>) -> tensor<4x8xf32> {
  %0 = transformer.exp %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = transformer.rsqrt %0 : tensor<4x8xf32> -> tensor<4x8xf32>
  %2 = transformer.pow %1, %e : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @silu_and_mean
// CHECK: transformer.silu %{{.*}} : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK: transformer.mean %{{.*}} : tensor<4x8xf32> -> tensor<4x1xf32>
func.func @silu_and_mean(%x: tensor<4x8xf32>) -> tensor<4x1xf32> {
  %0 = transformer.silu %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = transformer.mean %0 : tensor<4x8xf32> -> tensor<4x1xf32>
  return %1 : tensor<4x1xf32>
}

// CHECK-LABEL: func.func @imported_shape_ops
// CHECK: transformer.permute %{{.*}} {permutation = array<i64: 1, 2, 0>} : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
// CHECK: transformer.reshape %{{.*}} : tensor<3x4x2xf32> -> tensor<12x2xf32>
// CHECK: transformer.broadcast %{{.*}} : tensor<1x2xf32> -> tensor<12x2xf32>
// CHECK: transformer.concat %{{.*}}, %{{.*}} {dim = 1 : i64} : (tensor<12x2xf32>, tensor<12x2xf32>) -> tensor<12x4xf32>
func.func @imported_shape_ops(%x: tensor<2x3x4xf32>, %b: tensor<1x2xf32>) -> tensor<12x4xf32> {
  %0 = transformer.permute %x {permutation = array<i64: 1, 2, 0>} : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %1 = transformer.reshape %0 : tensor<3x4x2xf32> -> tensor<12x2xf32>
  %2 = transformer.broadcast %b : tensor<1x2xf32> -> tensor<12x2xf32>
  %3 = transformer.concat %1, %2 {dim = 1 : i64} : (tensor<12x2xf32>, tensor<12x2xf32>) -> tensor<12x4xf32>
  return %3 : tensor<12x4xf32>
}
