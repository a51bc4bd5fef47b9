// RUN: gpt-opt %s --transform-interpreter | FileCheck %s
// RUN: gpt-opt %s --transform-interpreter=entry-point=without_splats | FileCheck %s --check-prefix=PLAIN

// transform.apply_patterns.gpt.elementwise_on_splats: RMSNorm's normalization as the vectorizer and
// the transfer lowering leave it, a row's statistic read along the row (a vector<1xf32> broadcast
// to [32, 1] and transposed), then reduction_to_contract's reordering. With the patterns the
// scale, the epsilon and the rsqrt are computed once on the vector<1xf32> and broadcast along the
// row; without them they run on the [32, 1] vector, which lowers to 32 scalar ops per step.
// CHECK-LABEL: func.func @row_statistic
// CHECK-SAME: (%[[S:.*]]: vector<1xf32>, %[[X:.*]]: vector<1x32xf32>)
// CHECK-DAG: %[[SCALE:.*]] = arith.constant dense<4.8828125E-4> : vector<1xf32>
// CHECK-DAG: %[[EPS:.*]] = arith.constant dense<9.99999974E-6> : vector<1xf32>
// CHECK: %[[M:.*]] = arith.mulf %[[S]], %[[SCALE]] : vector<1xf32>
// CHECK: %[[A:.*]] = arith.addf %[[M]], %[[EPS]] : vector<1xf32>
// CHECK: %[[R:.*]] = math.rsqrt %[[A]] : vector<1xf32>
// CHECK: %[[B:.*]] = vector.broadcast %[[R]] : vector<1xf32> to vector<1x32xf32>
// CHECK: %[[N:.*]] = arith.mulf %[[X]], %[[B]] : vector<1x32xf32>
// CHECK: return %[[N]]
// CHECK-NOT: vector.transpose
// PLAIN-LABEL: func.func @row_statistic
// PLAIN: math.rsqrt %{{.*}} : vector<32x1xf32>
// PLAIN: vector.transpose
func.func @row_statistic(%s: vector<1xf32>, %x: vector<1x32xf32>) -> vector<1x32xf32> {
  %scale = arith.constant dense<4.8828125E-4> : vector<1x32xf32>
  %eps = arith.constant dense<9.99999974E-6> : vector<1x32xf32>
  %b = vector.broadcast %s : vector<1xf32> to vector<32x1xf32>
  %t = vector.transpose %b, [1, 0] : vector<32x1xf32> to vector<1x32xf32>
  %m = arith.mulf %t, %scale : vector<1x32xf32>
  %a = arith.addf %m, %eps : vector<1x32xf32>
  %r = math.rsqrt %a : vector<1x32xf32>
  %n = arith.mulf %x, %r : vector<1x32xf32>
  return %n : vector<1x32xf32>
}

// A compare's result takes the compare's element type; a select of two broadcasts and a splat
// too. A broadcast of more than one element, and an operand that is neither a broadcast nor a
// splat, are left alone.
// CHECK-LABEL: func.func @kinds
// CHECK: %[[C:.*]] = arith.cmpf ogt, %{{.*}}, %{{.*}} : vector<1xf32>
// CHECK: %[[SEL:.*]] = arith.select %[[C]], %{{.*}}, %{{.*}} : vector<1xi1>, vector<1xf32>
// CHECK: vector.broadcast %[[SEL]] : vector<1xf32> to vector<8x4xf32>
// CHECK: arith.addf %{{.*}}, %{{.*}} : vector<8x4xf32>
// CHECK: arith.addf %{{.*}}, %{{.*}} : vector<8x4xf32>
func.func @kinds(%a: vector<1xf32>, %b: vector<1xf32>, %wide: vector<4xf32>, %v: vector<8x4xf32>)
    -> (vector<8x4xf32>, vector<8x4xf32>, vector<8x4xf32>) {
  %zero = arith.constant dense<0.0> : vector<8x4xf32>
  %ba = vector.broadcast %a : vector<1xf32> to vector<8x4xf32>
  %bb = vector.broadcast %b : vector<1xf32> to vector<8x4xf32>
  %c = arith.cmpf ogt, %ba, %bb : vector<8x4xf32>
  %sel = arith.select %c, %ba, %zero : vector<8x4xi1>, vector<8x4xf32>
  %bw = vector.broadcast %wide : vector<4xf32> to vector<8x4xf32>
  %w = arith.addf %bw, %bb : vector<8x4xf32>
  %u = arith.addf %ba, %v : vector<8x4xf32>
  return %sel, %w, %u : vector<8x4xf32>, vector<8x4xf32>, vector<8x4xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %funcs = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %funcs {
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.gpt.elementwise_on_splats
    } : !transform.any_op
    transform.yield
  }
  transform.named_sequence @without_splats(%root: !transform.any_op {transform.readonly}) {
    %funcs = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %funcs {
      transform.apply_patterns.vector.reduction_to_contract
    } : !transform.any_op
    transform.yield
  }
}
