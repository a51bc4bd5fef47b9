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
