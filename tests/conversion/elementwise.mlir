// --transformer-to-linalg, elementwise ops: constant, add/mul with broadcasting, neg/relu/gelu, rope (both layouts,
// Llama 3 scaling), swiglu, silu, where, exp/rsqrt/pow.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --transformer-to-linalg | FileCheck %s

// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[LAST:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @add_bias
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK: %[[E:.*]] = tensor.empty() : tensor<4x8xf32>
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[LAST]], #[[ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME: ins(%[[X]], %[[B]] : tensor<4x8xf32>, tensor<8xf32>) outs(%[[E]] : tensor<4x8xf32>)
// CHECK: arith.addf
// CHECK-NOT: transformer.
func.func @add_bias(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = transformer.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// A size-1 dim broadcasts by reading index 0.
// CHECK-DAG: #[[COL:.*]] = affine_map<(d0, d1) -> (d0, 0)>
// CHECK-LABEL: func.func @mul_column
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[COL]], #{{.*}}]
// CHECK: arith.mulf
func.func @mul_column(%x: tensor<4x8xf32>, %c: tensor<4x1xf32>) -> tensor<4x8xf32> {
  %0 = transformer.mul %x, %c : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @unary
// CHECK: arith.negf
// CHECK: arith.maximumf
// GELU, tanh approximation: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
// CHECK: arith.constant 4.471500e-02 : f32
// CHECK: arith.constant 0.797884583 : f32
// CHECK: math.tanh
// CHECK: arith.constant 5.000000e-01 : f32
// CHECK-NOT: transformer.
func.func @unary(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = transformer.neg %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = transformer.relu %0 : tensor<4x8xf32> -> tensor<4x8xf32>
  %2 = transformer.gelu %1 : tensor<4x8xf32> -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @constant
// CHECK: %[[C:.*]] = arith.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK: return %[[C]]
func.func @constant() -> tensor<2xf32> {
  %0 = transformer.constant dense<[1.0, 2.0]> : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// RoPE: a [positions, head size] table of cos(a) and the signed sin(a) first (a = position * theta_i, in
// f64, with theta_i read from a constant f64 table, base^(-2 i / d), at pair j mod half; the sine negated
// on the pair's first lane), then the rotation x[j] * cos + x[j +/- half] * sin, its partner read with
// tensor.extract and the table broadcast over the heads: one sin/cos per position and lane, not per head.
// CHECK-DAG: #[[POS:.*]] = affine_map<(d0, d1) -> (d0)>
// CHECK-DAG: #[[TABLE:.*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-LABEL: func.func @rope
// CHECK: %[[THETA:.*]] = arith.constant dense<[1.000000e+00, 0.31622776601683794, 1.000000e-01, 0.031622776601683791, 1.000000e-02, 0.0031622776601683794, 1.000000e-03, 3.1622776601683794E-4]> : tensor<8xf64>
// CHECK: %[[COSSIN:.*]]:2 = linalg.generic {indexing_maps = [#[[POS]], #{{.*}}, #{{.*}}]
// CHECK-SAME: ins(%{{.*}} : tensor<8xi64>) outs(%{{.*}}, %{{.*}} : tensor<8x16xf32>, tensor<8x16xf32>)
// CHECK: %[[J:.*]] = linalg.index 1 : index
// CHECK: %[[FIRST:.*]] = arith.cmpi ult, %[[J]], %c8 : index
// CHECK: %[[PAIR:.*]] = arith.remui %[[J]], %c8 : index
// CHECK: tensor.extract %[[THETA]][%[[PAIR]]] : tensor<8xf64>
// CHECK: math.cos %{{.*}} : f64
// CHECK: math.sin %{{.*}} : f64
// CHECK: arith.select %[[FIRST]]
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[TABLE]], #[[TABLE]], #{{.*}}]
// CHECK-SAME: ins(%{{.*}}, %[[COSSIN]]#0, %[[COSSIN]]#1 : tensor<4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>)
// CHECK: tensor.extract %{{.*}} : tensor<4x8x16xf32>
// CHECK-NOT: math.cos
// CHECK: linalg.yield
func.func @rope(%x: tensor<4x8x16xf32>, %pos: tensor<8xi64>) -> tensor<4x8x16xf32> {
  %0 = transformer.rope %x, %pos : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<4x8x16xf32>
  return %0 : tensor<4x8x16xf32>
}

// -----

// Interleaved pairs (2i, 2i + 1): the partner is j xor 1, the frequency index j / 2, and the even
// element is the one whose partner's product is subtracted.
// CHECK-LABEL: func.func @rope_interleaved
// CHECK: %[[J:.*]] = linalg.index 1 : index
// CHECK: %[[ODD:.*]] = arith.remui %[[J]], %c2 : index
// CHECK: %[[EVEN:.*]] = arith.cmpi eq, %[[ODD]], %c0 : index
// CHECK: %[[PAIR:.*]] = arith.divui %[[J]], %c2 : index
// CHECK: tensor.extract %{{.*}}[%[[PAIR]]] : tensor<8xf64>
// CHECK: arith.select %[[EVEN]]
// CHECK: %[[K:.*]] = linalg.index 2 : index
// CHECK: %[[PARTNER:.*]] = arith.xori %[[K]], %c1 : index
// CHECK: tensor.extract %{{.*}}[%{{.*}}, %{{.*}}, %[[PARTNER]]] : tensor<4x8x16xf32>
func.func @rope_interleaved(%x: tensor<4x8x16xf32>, %pos: tensor<8xi64>) -> tensor<4x8x16xf32> {
  %0 = transformer.rope %x, %pos {interleaved} : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<4x8x16xf32>
  return %0 : tensor<4x8x16xf32>
}

// -----

// Llama 3 scaling (factor 8, low_freq_factor 1, high_freq_factor 4, 16 original positions) on base
// 10000, head size 16: pair i of wavelength 2 pi / theta_i is kept below 16 / 4, divided by 8 above
// 16 / 1, and smoothed in between. transformers' _compute_llama3_parameters gives (in f32)
// 0.57605636, 0.03952847, 0.0125, 0.00395285, 0.00125, ...: pair 0 (wavelength 6.28) smoothed,
// every later one (wavelength >= 19.9) divided by 8.
// CHECK-LABEL: func.func @rope_llama3_scaling
// CHECK: arith.constant dense<[0.57605640109551159, 0.039528470752104743, 1.250000e-02, 0.0039528470752104739, 1.250000e-03,
func.func @rope_llama3_scaling(%x: tensor<4x8x16xf32>, %pos: tensor<8xi64>) -> tensor<4x8x16xf32> {
  %0 = transformer.rope %x, %pos {scaling = array<f32: 8.0, 1.0, 4.0, 16.0>} : (tensor<4x8x16xf32>, tensor<8xi64>) -> tensor<4x8x16xf32>
  return %0 : tensor<4x8x16xf32>
}

// -----

// SwiGLU's gated product: gate * up / (1 + exp(-gate)), one elementwise generic.
// CHECK-LABEL: func.func @swiglu
// CHECK: linalg.generic
// CHECK: ^bb0(%[[G:.*]]: f32, %[[U:.*]]: f32, %{{.*}}: f32):
// CHECK: %[[NEG:.*]] = arith.negf %[[G]] : f32
// CHECK: %[[E:.*]] = math.exp %[[NEG]] : f32
// CHECK: %[[DEN:.*]] = arith.addf %{{.*}}, %[[E]] : f32
// CHECK: %[[NUM:.*]] = arith.mulf %[[G]], %[[U]] : f32
// CHECK: arith.divf %[[NUM]], %[[DEN]] : f32
func.func @swiglu(%g: tensor<4x8xf32>, %u: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = transformer.swiglu %g, %u : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// SiLU: x / (1 + exp(-x)), one elementwise generic.
// CHECK-LABEL: func.func @silu
// CHECK: linalg.generic
// CHECK: ^bb0(%[[X:.*]]: f32, %{{.*}}: f32):
// CHECK: %[[NEG:.*]] = arith.negf %[[X]] : f32
// CHECK: %[[E:.*]] = math.exp %[[NEG]] : f32
// CHECK: %[[DEN:.*]] = arith.addf %{{.*}}, %[[E]] : f32
// CHECK: arith.divf %[[X]], %[[DEN]] : f32
func.func @silu(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = transformer.silu %x : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Unranked types: a clear error, not a failed legalization.
func.func @needs_shapes(%x: tensor<*xf32>) -> tensor<*xf32> {
  // expected-error @+1 {{has type 'tensor<*xf32>'; --transformer-to-linalg needs static shapes (run --transformer-shape-inference first)}}
  %0 = transformer.neg %x : tensor<*xf32> -> tensor<*xf32>
  return %0 : tensor<*xf32>
}

// -----

// Exact GELU: 0.5 * x * (1 + erf(x / sqrt(2))).
// CHECK-LABEL: func.func @gelu_erf
// CHECK: linalg.generic
// CHECK: %[[S:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK: math.erf %[[S]] : f32
// CHECK-NOT: transformer.
func.func @gelu_erf(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = transformer.gelu_erf %x : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// where: a select per element, the condition broadcast like the values.
// CHECK-LABEL: func.func @where
// CHECK: linalg.generic
// CHECK-SAME: ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<8x8xi1>, tensor<4x8x8xf32>, tensor<1xf32>)
// CHECK: ^bb0(%[[C:.*]]: i1, %[[X:.*]]: f32, %[[F:.*]]: f32, %{{.*}}: f32):
// CHECK: arith.select %[[C]], %[[X]], %[[F]] : f32
// CHECK-NOT: transformer.
func.func @where(%c: tensor<8x8xi1>, %x: tensor<4x8x8xf32>, %fill: tensor<1xf32>) -> tensor<4x8x8xf32> {
  %0 = transformer.where %c, %x, %fill : (tensor<8x8xi1>, tensor<4x8x8xf32>, tensor<1xf32>) -> tensor<4x8x8xf32>
  return %0 : tensor<4x8x8xf32>
}

// -----

// exp, rsqrt and pow (by a broadcast splat): one math op per element.
// CHECK-LABEL: func.func @imported_unary
// CHECK: math.exp %{{.*}} : f32
// CHECK: math.rsqrt %{{.*}} : f32
// CHECK: math.powf %{{.*}}, %{{.*}} : f32
// CHECK-NOT: transformer.
func.func @imported_unary(%x: tensor<4x8xf32>, %e: tensor<1xf32>) -> tensor<4x8xf32> {
  %0 = transformer.exp %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = transformer.rsqrt %0 : tensor<4x8xf32> -> tensor<4x8xf32>
  %2 = transformer.pow %1, %e : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}
