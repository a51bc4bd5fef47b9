// RUN: gpt-opt %s --gpt-narrow-parallel-captures | FileCheck %s

// A region that reads a memref descriptor's aligned pointer and a size: both reads move before
// the fork and fold through the insertvalues (the pointer argument, the constant 64), the
// constants it uses are cloned into it, and the descriptor, which nothing reads any more, is gone.
// CHECK-LABEL: llvm.func @reads_fields
// CHECK-SAME: (%[[P:.*]]: !llvm.ptr, %[[V:.*]]: f32)
// CHECK-NEXT: omp.parallel {
// CHECK-DAG: %[[ONE:.*]] = llvm.mlir.constant(1 : i64) : i64
// CHECK-DAG: %[[SIZE:.*]] = llvm.mlir.constant(64 : index) : i64
// CHECK-NOT: llvm.extractvalue
// CHECK: %[[LAST:.*]] = llvm.sub %[[SIZE]], %[[ONE]] : i64
// CHECK: %[[AT:.*]] = llvm.getelementptr %[[P]][%[[LAST]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK: llvm.store %[[V]], %[[AT]] : f32, !llvm.ptr
// CHECK: omp.terminator
// CHECK-LABEL: llvm.func @argument_descriptor
llvm.func @reads_fields(%p: !llvm.ptr, %v: f32) {
  %undef = llvm.mlir.undef : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
  %c0 = llvm.mlir.constant(0 : index) : i64
  %c1 = llvm.mlir.constant(1 : i64) : i64
  %c64 = llvm.mlir.constant(64 : index) : i64
  %d0 = llvm.insertvalue %p, %undef[0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
  %d1 = llvm.insertvalue %p, %d0[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
  %d2 = llvm.insertvalue %c0, %d1[2] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
  %d3 = llvm.insertvalue %c64, %d2[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
  %d = llvm.insertvalue %c1, %d3[4, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
  omp.parallel {
    %aligned = llvm.extractvalue %d[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %size = llvm.extractvalue %d[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %last = llvm.sub %size, %c1 : i64
    %at = llvm.getelementptr %aligned[%last] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %v, %at : f32, !llvm.ptr
    omp.terminator
  }
  llvm.return
}

// A descriptor that is an argument (the entry's): the region's reads of it move before the fork
// as they are, once per field however often the region reads it, and the region captures the
// pointer alone.
// CHECK: %[[ALIGNED:.*]] = llvm.extractvalue %{{.*}}[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
// CHECK-NOT: llvm.extractvalue
// CHECK: omp.parallel {
// CHECK-NOT: llvm.extractvalue
// CHECK: llvm.load %[[ALIGNED]] : !llvm.ptr -> f32
// CHECK: llvm.store %{{.*}}, %[[ALIGNED]] : f32, !llvm.ptr
llvm.func @argument_descriptor(%d: !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>) {
  omp.parallel {
    %a = llvm.extractvalue %d[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %x = llvm.load %a : !llvm.ptr -> f32
    %b = llvm.extractvalue %d[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    llvm.store %x, %b : f32, !llvm.ptr
    omp.terminator
  }
  llvm.return
}

// Outside a parallel region nothing moves.
// CHECK-LABEL: llvm.func @no_region
// CHECK: llvm.extractvalue %{{.*}}[1]
// CHECK: llvm.return
llvm.func @no_region(%d: !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>) -> !llvm.ptr {
  %a = llvm.extractvalue %d[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
  llvm.return %a : !llvm.ptr
}
