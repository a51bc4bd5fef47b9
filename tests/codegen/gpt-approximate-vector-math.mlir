// --gpt-approximate-vector-math: math ops on vectors become polynomial arithmetic on the same
// vectors; scalar math ops stay for libm.
// RUN: gpt-opt %s --gpt-approximate-vector-math | FileCheck %s

// CHECK-LABEL: func.func @vector_tanh_and_exp
// CHECK-NOT: math.tanh
// CHECK-NOT: math.exp
// CHECK: arith.mulf {{.*}} : vector<16xf32>
// CHECK: return
func.func @vector_tanh_and_exp(%x: vector<16xf32>) -> (vector<16xf32>, vector<16xf32>) {
  %0 = math.tanh %x : vector<16xf32>
  %1 = math.exp %x : vector<16xf32>
  return %0, %1 : vector<16xf32>, vector<16xf32>
}

// CHECK-LABEL: func.func @scalar_tanh
// CHECK: math.tanh %{{.*}} : f32
func.func @scalar_tanh(%x: f32) -> f32 {
  %0 = math.tanh %x : f32
  return %0 : f32
}

// Maxima, elementwise on scalars or vectors and across lanes, may ignore the sign of zero; other
// reductions are left as they are.
// CHECK-LABEL: func.func @vector_maxima
// CHECK: arith.maximumf %{{.*}}, %{{.*}} fastmath<nsz> : vector<16xf32>
// CHECK: vector.reduction <maximumf>, %{{.*}} fastmath<nsz> : vector<16xf32> into f32
// CHECK: vector.reduction <add>, %{{.*}} : vector<16xf32> into f32
// CHECK: arith.maximumf %{{.*}}, %{{.*}} fastmath<nsz> : f32
func.func @vector_maxima(%x: vector<16xf32>, %y: vector<16xf32>, %s: f32) -> (f32, f32, f32) {
  %0 = arith.maximumf %x, %y : vector<16xf32>
  %1 = vector.reduction <maximumf>, %0 : vector<16xf32> into f32
  %2 = vector.reduction <add>, %0 : vector<16xf32> into f32
  %3 = arith.maximumf %s, %1 : f32
  return %1, %2, %3 : f32, f32, f32
}
