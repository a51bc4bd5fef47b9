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
