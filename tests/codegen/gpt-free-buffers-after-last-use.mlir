// --gpt-free-buffers-after-last-use: a heap buffer's dealloc moves to right after the last op of
// its block that uses it or a view of it (a use inside a loop counts as the loop); a buffer whose
// address leaves as an integer, or allocated in another block than its dealloc, keeps it.
// RUN: gpt-opt %s --gpt-free-buffers-after-last-use | FileCheck %s

// CHECK-LABEL: func.func @sequential_temporaries
// CHECK: %[[A:.*]] = memref.alloc() : memref<64x128xf32>
// CHECK: linalg.fill {{.*}} outs(%[[A]]
// CHECK: %[[B:.*]] = memref.alloc() : memref<64x128xf32>
// CHECK: linalg.copy ins(%[[A]] {{.*}} outs(%[[B]]
// CHECK-NEXT: memref.dealloc %[[A]]
// CHECK: %[[C:.*]] = memref.alloc() : memref<64x128xf32>
// CHECK: linalg.copy ins(%[[B]] {{.*}} outs(%[[C]]
// CHECK-NEXT: memref.dealloc %[[B]]
// CHECK: linalg.copy ins(%[[C]] {{.*}} outs(%arg0
// CHECK-NEXT: memref.dealloc %[[C]]
// CHECK-NEXT: return
func.func @sequential_temporaries(%out: memref<64x128xf32>) {
  %cst = arith.constant 1.0 : f32
  %a = memref.alloc() : memref<64x128xf32>
  linalg.fill ins(%cst : f32) outs(%a : memref<64x128xf32>)
  %b = memref.alloc() : memref<64x128xf32>
  linalg.copy ins(%a : memref<64x128xf32>) outs(%b : memref<64x128xf32>)
  %c = memref.alloc() : memref<64x128xf32>
  linalg.copy ins(%b : memref<64x128xf32>) outs(%c : memref<64x128xf32>)
  linalg.copy ins(%c : memref<64x128xf32>) outs(%out : memref<64x128xf32>)
  memref.dealloc %a : memref<64x128xf32>
  memref.dealloc %b : memref<64x128xf32>
  memref.dealloc %c : memref<64x128xf32>
  return
}

// A view's uses are the buffer's, and so is a use inside a loop: the dealloc follows the loop.
// CHECK-LABEL: func.func @views_and_loops
// CHECK: %[[A:.*]] = memref.alloc() : memref<8x16xf32>
// CHECK: %[[FLAT:.*]] = memref.collapse_shape %[[A]]
// CHECK: scf.for
// CHECK: memref.load %[[FLAT]]
// CHECK: }
// CHECK-NEXT: memref.dealloc %[[A]]
// CHECK: linalg.fill
func.func @views_and_loops(%out: memref<128xf32>) {
  %cst = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %a = memref.alloc() : memref<8x16xf32>
  linalg.fill ins(%cst : f32) outs(%a : memref<8x16xf32>)
  %flat = memref.collapse_shape %a [[0, 1]] : memref<8x16xf32> into memref<128xf32>
  scf.for %i = %c0 to %c128 step %c1 {
    %v = memref.load %flat[%i] : memref<128xf32>
    memref.store %v, %out[%i] : memref<128xf32>
  }
  linalg.fill ins(%cst : f32) outs(%out : memref<128xf32>)
  memref.dealloc %a : memref<8x16xf32>
  return
}

// CHECK-LABEL: func.func @address_taken
// CHECK: memref.extract_aligned_pointer_as_index
// CHECK: linalg.fill
// CHECK-NEXT: memref.dealloc
// CHECK-NEXT: return
func.func @address_taken(%out: memref<4xf32>) -> index {
  %cst = arith.constant 0.0 : f32
  %a = memref.alloc() : memref<4xf32>
  %p = memref.extract_aligned_pointer_as_index %a : memref<4xf32> -> index
  linalg.fill ins(%cst : f32) outs(%out : memref<4xf32>)
  memref.dealloc %a : memref<4xf32>
  return %p : index
}

// A dealloc in another block than its alloc (a branch's) stays where the pipeline put it.
// CHECK-LABEL: func.func @dealloc_in_a_branch
// CHECK: scf.if
// CHECK-NEXT: linalg.fill
// CHECK-NEXT: memref.dealloc
func.func @dealloc_in_a_branch(%flag: i1, %out: memref<4xf32>) {
  %cst = arith.constant 0.0 : f32
  %a = memref.alloc() : memref<4xf32>
  linalg.copy ins(%out : memref<4xf32>) outs(%a : memref<4xf32>)
  scf.if %flag {
    linalg.fill ins(%cst : f32) outs(%out : memref<4xf32>)
    memref.dealloc %a : memref<4xf32>
  }
  return
}
