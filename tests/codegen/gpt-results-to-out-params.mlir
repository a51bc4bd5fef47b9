// --gpt-results-to-out-params: returned buffers become trailing arguments that callers allocate;
// a function writes straight into the caller's buffer, even through a reshape of its allocation.
// RUN: gpt-opt %s --gpt-results-to-out-params | FileCheck %s
// RUN: gpt-opt %s --gpt-results-to-out-params --gpt-stack-allocate-temporaries | FileCheck %s --check-prefix=STACK

// The allocation, made [1, 2, 32] and returned collapsed to [1, 64], becomes a view of the
// out-parameter: no allocation and no copy are left.
// CHECK-LABEL: func.func private @block(
// CHECK-SAME: %[[X:.*]]: memref<1x64xf32>, %[[OUT:.*]]: memref<1x64xf32>) {
// CHECK-NOT: memref.alloc
// CHECK: %[[VIEW:.*]] = memref.expand_shape %[[OUT]] {{\[\[}}0], [1, 2]] output_shape [1, 2, 32] : memref<1x64xf32> into memref<1x2x32xf32>
// CHECK-NOT: memref.alloc
// CHECK: memref.store %{{.*}}, %[[VIEW]]
// CHECK-NOT: memref.copy
// CHECK: return{{$}}
func.func private @block(%x: memref<1x64xf32>) -> memref<1x64xf32> {
  %c0 = arith.constant 0 : index
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<1x2x32xf32>
  %v = memref.load %x[%c0, %c0] : memref<1x64xf32>
  memref.store %v, %alloc[%c0, %c0, %c0] : memref<1x2x32xf32>
  %flat = memref.collapse_shape %alloc [[0], [1, 2]] : memref<1x2x32xf32> into memref<1x64xf32>
  return %flat : memref<1x64xf32>
}

// A returned argument view that is not an allocation of the function is copied out.
// CHECK-LABEL: func.func private @view_of_argument(
// CHECK-SAME: %[[A:.*]]: memref<2x32xf32>, %[[OUT2:.*]]: memref<64xf32>) {
// CHECK: %[[FLAT:.*]] = memref.collapse_shape %[[A]]
// CHECK: memref.copy %[[FLAT]], %[[OUT2]]
func.func private @view_of_argument(%a: memref<2x32xf32>) -> memref<64xf32> {
  %flat = memref.collapse_shape %a [[0, 1]] : memref<2x32xf32> into memref<64xf32>
  return %flat : memref<64xf32>
}

// Callers allocate the result and pass it; the entry point itself takes its result last and
// returns nothing. Its callees' buffers are temporaries that go on the stack.
// CHECK-LABEL: func.func @entry(
// CHECK-SAME: %[[IN:.*]]: memref<1x64xf32>, %[[RESULT:.*]]: memref<1x64xf32>) attributes {llvm.emit_c_interface} {
// CHECK: %[[HIDDEN:.*]] = memref.alloc() : memref<1x64xf32>
// CHECK: call @block(%[[IN]], %[[HIDDEN]]) : (memref<1x64xf32>, memref<1x64xf32>) -> ()
// CHECK: call @block(%[[HIDDEN]], %[[RESULT]]) : (memref<1x64xf32>, memref<1x64xf32>) -> ()
// CHECK: return{{$}}
// STACK-LABEL: func.func @entry(
// STACK: memref.alloca() {alignment = 64 : i64} : memref<1x64xf32>
// STACK-NOT: memref.alloc(
func.func @entry(%in: memref<1x64xf32>) -> memref<1x64xf32> attributes {llvm.emit_c_interface} {
  %h = call @block(%in) : (memref<1x64xf32>) -> memref<1x64xf32>
  %r = call @block(%h) : (memref<1x64xf32>) -> memref<1x64xf32>
  return %r : memref<1x64xf32>
}

// One buffer returned twice: the first out-parameter is the allocation itself, the second a
// copy of it (hoisting both into one allocation crashed upstream's pass).
// CHECK-LABEL: func.func private @returned_twice(
// CHECK-SAME: %[[FIRST:[a-z0-9]+]]: memref<4xf32>, %[[SECOND:[a-z0-9]+]]: memref<4xf32>) {
// CHECK-NOT: memref.alloc
// CHECK: memref.store %{{.*}}, %[[FIRST]]
// CHECK: memref.copy %[[FIRST]], %[[SECOND]]
// CHECK: return{{$}}
func.func private @returned_twice(%v: f32) -> (memref<4xf32>, memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4xf32>
  memref.store %v, %alloc[%c0] : memref<4xf32>
  return %alloc, %alloc : memref<4xf32>, memref<4xf32>
}
