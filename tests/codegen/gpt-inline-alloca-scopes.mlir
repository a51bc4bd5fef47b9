// --gpt-inline-alloca-scopes: a memref.alloca_scope without a memref.alloca inside is inlined;
// one that allocates on the stack is kept.
// RUN: gpt-opt %s --gpt-inline-alloca-scopes | FileCheck %s

// CHECK-LABEL: func.func @no_stack_allocation
// CHECK-NOT: memref.alloca_scope
// CHECK: memref.alloc()
// CHECK: memref.store
// CHECK: memref.dealloc
func.func @no_stack_allocation(%v: f32) {
  memref.alloca_scope {
    %buffer = memref.alloc() : memref<4xf32>
    %c0 = arith.constant 0 : index
    memref.store %v, %buffer[%c0] : memref<4xf32>
    memref.dealloc %buffer : memref<4xf32>
  }
  return
}

// CHECK-LABEL: func.func @stack_allocation
// CHECK: memref.alloca_scope
// CHECK: memref.alloca()
func.func @stack_allocation(%v: f32) {
  memref.alloca_scope {
    %buffer = memref.alloca() : memref<4xf32>
    %c0 = arith.constant 0 : index
    memref.store %v, %buffer[%c0] : memref<4xf32>
  }
  return
}
