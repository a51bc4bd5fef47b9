// --gpt-share-loops-dynamically: every OpenMP worksharing loop hands its iterations out on demand
// (schedule(dynamic)), so that a slower thread takes fewer of an op's pieces; a schedule already
// set is kept.
// RUN: gpt-opt %s --gpt-share-loops-dynamically | FileCheck %s

// CHECK-LABEL: func.func @pieces
// CHECK: omp.wsloop schedule(dynamic) {
// CHECK: omp.wsloop schedule(static) {
func.func @pieces(%buffer: memref<8xf32>, %v: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  omp.parallel {
    omp.wsloop {
      omp.loop_nest (%i) : index = (%c0) to (%c8) step (%c1) {
        memref.store %v, %buffer[%i] : memref<8xf32>
        omp.yield
      }
      omp.terminator
    }
    omp.wsloop schedule(static) {
      omp.loop_nest (%i) : index = (%c0) to (%c8) step (%c1) {
        memref.store %v, %buffer[%i] : memref<8xf32>
        omp.yield
      }
      omp.terminator
    }
    omp.terminator
  }
  return
}
