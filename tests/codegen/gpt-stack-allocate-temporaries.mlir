// --gpt-stack-allocate-temporaries: small temporaries become 64-byte aligned stack buffers in the
// function's entry block, including those allocated in sequential loops (hoisted: one buffer for
// every iteration, or a slot per iteration of an scf.forall). Returned buffers, buffers handed to
// a loop or yielded out of an iteration and large ones stay on the heap.
// RUN: gpt-opt %s --gpt-stack-allocate-temporaries | FileCheck %s
// RUN: gpt-opt %s --gpt-stack-allocate-temporaries=max-buffer-bytes=64 | FileCheck %s --check-prefix=SMALL
// RUN: gpt-opt %s --gpt-stack-allocate-temporaries=max-frame-bytes=200 | FileCheck %s --check-prefix=FRAME

// CHECK-LABEL: func.func @temporaries
// The loop's temporary is hoisted to the top of the entry block.
// CHECK-NEXT: %[[INNER:.*]] = memref.alloca() {alignment = 64 : i64} : memref<2xf32>
// CHECK: %[[TMP:.*]] = memref.alloca() {alignment = 64 : i64} : memref<4x8xf32>
// CHECK: %[[VIEWED:.*]] = memref.alloca() {alignment = 64 : i64} : memref<32xf32>
// CHECK: %[[RET:.*]] = memref.alloc() : memref<8xf32>
// CHECK: %[[BIG:.*]] = memref.alloc() : memref<32768xf32>
// CHECK: %[[CARRIED:.*]] = memref.alloc() : memref<8xf32>
// CHECK: scf.for
// CHECK-NOT: memref.alloc
// CHECK: memref.store %{{.*}}, %[[INNER]]
// CHECK: return %[[RET]]
// SMALL-LABEL: func.func @temporaries
// SMALL: memref.alloca() {alignment = 64 : i64} : memref<2xf32>
// SMALL: memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
// FRAME-LABEL: func.func @temporaries
// FRAME: memref.alloca() {alignment = 64 : i64} : memref<2xf32>
// FRAME: memref.alloca() {alignment = 64 : i64} : memref<4x8xf32>
// FRAME: memref.alloc() : memref<32xf32>
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

// A buffer yielded out of its iteration is the next iteration's input: sharing one buffer
// between iterations would overwrite it.
// CHECK-LABEL: func.func @yielded
// CHECK-NOT: memref.alloca
// CHECK: scf.for
// CHECK: memref.alloc() : memref<4xf32>
func.func @yielded(%v: f32, %init: memref<4xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %last = scf.for %i = %c0 to %c4 step %c1 iter_args(%previous = %init) -> (memref<4xf32>) {
    %next = memref.alloc() : memref<4xf32>
    %x = memref.load %previous[%c0] : memref<4xf32>
    %y = arith.addf %x, %v : f32
    memref.store %y, %next[%c0] : memref<4xf32>
    scf.yield %next : memref<4xf32>
  }
  %r = memref.load %last[%c0] : memref<4xf32>
  return %r : f32
}

// The iterations of an scf.forall run at once: each gets a cache-line aligned slot of one stack
// buffer, viewed with the allocation's own type. Those of a sequential loop in a branch share one
// stack buffer. A forall whose trip count is not static keeps its buffers on the heap.
// CHECK-LABEL: func.func @parallel_and_branch
// CHECK-DAG: %[[SHARED:.*]] = memref.alloca() {alignment = 64 : i64} : memref<16xf32>
// CHECK-DAG: %[[SLOTS:.*]] = memref.alloca() {alignment = 64 : i64} : memref<256xi8>
// CHECK: scf.forall (%[[I:.*]]) in (4)
// CHECK: %[[OFFSET:.*]] = arith.muli %[[I]], %{{.*}} : index
// CHECK: %[[PRIVATE:.*]] = memref.view %[[SLOTS]][%[[OFFSET]]][] : memref<256xi8> to memref<8xf32>
// CHECK: memref.store %{{.*}}, %[[PRIVATE]]
// CHECK: scf.if
// CHECK-NOT: memref.alloc
// CHECK: memref.store %{{.*}}, %[[SHARED]]
// CHECK: scf.forall (%{{.*}}) in (%{{.*}})
// CHECK: memref.alloc() : memref<8xf32>
// CHECK: return
func.func @parallel_and_branch(%v: f32, %flag: i1, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.forall (%i) in (4) {
    %private = memref.alloc() : memref<8xf32>
    memref.store %v, %private[%c0] : memref<8xf32>
  }
  scf.if %flag {
    scf.for %i = %c0 to %c4 step %c1 {
      %shared = memref.alloc() : memref<16xf32>
      memref.store %v, %shared[%c0] : memref<16xf32>
    }
  }
  scf.forall (%i) in (%n) {
    %dynamic = memref.alloc() : memref<8xf32>
    memref.store %v, %dynamic[%c0] : memref<8xf32>
  }
  return
}

// A buffer whose size in bytes does not fit in int64 stays on the heap (the size once overflowed).
// CHECK-LABEL: func.func @huge_buffer
// CHECK: memref.alloc() : memref<9223372036854775807x32xf32>
func.func @huge_buffer(%v: f32) {
  %c0 = arith.constant 0 : index
  %0 = memref.alloc() : memref<9223372036854775807x32xf32>
  memref.store %v, %0[%c0, %c0] : memref<9223372036854775807x32xf32>
  memref.dealloc %0 : memref<9223372036854775807x32xf32>
  return
}

// Within max-frame-bytes, buffers allocated in loops take the frame first, smallest first: they
// would cost a malloc and free on every iteration, the entry block's one a call. In program order
// the entry block's buffer and the larger loop buffer would have taken this frame of 200 bytes.
// FRAME-LABEL: func.func @loops_first
// FRAME-DAG: memref.alloca() {alignment = 64 : i64} : memref<16xf32>
// FRAME-DAG: memref.alloca() {alignment = 64 : i64} : memref<32xf32>
// FRAME: memref.alloc() : memref<32xf32>
// FRAME: scf.for
// FRAME-NOT: memref.alloc
// FRAME: return
func.func @loops_first(%v: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %once = memref.alloc() : memref<32xf32>
  memref.store %v, %once[%c0] : memref<32xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    scf.for %j = %c0 to %c4 step %c1 {
      %larger = memref.alloc() : memref<32xf32>
      memref.store %v, %larger[%c0] : memref<32xf32>
    }
    %smaller = memref.alloc() : memref<16xf32>
    memref.store %v, %smaller[%c0] : memref<16xf32>
  }
  return
}
