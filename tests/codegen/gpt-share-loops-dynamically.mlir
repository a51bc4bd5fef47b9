// --gpt-share-loops-dynamically: every OpenMP worksharing loop hands its iterations out on demand,
// each thread taking the next iteration number from a counter (an atomic add) that is zeroed
// before the region forks, so that a slower thread takes fewer of an op's pieces. A loop with a
// schedule of its own keeps it; one the counter cannot serve gets libomp's schedule(dynamic).
// RUN: gpt-opt %s --gpt-share-loops-dynamically | FileCheck %s

// One loop: the counter is a 64-byte aligned stack slot in the entry block, zeroed before the
// fork even when the region sits in a loop; the region's end is the loop's barrier.
// CHECK-LABEL: func.func @pieces
// CHECK-DAG:     %[[COUNTER:.*]] = memref.alloca() {alignment = 64 : i64} : memref<i64>
// CHECK:         scf.for
// CHECK:           memref.store %{{.*}}, %[[COUNTER]][] : memref<i64>
// CHECK-NEXT:      omp.parallel {
// CHECK:             scf.while : () -> i64 {
// CHECK:               %[[TAKEN:.*]] = memref.atomic_rmw addi %{{.*}}, %[[COUNTER]][] : (i64, memref<i64>) -> i64
// CHECK:               %[[MORE:.*]] = arith.cmpi slt, %[[TAKEN]], %{{.*}} : i64
// CHECK:               scf.condition(%[[MORE]]) %[[TAKEN]] : i64
// CHECK:             } do {
// CHECK:             ^bb0(%[[N:.*]]: i64):
// CHECK:               %[[I:.*]] = arith.index_cast %[[N]] : i64 to index
// CHECK:               %[[OFFSET:.*]] = arith.muli %[[I]], %{{.*}} : index
// CHECK:               %[[IV:.*]] = arith.addi %{{.*}}, %[[OFFSET]] : index
// CHECK:               memref.store %{{.*}}, %{{.*}}[%[[IV]]] : memref<8xf32>
// CHECK:               scf.yield
// CHECK:             }
// CHECK-NOT:         omp.barrier
// CHECK-NOT:         omp.wsloop
// CHECK:             omp.terminator
func.func @pieces(%buffer: memref<8xf32>, %v: f32, %rounds: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  scf.for %round = %c0 to %rounds step %c1 {
    omp.parallel {
      omp.wsloop {
        omp.loop_nest (%i) : index = (%c0) to (%c8) step (%c1) {
          memref.store %v, %buffer[%i] : memref<8xf32>
          omp.yield
        }
        omp.terminator
      }
      omp.terminator
    }
  }
  return
}

// Two loops in one region: a counter each, the first followed by the barrier its end implied;
// a nest of two loops counts their 2 x 3 iterations, the inner varying fastest.
// CHECK-LABEL: func.func @two_loops
// CHECK-DAG:     %[[FIRST:.*]] = memref.alloca() {alignment = 64 : i64} : memref<i64>
// CHECK-DAG:     %[[SECOND:.*]] = memref.alloca() {alignment = 64 : i64} : memref<i64>
// CHECK:         omp.parallel {
// CHECK:           scf.while
// CHECK:             memref.atomic_rmw addi %{{.*}}, %{{.*}}[] : (i64, memref<i64>) -> i64
// CHECK:           omp.barrier
// CHECK:           scf.while
// CHECK:             memref.atomic_rmw addi %{{.*}}, %{{.*}}[] : (i64, memref<i64>) -> i64
// CHECK:           } do {
// CHECK:             %[[N:.*]] = arith.index_cast
// CHECK:             %[[J:.*]] = arith.remui %[[N]], %[[TRIPS:.*]] : index
// CHECK:             %[[OUTER:.*]] = arith.divui %[[N]], %[[TRIPS]] : index
// CHECK:             memref.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<2x3xf32>
// CHECK-NOT:       omp.barrier
// CHECK:           omp.terminator
func.func @two_loops(%a: memref<8xf32>, %b: memref<2x3xf32>, %v: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c8 = arith.constant 8 : index
  omp.parallel {
    omp.wsloop {
      omp.loop_nest (%i) : index = (%c0) to (%c8) step (%c1) {
        memref.store %v, %a[%i] : memref<8xf32>
        omp.yield
      }
      omp.terminator
    }
    omp.wsloop {
      omp.loop_nest (%i, %j) : index = (%c0, %c0) to (%c2, %c3) step (%c1, %c1) {
        memref.store %v, %b[%i, %j] : memref<2x3xf32>
        omp.yield
      }
      omp.terminator
    }
    omp.terminator
  }
  return
}

// A schedule chosen on purpose stays libomp's.
// CHECK-LABEL: func.func @scheduled
// CHECK-NOT:     memref.atomic_rmw
// CHECK:         omp.wsloop schedule(static) {
func.func @scheduled(%buffer: memref<8xf32>, %v: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  omp.parallel {
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

// A region nested in another: the counter would be reset by each outer thread, so the loop gets
// libomp's dynamic schedule instead.
// CHECK-LABEL: func.func @nested
// CHECK-NOT:     memref.atomic_rmw
// CHECK:         omp.wsloop schedule(dynamic) {
func.func @nested(%buffer: memref<8xf32>, %v: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  omp.parallel {
    omp.parallel {
      omp.wsloop {
        omp.loop_nest (%i) : index = (%c0) to (%c8) step (%c1) {
          memref.store %v, %buffer[%i] : memref<8xf32>
          omp.yield
        }
        omp.terminator
      }
      omp.terminator
    }
    omp.terminator
  }
  return
}
