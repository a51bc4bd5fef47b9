// Every verifier error of the transformer dialect.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics

func.func @matmul_contraction_mismatch(%a: tensor<4x8xf32>, %b: tensor<9x16xf32>) {
  // expected-error @+1 {{contraction dimensions do not match: lhs 'tensor<4x8xf32>' has 8 columns but rhs 'tensor<9x16xf32>' has 9 rows}}
  %0 = transformer.matmul %a, %b : (tensor<4x8xf32>, tensor<9x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @matmul_rank_too_small(%a: tensor<8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{lhs must have rank >= 2, got 'tensor<8xf32>'}}
  %0 = transformer.matmul %a, %b : (tensor<8xf32>, tensor<8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @matmul_batch_mismatch(%a: tensor<2x4x8xf32>, %b: tensor<3x8x16xf32>) {
  // expected-error @+1 {{batch dimensions do not match: lhs 'tensor<2x4x8xf32>', rhs 'tensor<3x8x16xf32>'}}
  %0 = transformer.matmul %a, %b : (tensor<2x4x8xf32>, tensor<3x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @matmul_wrong_result(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{result type 'tensor<4x8xf32>' does not match the type 'tensor<4x16xf32>' implied by the operands}}
  %0 = transformer.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @add_not_broadcastable(%a: tensor<4x8xf32>, %b: tensor<7xf32>) {
  // expected-error @+1 {{operands are not broadcast-compatible: 'tensor<4x8xf32>' and 'tensor<7xf32>' (dimension 8 vs 7)}}
  %0 = transformer.add %a, %b : (tensor<4x8xf32>, tensor<7xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @mul_wrong_result(%a: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{result type 'tensor<8xf32>' does not match the type 'tensor<4x8xf32>' implied by the operands}}
  %0 = transformer.mul %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @unary_wrong_result(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{result type 'tensor<8x4xf32>' does not match the type 'tensor<4x8xf32>' implied by the operands}}
  %0 = transformer.gelu %a : tensor<4x8xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @transpose_rank_one(%a: tensor<8xf32>) {
  // expected-error @+1 {{input must have rank >= 2, got 'tensor<8xf32>'}}
  %0 = transformer.transpose %a : tensor<8xf32> -> tensor<*xf32>
  return
}

// -----

func.func @transpose_wrong_result(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{result type 'tensor<4x8xf32>' does not match the type 'tensor<8x4xf32>' implied by the operands}}
  %0 = transformer.transpose %a : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @softmax_scalar(%a: tensor<f32>) {
  // expected-error @+1 {{input must have rank >= 1, got 'tensor<f32>'}}
  %0 = transformer.softmax %a : tensor<f32> -> tensor<f32>
  return
}

// -----

func.func @layer_norm_weight_size(%x: tensor<4x8xf32>, %w: tensor<7xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{weight 'tensor<7xf32>' must be a rank-1 tensor of size 8, the last dimension of input 'tensor<4x8xf32>'}}
  %0 = transformer.layer_norm %x, %w, %b : (tensor<4x8xf32>, tensor<7xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_bias_rank(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<1x8xf32>) {
  // expected-error @+1 {{bias 'tensor<1x8xf32>' must be a rank-1 tensor of size 8}}
  %0 = transformer.layer_norm %x, %w, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_epsilon(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be a positive finite number}}
  %0 = transformer.layer_norm %x, %w, %b {epsilon = 0.0 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_weight_size(%x: tensor<4x8xf32>, %w: tensor<7xf32>) {
  // expected-error @+1 {{weight 'tensor<7xf32>' must be a rank-1 tensor of size 8, the last dimension of input 'tensor<4x8xf32>'}}
  %0 = transformer.rms_norm %x, %w : (tensor<4x8xf32>, tensor<7xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_epsilon(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be a positive finite number, got 0.000000e+00 : f32}}
  %0 = transformer.rms_norm %x, %w {epsilon = 0.0 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_result(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{result type 'tensor<8x4xf32>' does not match the type 'tensor<4x8xf32>' implied by the operands}}
  %0 = transformer.rms_norm %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @swiglu_shapes(%g: tensor<4x8xf32>, %u: tensor<4x1xf32>) {
  // expected-error @+1 {{operands must have the same shape, got 'tensor<4x8xf32>' and 'tensor<4x1xf32>'}}
  %0 = transformer.swiglu %g, %u : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @constant_not_f32() {
  // expected-error @+1 {{attribute 'value' failed to satisfy constraint: 32-bit float elements attribute}}
  %0 = "transformer.constant"() {value = dense<1> : tensor<2xi32>} : () -> tensor<2xf32>
  return
}

// -----

func.func @operand_not_f32(%a: tensor<4xi32>) {
  // expected-error @+1 {{operand #0 must be tensor of 32-bit float values}}
  %0 = "transformer.neg"(%a) : (tensor<4xi32>) -> tensor<4xf32>
  return
}

// -----

func.func @constant_wrong_result_type() {
  // expected-error @+2 {{'transformer.constant' op inferred type(s) 'tensor<2xf32>' are incompatible with return type(s) of operation 'tensor<3xf32>'}}
  // expected-error @+1 {{'transformer.constant' op failed to infer returned types}}
  %0 = "transformer.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<3xf32>
  return
}

// -----

func.func @embedding_table_rank(%t: tensor<256xf32>, %ids: tensor<8xi64>) {
  // expected-error @+1 {{table must be a rank-2 [vocab, features] tensor, got 'tensor<256xf32>'}}
  %0 = transformer.embedding %t, %ids : (tensor<256xf32>, tensor<8xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @embedding_ids_rank(%t: tensor<256x64xf32>, %ids: tensor<2x8xi64>) {
  // expected-error @+1 {{ids must be a rank-1 tensor, got 'tensor<2x8xi64>'}}
  %0 = transformer.embedding %t, %ids : (tensor<256x64xf32>, tensor<2x8xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @slice_out_of_bounds(%x: tensor<8x192xf32>) {
  // expected-error @+1 {{slice [160, 224) does not fit in the last dimension (192) of 'tensor<8x192xf32>'}}
  %0 = transformer.slice %x {offset = 160 : i64, size = 64 : i64} : tensor<8x192xf32> -> tensor<*xf32>
  return
}

// -----

func.func @slice_negative(%x: tensor<8x192xf32>) {
  // expected-error @+1 {{needs offset >= 0 and size > 0, got offset -1 and size 64}}
  %0 = transformer.slice %x {offset = -1 : i64, size = 64 : i64} : tensor<8x192xf32> -> tensor<*xf32>
  return
}

// -----

func.func @split_heads_indivisible(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{features (64) of 'tensor<8x64xf32>' do not divide into 3 heads}}
  %0 = transformer.split_heads %x {num_heads = 3 : i64} : tensor<8x64xf32> -> tensor<*xf32>
  return
}

// -----

func.func @split_heads_zero(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{num_heads must be positive, got 0}}
  %0 = transformer.split_heads %x {num_heads = 0 : i64} : tensor<8x64xf32> -> tensor<*xf32>
  return
}

// -----

func.func @merge_heads_rank(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{input must be a rank-3 [heads, tokens, head_dim] tensor, got 'tensor<8x64xf32>'}}
  %0 = transformer.merge_heads %x : tensor<8x64xf32> -> tensor<*xf32>
  return
}

// -----

func.func @merge_heads_token_major_rank(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{input must be a rank-3 [tokens, heads, head_dim] tensor, got 'tensor<8x64xf32>'}}
  %0 = transformer.merge_heads %x {token_major} : tensor<8x64xf32> -> tensor<*xf32>
  return
}

// -----

func.func @split_heads_token_major_result(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{result type 'tensor<4x8x16xf32>' does not match the type 'tensor<8x4x16xf32>' implied by the operands}}
  %0 = transformer.split_heads %x {num_heads = 4 : i64, token_major} : tensor<8x64xf32> -> tensor<4x8x16xf32>
  return
}

// -----

func.func @merge_heads_token_major_result(%x: tensor<8x4x16xf32>) {
  // expected-error @+1 {{result type 'tensor<4x128xf32>' does not match the type 'tensor<8x64xf32>' implied by the operands}}
  %0 = transformer.merge_heads %x {token_major} : tensor<8x4x16xf32> -> tensor<4x128xf32>
  return
}

// -----

func.func @rope_odd_head_dim(%x: tensor<4x8x15xf32>, %pos: tensor<8xi64>) {
  // expected-error @+1 {{head_dim must be even to rotate halves, got 'tensor<4x8x15xf32>'}}
  %0 = transformer.rope %x, %pos : (tensor<4x8x15xf32>, tensor<8xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @rope_positions_length(%x: tensor<4x8x16xf32>, %pos: tensor<7xi64>) {
  // expected-error @+1 {{positions 'tensor<7xi64>' must have one entry per token of 'tensor<4x8x16xf32>'}}
  %0 = transformer.rope %x, %pos : (tensor<4x8x16xf32>, tensor<7xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @rope_base(%x: tensor<4x8x16xf32>, %pos: tensor<8xi64>) {
  // expected-error @+1 {{base must be a finite number > 1}}
  %0 = transformer.rope %x, %pos {base = 1.0 : f32} : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @rope_scaling_count(%x: tensor<4x8x16xf32>, %pos: tensor<8xi64>) {
  // expected-error @+1 {{scaling must be [factor, low_freq_factor, high_freq_factor, original_max_positions], got 3 values}}
  %0 = transformer.rope %x, %pos {scaling = array<f32: 8.0, 1.0, 4.0>} : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @rope_scaling_negative(%x: tensor<4x8x16xf32>, %pos: tensor<8xi64>) {
  // expected-error @+1 {{scaling values must be positive finite numbers, got -8}}
  %0 = transformer.rope %x, %pos {scaling = array<f32: -8.0, 1.0, 4.0, 8192.0>} : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @rope_scaling_bands(%x: tensor<4x8x16xf32>, %pos: tensor<8xi64>) {
  // expected-error @+1 {{scaling's high_freq_factor (1.000000e+00) must be larger than its low_freq_factor (4.000000e+00)}}
  %0 = transformer.rope %x, %pos {scaling = array<f32: 8.0, 4.0, 1.0, 8192.0>} : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<*xf32>
  return
}

// -----

// Grouped-query attention: 4 query heads over 3 key/value heads do not divide.
func.func @attention_heads(%q: tensor<4x8x16xf32>, %k: tensor<3x8x16xf32>) {
  // expected-error @+1 {{query 'tensor<4x8x16xf32>' has 4 heads, which the 3 heads of key 'tensor<3x8x16xf32>' do not divide}}
  %0 = transformer.causal_attention %q, %k, %k {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<3x8x16xf32>, tensor<3x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_key_value_heads(%q: tensor<4x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<4x8x16xf32>) {
  // expected-error @+1 {{key 'tensor<2x8x16xf32>' and value 'tensor<4x8x16xf32>' must have the same number of heads}}
  %0 = transformer.causal_attention %q, %k, %v {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<2x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_gqa_result(%q: tensor<4x8x16xf32>, %k: tensor<2x8x16xf32>) {
  // expected-error @+1 {{result type 'tensor<2x8x16xf32>' does not match the type 'tensor<4x8x16xf32>' implied by the operands}}
  %0 = transformer.causal_attention %q, %k, %k {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_head_dim(%q: tensor<4x8x16xf32>, %k: tensor<4x8x8xf32>) {
  // expected-error @+1 {{query 'tensor<4x8x16xf32>' and key 'tensor<4x8x8xf32>' must have the same head_dim}}
  %0 = transformer.causal_attention %q, %k, %k {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_without_heads(%q: tensor<0x8x4xf32>) {
  // expected-error @+1 {{query 'tensor<0x8x4xf32>' has a zero-sized dimension; attention needs at least one head, token and feature}}
  %0 = transformer.causal_attention %q, %q, %q {scale = 0.5 : f32} : (tensor<0x8x4xf32>, tensor<0x8x4xf32>, tensor<0x8x4xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_key_value_tokens(%q: tensor<4x8x16xf32>, %k: tensor<4x8x16xf32>, %v: tensor<4x9x16xf32>) {
  // expected-error @+1 {{key 'tensor<4x8x16xf32>' and value 'tensor<4x9x16xf32>' must have the same number of tokens}}
  %0 = transformer.causal_attention %q, %k, %v {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x9x16xf32>) -> tensor<*xf32>
  return
}

// -----

// A query flagged token-major but shaped head-major: [4, 6, 16] read as 4 tokens of 6 heads,
// which the key's 4 heads do not divide.
func.func @attention_token_major_query_shape(%q: tensor<4x6x16xf32>, %k: tensor<4x8x16xf32>) {
  // expected-error @+1 {{token-major query 'tensor<4x6x16xf32>' has 6 heads, which the 4 heads of key 'tensor<4x8x16xf32>' do not divide}}
  %0 = transformer.causal_attention %q, %k, %k {query_token_major, scale = 0.25 : f32} : (tensor<4x6x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_token_major_key_rank(%q: tensor<4x8x16xf32>, %k: tensor<8x64xf32>) {
  // expected-error @+1 {{token-major key must be a rank-3 [tokens, heads, head_dim] tensor, got 'tensor<8x64xf32>'}}
  %0 = transformer.causal_attention %q, %k, %q {key_token_major, scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<8x64xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_token_major_value_tokens(%q: tensor<4x8x16xf32>, %v: tensor<9x4x16xf32>) {
  // expected-error @+1 {{key 'tensor<4x8x16xf32>' and token-major value 'tensor<9x4x16xf32>' must have the same number of tokens}}
  %0 = transformer.causal_attention %q, %q, %v {value_token_major, scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<9x4x16xf32>) -> tensor<*xf32>
  return
}

// -----

// A token-major result is [Tq, H, dv]; a head-major one declared instead is an error.
func.func @attention_token_major_result(%q: tensor<4x8x16xf32>) {
  // expected-error @+1 {{result type 'tensor<4x8x16xf32>' does not match the type 'tensor<8x4x16xf32>' implied by the operands}}
  %0 = transformer.causal_attention %q, %q, %q {result_token_major, scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  return
}

// -----

func.func @attention_scale(%q: tensor<4x8x16xf32>) {
  // expected-error @+1 {{scale must be a positive finite number}}
  %0 = transformer.causal_attention %q, %q, %q {scale = 0.0 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_window_zero(%q: tensor<4x8x16xf32>) {
  // expected-error @+1 {{window must be >= 1 (the keys a query sees, its own included), got 0}}
  %0 = transformer.causal_attention %q, %q, %q {scale = 0.25 : f32, window = 0 : i64} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_window_negative(%q: tensor<4x8x16xf32>) {
  // expected-error @+1 {{window must be >= 1}}
  %0 = transformer.causal_attention %q, %q, %q {scale = 0.25 : f32, window = -2 : i64} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_unpacked_weight(%a: tensor<4x8xf32>, %b: tensor<8x64xf32>) {
  // expected-error @+1 {{rhs must be a rank-3 [N / P, rows, P] panel-packed weight, got 'tensor<8x64xf32>'}}
  %0 = transformer.packed_matmul f32 %a, %b : (tensor<4x8xf32>, tensor<8x64xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_contraction_mismatch(%a: tensor<4x8xf32>, %b: tensor<2x9x32xf32>) {
  // expected-error @+1 {{contraction dimensions do not match: lhs 'tensor<4x8xf32>' has 8 columns but the packed rhs 'tensor<2x9x32xf32>' has 9 rows}}
  %0 = transformer.packed_matmul f32 %a, %b : (tensor<4x8xf32>, tensor<2x9x32xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_unknown_format(%a: tensor<4x64xf32>, %b: tensor<2x16x32xi32>) {
  // expected-error @+1 {{no weight format 'q3_k' (f32, bf16, q8_0, q4_0, q4_1, q4_k, q6_k, q5_k, q5_0 or q5_1)}}
  %0 = transformer.packed_matmul q3_k %a, %b : (tensor<4x64xf32>, tensor<2x16x32xi32>) -> tensor<*xf32>
  return
}

// -----

// The generic form skips the parser's check of the name; the verifier makes the same one.
func.func @packed_matmul_unknown_format_generic(%a: tensor<4x64xf32>, %b: tensor<2x16x32xi32>) {
  // expected-error @+1 {{has no weight format 'q3_k' (f32, bf16, q8_0, q4_0, q4_1, q4_k, q6_k, q5_k, q5_0 or q5_1)}}
  %0 = "transformer.packed_matmul"(%a, %b) <{format = "q3_k", operandSegmentSizes = array<i32: 1, 1, 0>}> : (tensor<4x64xf32>, tensor<2x16x32xi32>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_q8_0_without_scales(%a: tensor<4x64xf32>, %b: tensor<2x16x32xi32>) {
  // expected-error @+1 {{q8_0 weights need their scales}}
  %0 = transformer.packed_matmul q8_0 %a, %b : (tensor<4x64xf32>, tensor<2x16x32xi32>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_bf16_lane_rows(%a: tensor<4x64xf32>, %b: tensor<2x64x32xi32>) {
  // expected-error @+1 {{bf16 weights for K = 64 must have 32 rows (16-bit codes, K * 16 / 32 words per column), got 'tensor<2x64x32xi32>'}}
  %0 = transformer.packed_matmul bf16 %a, %b : (tensor<4x64xf32>, tensor<2x64x32xi32>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_bf16_odd_k(%a: tensor<4x7xf32>, %b: tensor<2x3x32xi32>) {
  // expected-error @+1 {{bf16 weights need a K (7) that fills whole 32-bit words of 16-bit codes}}
  %0 = transformer.packed_matmul bf16 %a, %b : (tensor<4x7xf32>, tensor<2x3x32xi32>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_int8_weight(%a: tensor<4x8xf32>, %b: tensor<2x8x32xi8>) {
  // expected-error @+1 {{operand #1 must be tensor of 32-bit float or 32-bit signless integer values}}
  %0 = transformer.packed_matmul f32 %a, %b : (tensor<4x8xf32>, tensor<2x8x32xi8>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_lanes_named_f32(%a: tensor<4x64xf32>, %b: tensor<2x16x32xi32>) {
  // expected-error @+1 {{f32 weights are f32, got 'tensor<2x16x32xi32>'}}
  %0 = transformer.packed_matmul f32 %a, %b : (tensor<4x64xf32>, tensor<2x16x32xi32>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_floats_named_q8_0(%a: tensor<4x64xf32>, %b: tensor<2x64x32xf32>, %s: tensor<2x2x32xf16>) {
  // expected-error @+1 {{q8_0 weights are i32 lane words, got 'tensor<2x64x32xf32>'}}
  %0 = transformer.packed_matmul q8_0 %a, %b, %s : (tensor<4x64xf32>, tensor<2x64x32xf32>, tensor<2x2x32xf16>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_scales_on_bf16_weight(%a: tensor<4x64xf32>, %b: tensor<2x32x32xi32>, %s: tensor<2x2x32xf16>) {
  // expected-error @+1 {{bf16 weights take no scales (only the block formats do)}}
  %0 = transformer.packed_matmul bf16 %a, %b, %s : (tensor<4x64xf32>, tensor<2x32x32xi32>, tensor<2x2x32xf16>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_f32_scales(%a: tensor<4x64xf32>, %b: tensor<2x16x32xi32>, %s: tensor<2x2x32xf32>) {
  // expected-error @+1 {{operand #2 must be tensor of 16-bit float values}}
  %0 = transformer.packed_matmul q8_0 %a, %b, %s : (tensor<4x64xf32>, tensor<2x16x32xi32>, tensor<2x2x32xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_k_not_a_block_multiple(%a: tensor<4x48xf32>, %b: tensor<2x12x32xi32>, %s: tensor<2x1x32xf16>) {
  // expected-error @+1 {{q8_0 weights need K (48) to be a multiple of their block, 32}}
  %0 = transformer.packed_matmul q8_0 %a, %b, %s : (tensor<4x48xf32>, tensor<2x12x32xi32>, tensor<2x1x32xf16>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_k_not_a_super_block_multiple(%a: tensor<4x64xf32>, %b: tensor<2x8x32xi32>, %s: tensor<2x2x32xf16>) {
  // expected-error @+1 {{q4_k weights need K (64) to be a multiple of their block, 256}}
  %0 = transformer.packed_matmul q4_k %a, %b, %s : (tensor<4x64xf32>, tensor<2x8x32xi32>, tensor<2x2x32xf16>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_codes_rows(%a: tensor<4x64xf32>, %b: tensor<2x48x32xi32>, %s: tensor<2x2x32xf16>) {
  // expected-error @+1 {{q4_0 weights for K = 64 must have 8 rows (4-bit codes, K * 4 / 32 words per column), got 'tensor<2x48x32xi32>'}}
  %0 = transformer.packed_matmul q4_0 %a, %b, %s : (tensor<4x64xf32>, tensor<2x48x32xi32>, tensor<2x2x32xf16>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_q6_k_rows(%a: tensor<4x256xf32>, %b: tensor<2x32x32xi32>, %s: tensor<2x9x32xf16>) {
  // expected-error @+1 {{q6_k weights for K = 256 must have 48 rows (6-bit codes, K * 6 / 32 words per column), got 'tensor<2x32x32xi32>'}}
  %0 = transformer.packed_matmul q6_k %a, %b, %s : (tensor<4x256xf32>, tensor<2x32x32xi32>, tensor<2x9x32xf16>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_scales_shape(%a: tensor<4x64xf32>, %b: tensor<2x16x32xi32>, %s: tensor<2x4x32xf16>) {
  // expected-error @+1 {{q8_0 scales must be [N / P, K / 32 * 1, P] = [2, 2, 32] (1 per block of 32 weights of a column), got 'tensor<2x4x32xf16>'}}
  %0 = transformer.packed_matmul q8_0 %a, %b, %s : (tensor<4x64xf32>, tensor<2x16x32xi32>, tensor<2x4x32xf16>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_q4_1_scales_and_mins(%a: tensor<4x64xf32>, %b: tensor<2x8x32xi32>, %s: tensor<2x2x32xf16>) {
  // expected-error @+1 {{q4_1 scales must be [N / P, K / 32 * 2, P] = [2, 4, 32] (2 per block of 32 weights of a column), got 'tensor<2x2x32xf16>'}}
  %0 = transformer.packed_matmul q4_1 %a, %b, %s : (tensor<4x64xf32>, tensor<2x8x32xi32>, tensor<2x2x32xf16>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_rank_4_scales(%a: tensor<4x64xf32>, %b: tensor<2x8x32xi32>, %s: tensor<2x2x2x32xf16>) {
  // expected-error @+1 {{scales must be a rank-3 [N / P, K / 32 * 2, P] tensor, got 'tensor<2x2x2x32xf16>'}}
  %0 = transformer.packed_matmul q4_1 %a, %b, %s : (tensor<4x64xf32>, tensor<2x8x32xi32>, tensor<2x2x2x32xf16>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_matmul_q4_k_scales(%a: tensor<4x256xf32>, %b: tensor<2x32x32xi32>, %s: tensor<2x9x32xf16>) {
  // expected-error @+1 {{q4_k scales must be [N / P, K / 256 * 10, P] = [2, 10, 32] (10 per block of 256 weights of a column), got 'tensor<2x9x32xf16>'}}
  %0 = transformer.packed_matmul q4_k %a, %b, %s : (tensor<4x256xf32>, tensor<2x32x32xi32>, tensor<2x9x32xf16>) -> tensor<*xf32>
  return
}

// -----

func.func @lane_dot_mixed_shapes(%acc: vector<16xi32>, %a: vector<8xi32>) {
  // expected-error @+1 {{all non-scalar operands/results must have the same shape and base type}}
  %0 = transformer.lane_dot_u8i8 %acc, %a, %a : vector<8xi32> -> vector<16xi32>
  return
}

// -----

func.func @packed_matmul_wrong_result(%a: tensor<4x8xf32>, %b: tensor<2x8x32xf32>) {
  // expected-error @+1 {{result type 'tensor<4x32xf32>' does not match the type 'tensor<4x64xf32>' implied by the operands}}
  %0 = transformer.packed_matmul f32 %a, %b : (tensor<4x8xf32>, tensor<2x8x32xf32>) -> tensor<4x32xf32>
  return
}

// -----

func.func @packed_embedding_codes_rows(%c: tensor<8x32x32xi32>, %s: tensor<8x2x32xf16>, %ids: tensor<5xi64>) {
  // expected-error @+1 {{codes 'tensor<8x32x32xi32>' give D = 128, so the q8_0 scales need 4 rows, got 'tensor<8x2x32xf16>'}}
  %0 = transformer.packed_embedding q8_0 %c, %s, %ids : (tensor<8x32x32xi32>, tensor<8x2x32xf16>, tensor<5xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_embedding_format(%c: tensor<8x8x32xi32>, %s: tensor<8x2x32xf16>, %ids: tensor<5xi64>) {
  // expected-error @+1 {{reads tables in q8_0 or q6_k (an LM head's formats), got q4_0}}
  %0 = transformer.packed_embedding q4_0 %c, %s, %ids : (tensor<8x8x32xi32>, tensor<8x2x32xf16>, tensor<5xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_embedding_q6_k_scales(%c: tensor<8x48x32xi32>, %s: tensor<8x8x32xf16>, %ids: tensor<5xi64>) {
  // expected-error @+1 {{codes 'tensor<8x48x32xi32>' give D = 256, so the q6_k scales need 9 rows, got 'tensor<8x8x32xf16>'}}
  %0 = transformer.packed_embedding q6_k %c, %s, %ids : (tensor<8x48x32xi32>, tensor<8x8x32xf16>, tensor<5xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_embedding_panels(%c: tensor<8x16x32xi32>, %s: tensor<4x2x32xf16>, %ids: tensor<5xi64>) {
  // expected-error @+1 {{codes 'tensor<8x16x32xi32>' and scales 'tensor<4x2x32xf16>' must have the same panels}}
  %0 = transformer.packed_embedding q8_0 %c, %s, %ids : (tensor<8x16x32xi32>, tensor<4x2x32xf16>, tensor<5xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @packed_embedding_ids_rank(%c: tensor<8x16x32xi32>, %s: tensor<8x2x32xf16>, %ids: tensor<1x5xi64>) {
  // expected-error @+1 {{ids must be a rank-1 tensor, got 'tensor<1x5xi64>'}}
  %0 = transformer.packed_embedding q8_0 %c, %s, %ids : (tensor<8x16x32xi32>, tensor<8x2x32xf16>, tensor<1x5xi64>) -> tensor<*xf32>
  return
}

// -----

// offset + size once overflowed int64 and the slice was accepted.
func.func @slice_offset_overflow(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{slice [9223372036854775807, 9223372036854775807 + 1) does not fit in the last dimension (8) of 'tensor<4x8xf32>'}}
  %0 = transformer.slice %x {offset = 9223372036854775807 : i64, size = 1 : i64} : tensor<4x8xf32> -> tensor<*xf32>
  return
}

// -----

// heads * head_dim once wrapped to a static 0.
func.func @merge_heads_features_overflow(%x: tensor<4611686018427387904x2x4xf32>) {
  // expected-error @+1 {{dimension 4611686018427387904 * 4 of 'tensor<4611686018427387904x2x4xf32>' overflows a 64-bit size}}
  %0 = transformer.merge_heads %x : tensor<4611686018427387904x2x4xf32> -> tensor<*xf32>
  return
}

// -----

// panels * panel width once wrapped to a static 0.
func.func @packed_matmul_columns_overflow(%x: tensor<4x8xf32>, %w: tensor<4611686018427387904x8x4xf32>) {
  // expected-error @+1 {{dimension 4611686018427387904 * 4 of 'tensor<4611686018427387904x8x4xf32>' overflows a 64-bit size}}
  %0 = transformer.packed_matmul f32 %x, %w : (tensor<4x8xf32>, tensor<4611686018427387904x8x4xf32>) -> tensor<*xf32>
  return
}

// -----

// lane words * 32 bits once wrapped.
func.func @packed_embedding_features_overflow(%c: tensor<8x1152921504606846976x32xi32>, %s: tensor<8x2x32xf16>, %ids: tensor<5xi64>) {
  // expected-error @+1 {{dimension 1152921504606846976 * 32 of 'tensor<8x1152921504606846976x32xi32>' overflows a 64-bit size}}
  %0 = transformer.packed_embedding q8_0 %c, %s, %ids : (tensor<8x1152921504606846976x32xi32>, tensor<8x2x32xf16>, tensor<5xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_mask_shape(%q: tensor<4x8x16xf32>, %mask: tensor<8x9xi1>) {
  // expected-error @+1 {{mask 'tensor<8x9xi1>' must be [queries, keys] = [8, 8] (i1: key j visible from query i)}}
  %0 = transformer.causal_attention %q, %q, %q mask %mask {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<8x9xi1>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_mask_element_type(%q: tensor<4x8x16xf32>, %mask: tensor<8x8xf32>) {
  // expected-error @+1 {{operand #3 must be tensor of 1-bit signless integer values}}
  %0 = transformer.causal_attention %q, %q, %q mask %mask {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<8x8xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_mask_with_offset(%q: tensor<4x8x16xf32>, %mask: tensor<8x8xi1>, %pos: index) {
  // expected-error @+1 {{a mask operand gives every query's keys itself: it takes no offset}}
  %0 = transformer.causal_attention %q, %q, %q offset %pos mask %mask {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, index, tensor<8x8xi1>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_mask_with_window(%q: tensor<4x8x16xf32>, %mask: tensor<8x8xi1>) {
  // expected-error @+1 {{a mask operand replaces the causal rule and its window: no window}}
  %0 = transformer.causal_attention %q, %q, %q mask %mask {scale = 0.25 : f32, window = 2 : i64} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<8x8xi1>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_tile_classes_alone(%q: tensor<4x8x16xf32>) {
  // expected-error @+1 {{tile_sizes and tile_classes go together}}
  %0 = transformer.causal_attention %q, %q, %q {scale = 0.25 : f32, tile_classes = ["P"]} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_tile_classes_rows(%q: tensor<4x8x16xf32>) {
  // expected-error @+1 {{tile_classes must have one entry per block of 4 queries (2), got 1}}
  %0 = transformer.causal_attention %q, %q, %q {scale = 0.25 : f32, tile_classes = ["PE"], tile_sizes = array<i64: 4, 4>} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_tile_classes_letters(%q: tensor<4x8x16xf32>) {
  // expected-error @+1 {{tile_classes[1] = "FX" may hold only E (empty), F (full) and P (partial)}}
  %0 = transformer.causal_attention %q, %q, %q {scale = 0.25 : f32, tile_classes = ["PE", "FX"], tile_sizes = array<i64: 4, 4>} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @paged_cache_write_pool_rank(%u: tensor<4x3x16xf32>, %p: tensor<4x8x16xf32>, %s: tensor<3xi64>) {
  // expected-error @+1 {{pool must be a rank-4 [blocks, heads, block_size, head_dim] tensor, got 'tensor<4x8x16xf32>'}}
  %0 = transformer.paged_cache_write %u into %p[%s] : tensor<4x3x16xf32>, tensor<4x8x16xf32>, tensor<3xi64> -> tensor<*xf32>
  return
}

// -----

func.func @paged_cache_write_heads(%u: tensor<2x3x16xf32>, %p: tensor<32x4x8x16xf32>, %s: tensor<3xi64>) {
  // expected-error @+1 {{update 'tensor<2x3x16xf32>' and pool 'tensor<32x4x8x16xf32>' must agree on heads and head_dim}}
  %0 = transformer.paged_cache_write %u into %p[%s] : tensor<2x3x16xf32>, tensor<32x4x8x16xf32>, tensor<3xi64> -> tensor<*xf32>
  return
}

// -----

func.func @paged_cache_write_slots(%u: tensor<4x3x16xf32>, %p: tensor<32x4x8x16xf32>, %s: tensor<2xi64>) {
  // expected-error @+1 {{slots 'tensor<2xi64>' must give one slot per token of update 'tensor<4x3x16xf32>'}}
  %0 = transformer.paged_cache_write %u into %p[%s] : tensor<4x3x16xf32>, tensor<32x4x8x16xf32>, tensor<2xi64> -> tensor<*xf32>
  return
}

// -----

func.func @paged_attention_pools_differ(%q: tensor<4x3x16xf32>, %kp: tensor<32x4x8x16xf32>, %vp: tensor<16x4x8x16xf32>, %t: tensor<2x8xi64>, %s: tensor<3xi64>) {
  // expected-error @+1 {{key pool 'tensor<32x4x8x16xf32>' and value pool 'tensor<16x4x8x16xf32>' must have the same shape}}
  %0 = transformer.paged_attention %q, %kp, %vp tables %t sequences %s positions %s {scale = 0.25 : f32} : tensor<4x3x16xf32>, tensor<32x4x8x16xf32>, tensor<16x4x8x16xf32>, tensor<2x8xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<*xf32>
  return
}

// -----

func.func @paged_attention_gqa_heads(%q: tensor<4x3x16xf32>, %kp: tensor<32x3x8x16xf32>, %t: tensor<2x8xi64>, %s: tensor<3xi64>) {
  // expected-error @+1 {{query 'tensor<4x3x16xf32>' has 4 heads, which the 3 heads of key pool 'tensor<32x3x8x16xf32>' do not divide}}
  %0 = transformer.paged_attention %q, %kp, %kp tables %t sequences %s positions %s {scale = 0.25 : f32} : tensor<4x3x16xf32>, tensor<32x3x8x16xf32>, tensor<32x3x8x16xf32>, tensor<2x8xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<*xf32>
  return
}

// -----

func.func @paged_attention_head_dim(%q: tensor<4x3x16xf32>, %kp: tensor<32x2x8x8xf32>, %t: tensor<2x8xi64>, %s: tensor<3xi64>) {
  // expected-error @+1 {{query 'tensor<4x3x16xf32>' and key pool 'tensor<32x2x8x8xf32>' must agree on head_dim}}
  %0 = transformer.paged_attention %q, %kp, %kp tables %t sequences %s positions %s {scale = 0.25 : f32} : tensor<4x3x16xf32>, tensor<32x2x8x8xf32>, tensor<32x2x8x8xf32>, tensor<2x8xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<*xf32>
  return
}

// -----

func.func @paged_attention_tables_rank(%q: tensor<4x3x16xf32>, %kp: tensor<32x4x8x16xf32>, %t: tensor<8xi64>, %s: tensor<3xi64>) {
  // expected-error @+1 {{block_tables must be a rank-2 [sequences, blocks] tensor, got 'tensor<8xi64>'}}
  %0 = transformer.paged_attention %q, %kp, %kp tables %t sequences %s positions %s {scale = 0.25 : f32} : tensor<4x3x16xf32>, tensor<32x4x8x16xf32>, tensor<32x4x8x16xf32>, tensor<8xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<*xf32>
  return
}

// -----

func.func @paged_attention_positions(%q: tensor<4x3x16xf32>, %kp: tensor<32x4x8x16xf32>, %t: tensor<2x8xi64>, %s: tensor<3xi64>, %p: tensor<4xi64>) {
  // expected-error @+1 {{positions 'tensor<4xi64>' must give one entry per token of query 'tensor<4x3x16xf32>'}}
  %0 = transformer.paged_attention %q, %kp, %kp tables %t sequences %s positions %p {scale = 0.25 : f32} : tensor<4x3x16xf32>, tensor<32x4x8x16xf32>, tensor<32x4x8x16xf32>, tensor<2x8xi64>, tensor<3xi64>, tensor<4xi64> -> tensor<*xf32>
  return
}

// -----

func.func @paged_attention_scale(%q: tensor<4x3x16xf32>, %kp: tensor<32x4x8x16xf32>, %t: tensor<2x8xi64>, %s: tensor<3xi64>) {
  // expected-error @+1 {{scale must be a positive finite number}}
  %0 = transformer.paged_attention %q, %kp, %kp tables %t sequences %s positions %s {scale = 0.0 : f32} : tensor<4x3x16xf32>, tensor<32x4x8x16xf32>, tensor<32x4x8x16xf32>, tensor<2x8xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<*xf32>
  return
}

// -----

func.func @gelu_erf_wrong_result(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{result type 'tensor<4x4xf32>' does not match the type 'tensor<4x8xf32>' implied by the operands}}
  %0 = transformer.gelu_erf %a : tensor<4x8xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @tanh_wrong_result(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{result type 'tensor<8xf32>' does not match the type 'tensor<4x8xf32>' implied by the operands}}
  %0 = transformer.tanh %a : tensor<4x8xf32> -> tensor<8xf32>
  return
}

// -----

func.func @where_values_not_broadcastable(%c: tensor<4x8xi1>, %a: tensor<4x8xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{operands are not broadcast-compatible: 'tensor<4x8xf32>' and 'tensor<3xf32>' (dimension 8 vs 3)}}
  %0 = transformer.where %c, %a, %b : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<3xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @where_condition_not_broadcastable(%c: tensor<5x8xi1>, %a: tensor<4x8xf32>, %b: tensor<1xf32>) {
  // expected-error @+1 {{operands are not broadcast-compatible: 'tensor<4x8xf32>' and 'tensor<5x8xi1>' (dimension 4 vs 5)}}
  %0 = transformer.where %c, %a, %b : (tensor<5x8xi1>, tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @where_condition_not_i1(%c: tensor<4x8xf32>, %a: tensor<4x8xf32>, %b: tensor<1xf32>) {
  // expected-error @+1 {{operand #0 must be tensor of 1-bit signless integer values}}
  %0 = transformer.where %c, %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @exp_wrong_result(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{result type 'tensor<8x4xf32>' does not match the type 'tensor<4x8xf32>' implied by the operands}}
  %0 = transformer.exp %a : tensor<4x8xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @rsqrt_wrong_result(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{result type 'tensor<4xf32>' does not match the type 'tensor<4x8xf32>' implied by the operands}}
  %0 = transformer.rsqrt %a : tensor<4x8xf32> -> tensor<4xf32>
  return
}

// -----

func.func @pow_not_broadcastable(%a: tensor<4x8xf32>, %e: tensor<3xf32>) {
  // expected-error @+1 {{operands are not broadcast-compatible: 'tensor<4x8xf32>' and 'tensor<3xf32>' (dimension 8 vs 3)}}
  %0 = transformer.pow %a, %e : (tensor<4x8xf32>, tensor<3xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @permute_wrong_length(%a: tensor<2x3x4xf32>) {
  // expected-error @+1 {{permutation has 2 entries for the rank-3 input 'tensor<2x3x4xf32>'}}
  %0 = transformer.permute %a {permutation = array<i64: 1, 0>} : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  return
}

// -----

func.func @permute_repeated_dim(%a: tensor<2x3x4xf32>) {
  // expected-error @+1 {{permutation must list each of 0 .. 2 once, got 1 twice}}
  %0 = transformer.permute %a {permutation = array<i64: 1, 1, 0>} : tensor<2x3x4xf32> -> tensor<3x3x2xf32>
  return
}

// -----

func.func @permute_wrong_result(%a: tensor<2x3x4xf32>) {
  // expected-error @+1 {{result type 'tensor<2x3x4xf32>' does not match the type 'tensor<3x4x2xf32>' implied by the operands}}
  %0 = transformer.permute %a {permutation = array<i64: 1, 2, 0>} : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  return
}

// -----

func.func @reshape_element_count(%a: tensor<2x3x4xf32>) {
  // expected-error @+1 {{cannot reshape 'tensor<2x3x4xf32>' (24 elements) to 'tensor<5x5xf32>' (25 elements)}}
  %0 = transformer.reshape %a : tensor<2x3x4xf32> -> tensor<5x5xf32>
  return
}

// -----

func.func @reshape_dynamic(%a: tensor<?x4xf32>) {
  // expected-error @+1 {{input and result must have static shapes of rank >= 1}}
  %0 = transformer.reshape %a : tensor<?x4xf32> -> tensor<8xf32>
  return
}

// -----

func.func @broadcast_incompatible(%a: tensor<3x8xf32>) {
  // expected-error @+1 {{'tensor<3x8xf32>' does not broadcast to 'tensor<4x8xf32>' (dimension 3 vs 4)}}
  %0 = transformer.broadcast %a : tensor<3x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @broadcast_lower_rank(%a: tensor<2x3x8xf32>) {
  // expected-error @+1 {{cannot broadcast 'tensor<2x3x8xf32>' to the lower rank of 'tensor<3x8xf32>'}}
  %0 = transformer.broadcast %a : tensor<2x3x8xf32> -> tensor<3x8xf32>
  return
}

// -----

func.func @concat_mismatch(%a: tensor<4x8xf32>, %b: tensor<3x2xf32>) {
  // expected-error @+1 {{inputs must agree on every dimension but 1: 'tensor<3x2xf32>' has 3 in dimension 0, the first input 4}}
  %0 = transformer.concat %a, %b {dim = 1 : i64} : (tensor<4x8xf32>, tensor<3x2xf32>) -> tensor<4x10xf32>
  return
}

// -----

func.func @concat_dim_out_of_range(%a: tensor<4x8xf32>, %b: tensor<4x2xf32>) {
  // expected-error @+1 {{dim 2 is out of range for the rank-2 input 'tensor<4x8xf32>'}}
  %0 = transformer.concat %a, %b {dim = 2 : i64} : (tensor<4x8xf32>, tensor<4x2xf32>) -> tensor<4x10xf32>
  return
}

// -----

func.func @concat_wrong_result(%a: tensor<4x8xf32>, %b: tensor<4x2xf32>) {
  // expected-error @+1 {{result type 'tensor<4x9xf32>' does not match the type 'tensor<4x10xf32>' implied by the operands}}
  %0 = transformer.concat %a, %b {dim = 1 : i64} : (tensor<4x8xf32>, tensor<4x2xf32>) -> tensor<4x9xf32>
  return
}

// -----

func.func @mask_expression_not_i1(%q: tensor<4x8x16xf32>) {
  %0 = transformer.causal_attention %q, %q, %q visible {
  ^bb0(%i: index, %j: index):
    // expected-error @+1 {{operand #0 must be 1-bit signless integer, but got 'index'}}
    "transformer.yield"(%i) : (index) -> ()
  } {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @mask_expression_arguments(%q: tensor<4x8x16xf32>) {
  // expected-error @+1 {{the mask expression takes two index arguments, (query position, key position), got 1 arguments}}
  %0 = transformer.causal_attention %q, %q, %q visible {
  ^bb0(%i: index):
    %t = arith.constant true
    transformer.yield %t : i1
  } {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @mask_expression_argument_type(%q: tensor<4x8x16xf32>) {
  // expected-error @+1 {{the mask expression takes two index arguments, (query position, key position), got 2 arguments}}
  %0 = transformer.causal_attention %q, %q, %q visible {
  ^bb0(%i: index, %j: i64):
    %t = arith.constant true
    transformer.yield %t : i1
  } {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @mask_expression_foreign_op(%q: tensor<4x8x16xf32>) {
  %0 = transformer.causal_attention %q, %q, %q visible {
  ^bb0(%i: index, %j: index):
    // expected-error @+1 {{is not allowed in a mask expression: only arith ops (the compiler evaluates it tile by tile)}}
    %n = transformer.constant dense<1.0> : tensor<1xf32>
    %t = arith.constant true
    transformer.yield %t : i1
  } {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @mask_expression_from_above(%q: tensor<4x8x16xf32>, %limit: index) {
  // expected-note @+1 {{required by region isolation constraints}}
  %0 = transformer.causal_attention %q, %q, %q visible {
  ^bb0(%i: index, %j: index):
    // expected-error @+1 {{using value defined outside the region}}
    %seen = arith.cmpi ult, %j, %limit : index
    transformer.yield %seen : i1
  } {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @mask_expression_and_operand(%q: tensor<4x8x16xf32>, %mask: tensor<8x8xi1>) {
  // expected-error @+1 {{takes a mask operand or a mask expression (visible), not both}}
  %0 = transformer.causal_attention %q, %q, %q mask %mask visible {
  ^bb0(%i: index, %j: index):
    %t = arith.constant true
    transformer.yield %t : i1
  } {scale = 0.25 : f32} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<8x8xi1>) -> tensor<*xf32>
  return
}

// -----

func.func @mask_expression_and_window(%q: tensor<4x8x16xf32>) {
  // expected-error @+1 {{a mask expression replaces the causal rule and its window: no window}}
  %0 = transformer.causal_attention %q, %q, %q visible {
  ^bb0(%i: index, %j: index):
    %t = arith.constant true
    transformer.yield %t : i1
  } {scale = 0.25 : f32, window = 2 : i64} : (tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @yield_outside_attention() {
  %t = arith.constant true
  // expected-error @+1 {{expects parent op 'transformer.causal_attention'}}
  transformer.yield %t : i1
}

// -----

func.func @paged_attention_window(%q: tensor<4x3x16xf32>, %kp: tensor<32x4x8x16xf32>, %t: tensor<2x8xi64>, %s: tensor<3xi64>) {
  // expected-error @+1 {{window must be >= 1}}
  %0 = transformer.paged_attention %q, %kp, %kp tables %t sequences %s positions %s {scale = 0.25 : f32, window = 0 : i64} : tensor<4x3x16xf32>, tensor<32x4x8x16xf32>, tensor<32x4x8x16xf32>, tensor<2x8xi64>, tensor<3xi64>, tensor<3xi64> -> tensor<*xf32>
  return
}

// -----

func.func @mean_result(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result type 'tensor<4x8xf32>' does not match the type 'tensor<4x1xf32>' implied by the operands}}
  %0 = transformer.mean %x : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @mean_rank_0(%x: tensor<f32>) {
  // expected-error @+1 {{input must have rank >= 1, got 'tensor<f32>'}}
  %0 = transformer.mean %x : tensor<f32> -> tensor<*xf32>
  return
}

// -----

func.func @silu_result(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result type 'tensor<8x4xf32>' does not match the type 'tensor<4x8xf32>' implied by the operands}}
  %0 = transformer.silu %x : tensor<4x8xf32> -> tensor<8x4xf32>
  return
}
