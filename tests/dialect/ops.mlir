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
