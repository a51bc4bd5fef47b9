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
// too. Broadcasts from sources of different shapes, and an operand that is neither a broadcast
// nor a splat, are left alone.
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

// A register tile's column values: a [32] vector of a K-quant's scale-min bits broadcast to the
// tile's 4 rows, its min (bits 8-15) decoded and converted once on the [32] vector, then
// broadcast; without the patterns, once per row on the [4, 32] vector.
// CHECK-LABEL: func.func @column_values
// CHECK-SAME: (%[[BITS:.*]]: vector<32xi32>, %[[ROWS:.*]]: vector<4x32xf32>)
// CHECK: %[[SHIFT:.*]] = arith.constant dense<8> : vector<32xi32>
// CHECK: %[[M:.*]] = arith.shrui %[[BITS]], %[[SHIFT]] : vector<32xi32>
// CHECK: %[[F:.*]] = arith.uitofp %[[M]] : vector<32xi32> to vector<32xf32>
// CHECK: %[[B:.*]] = vector.broadcast %[[F]] : vector<32xf32> to vector<4x32xf32>
// CHECK: arith.mulf %[[B]], %[[ROWS]] : vector<4x32xf32>
// PLAIN-LABEL: func.func @column_values
// PLAIN: arith.shrui %{{.*}}, %{{.*}} : vector<4x32xi32>
// PLAIN: arith.uitofp %{{.*}} : vector<4x32xi32> to vector<4x32xf32>
func.func @column_values(%bits: vector<32xi32>, %rows: vector<4x32xf32>) -> vector<4x32xf32> {
  %c8 = arith.constant dense<8> : vector<4x32xi32>
  %b = vector.broadcast %bits : vector<32xi32> to vector<4x32xi32>
  %m = arith.shrui %b, %c8 : vector<4x32xi32>
  %f = arith.uitofp %m : vector<4x32xi32> to vector<4x32xf32>
  %p = arith.mulf %f, %rows : vector<4x32xf32>
  return %p : vector<4x32xf32>
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
