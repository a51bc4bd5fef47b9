// --gpt-bare-pointer-calls: a private function called directly, whose memrefs have static shapes
// and identity layouts, is marked llvm.bareptr; convert-func-to-llvm then passes each memref as one
// pointer, at the call and in the callee alike. Public functions, functions with a dynamic or
// strided memref, and functions whose address is taken keep their descriptors.
// RUN: gpt-opt %s --gpt-bare-pointer-calls | FileCheck %s
// RUN: gpt-opt %s --gpt-bare-pointer-calls --finalize-memref-to-llvm --convert-func-to-llvm --reconcile-unrealized-casts | FileCheck %s --check-prefix=LLVM

// CHECK-LABEL: func.func private @layer(
// CHECK-SAME: llvm.bareptr
// LLVM-LABEL: llvm.func @layer(
// LLVM-SAME: %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: i64)
func.func private @layer(%x: memref<4x8xf32>, %w: memref<8xf32>, %i: index) {
  %c0 = arith.constant 0 : index
  %v = memref.load %w[%i] : memref<8xf32>
  memref.store %v, %x[%c0, %i] : memref<4x8xf32>
  return
}

// CHECK-LABEL: func.func private @dynamic(
// CHECK-NOT: llvm.bareptr
// CHECK-SAME: {
func.func private @dynamic(%x: memref<?xf32>) {
  return
}

// CHECK-LABEL: func.func private @strided(
// CHECK-NOT: llvm.bareptr
// CHECK-SAME: {
func.func private @strided(%x: memref<4xf32, strided<[2]>>) {
  return
}

// CHECK-LABEL: func.func private @address_taken(
// CHECK-NOT: llvm.bareptr
// CHECK-SAME: {
func.func private @address_taken(%x: memref<4xf32>) {
  return
}

// The entry point keeps its descriptors (the runtime fills them); its call to @layer passes the
// two memrefs' aligned pointers.
// CHECK-LABEL: func.func @entry(
// CHECK-NOT: llvm.bareptr
// LLVM-LABEL: llvm.func @entry(
// LLVM-SAME: %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64,
// LLVM: llvm.call @layer(%{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, !llvm.ptr, i64) -> ()
func.func @entry(%x: memref<4x8xf32>, %w: memref<8xf32>, %i: index, %y: memref<4xf32>) {
  call @layer(%x, %w, %i) : (memref<4x8xf32>, memref<8xf32>, index) -> ()
  %f = func.constant @address_taken : (memref<4xf32>) -> ()
  call_indirect %f(%y) : (memref<4xf32>) -> ()
  return
}
