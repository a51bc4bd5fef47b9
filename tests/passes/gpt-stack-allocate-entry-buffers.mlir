// --gpt-stack-allocate-entry-buffers: small temporaries of a function's entry block become
// stack buffers; returned buffers, buffers handed to a loop, large ones and ones inside loops
// stay on the heap.
// RUN: gpt-opt %s --gpt-stack-allocate-entry-buffers | FileCheck %s
// RUN: gpt-opt %s --gpt-stack-allocate-entry-buffers=max-buffer-bytes=64 | FileCheck %s --check-prefix=SMALL

// CHECK-LABEL: func.func @temporaries
// CHECK: %[[TMP:.*]] = memref.alloca() {alignment = 64 : i64} : memref<4x8xf32>
// CHECK: %[[VIEWED:.*]] = memref.alloca() : memref<32xf32>
// CHECK: %[[RET:.*]] = memref.alloc() : memref<8xf32>
// CHECK: %[[BIG:.*]] = memref.alloc() : memref<32768xf32>
// CHECK: %[[CARRIED:.*]] = memref.alloc() : memref<8xf32>
// CHECK: scf.for
// CHECK: memref.alloc() : memref<2xf32>
// CHECK: return %[[RET]]
// SMALL-LABEL: func.func @temporaries
// SMALL: memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
func.func @temporaries(%v: f32) -> memref<8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %tmp = memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
  memref.store %v, %tmp[%c0, %c0] : memref<4x8xf32>
  %viewed = memref.alloc() : memref<32xf32>
  %shaped = memref.expand_shape %viewed [[0, 1]] output_shape [4, 8] : memref<32xf32> into memref<4x8xf32>
  memref.store %v, %shaped[%c0, %c0] : memref<4x8xf32>
  %ret = memref.alloc() : memref<8xf32>
  memref.store %v, %ret[%c0] : memref<8xf32>
  %big = memref.alloc() : memref<32768xf32>
  memref.store %v, %big[%c0] : memref<32768xf32>
  %carried = memref.alloc() : memref<8xf32>
  %out = scf.for %i = %c0 to %c4 step %c1 iter_args(%buffer = %carried) -> (memref<8xf32>) {
    %inner = memref.alloc() : memref<2xf32>
    memref.store %v, %inner[%c0] : memref<2xf32>
    scf.yield %buffer : memref<8xf32>
  }
  memref.store %v, %out[%c0] : memref<8xf32>
  return %ret : memref<8xf32>
}
