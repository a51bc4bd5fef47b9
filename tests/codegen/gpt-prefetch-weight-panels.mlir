// --gpt-prefetch-weight-panels: the K loop of a packed matmul with 2 to 4 row tiles prefetches
// the next weight panel, one cache line per step: tile t fetches lines t * K .. t * K + K - 1 (row
// line / 2, lanes 16 * (line % 2) of a [K, 32] f32 panel: two lines per row), so the first two
// tiles fetch it all. One tile (decode) and many (prefill) are left alone.
// RUN: gpt-opt %s --split-input-file --gpt-prefetch-weight-panels --canonicalize | FileCheck %s
// RUN: gpt-opt %s --split-input-file --gpt-prefetch-weight-panels=min-tiles=1 --canonicalize \
// RUN:   | FileCheck %s --check-prefix=ONE

// Two tiles, two lines per panel row: every step of both tiles prefetches, unconditionally.
// CHECK-LABEL: func.func @two_tiles
// CHECK-SAME: %{{.*}}: memref<16x64xf32>, %[[W:[a-z0-9]+]]: memref<4x64x32xf32>
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG: %[[C64:.*]] = arith.constant 64 : index
// CHECK-DAG: %[[C3:.*]] = arith.constant 3 : index
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK: scf.for %[[P:.*]] = %{{.*}} to %{{.*}} step
// CHECK:   scf.for %[[M:.*]] = %{{.*}} to %{{.*}} step
// CHECK:     %[[TILE:.*]] = arith.divui %[[M]], %[[C8]] : index
// CHECK:     %[[FIRST:.*]] = arith.muli %[[TILE]], %[[C64]] : index
// CHECK:     %[[AFTER:.*]] = arith.addi %[[P]], %{{.*}} : index
// CHECK:     %[[NEXT:.*]] = arith.minui %[[AFTER]], %[[C3]] : index
// CHECK:     scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK-NEXT:  %[[LINE:.*]] = arith.addi %[[FIRST]], %[[K]] : index
// CHECK-NEXT:  %[[ROW:.*]] = arith.divui %[[LINE]], %[[C2]] : index
// CHECK-NEXT:  %[[HALF:.*]] = arith.remui %[[LINE]], %[[C2]] : index
// CHECK-NEXT:  %[[COL:.*]] = arith.muli %[[HALF]], %[[C16]] : index
// CHECK-NEXT:  memref.prefetch %[[W]][%[[NEXT]], %[[ROW]], %[[COL]]], read, locality<2>, data : memref<4x64x32xf32>
// CHECK-NOT:   scf.if
// CHECK:       vector.transfer_read %[[W]][%[[P]], %[[K]], %{{.*}}]
func.func @two_tiles(%a: memref<16x64xf32>, %w: memref<4x64x32xf32>, %out: memref<16x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %init = arith.constant dense<0.0> : vector<32xf32>
  scf.for %p = %c0 to %c4 step %c1 {
    scf.for %m = %c0 to %c16 step %c8 {
      %acc = scf.for %k = %c0 to %c64 step %c1 iter_args(%sum = %init) -> (vector<32xf32>) {
        %x = memref.load %a[%m, %k] : memref<16x64xf32>
        %b = vector.transfer_read %w[%p, %k, %c0], %zero {in_bounds = [true]} : memref<4x64x32xf32>, vector<32xf32>
        %s = vector.outerproduct %b, %x, %sum {kind = #vector.kind<add>} : vector<32xf32>, f32
        scf.yield %s : vector<32xf32>
      }
      %col = arith.muli %p, %c8 : index
      vector.transfer_write %acc, %out[%m, %col] {in_bounds = [true]} : vector<32xf32>, memref<16x128xf32>
    }
  }
  return
}

// -----

// Four tiles: the first two fetch the whole next panel, the other two nothing.
// CHECK-LABEL: func.func @four_tiles
// CHECK:     %[[TILE:.*]] = arith.divui
// CHECK:     %[[FETCHES:.*]] = arith.cmpi ult, %[[TILE]], %[[C2:.*]] : index
// CHECK:     scf.for
// CHECK:       scf.if %[[FETCHES]] {
// CHECK:         memref.prefetch %{{.*}}, read, locality<2>, data : memref<4x64x32xf32>
// CHECK-NEXT:  }
// CHECK:       vector.transfer_read
func.func @four_tiles(%a: memref<32x64xf32>, %w: memref<4x64x32xf32>, %out: memref<32x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %init = arith.constant dense<0.0> : vector<32xf32>
  scf.for %p = %c0 to %c4 step %c1 {
    scf.for %m = %c0 to %c16 step %c8 {
      %acc = scf.for %k = %c0 to %c64 step %c1 iter_args(%sum = %init) -> (vector<32xf32>) {
        %x = memref.load %a[%m, %k] : memref<32x64xf32>
        %b = vector.transfer_read %w[%p, %k, %c0], %zero {in_bounds = [true]} : memref<4x64x32xf32>, vector<32xf32>
        %s = vector.outerproduct %b, %x, %sum {kind = #vector.kind<add>} : vector<32xf32>, f32
        scf.yield %s : vector<32xf32>
      }
      %col = arith.muli %p, %c8 : index
      vector.transfer_write %acc, %out[%m, %col] {in_bounds = [true]} : vector<32xf32>, memref<32x128xf32>
    }
  }
  return
}

// -----

// One tile of 8 rows (and decode's one row): left alone by default (decode streams its weights
// faster without). With min-tiles=1 its one tile fetches the whole next panel, both lines of row
// k at step k.
// CHECK-LABEL: func.func @one_tile
// CHECK-NOT: memref.prefetch
// ONE-LABEL: func.func @one_tile
// ONE: scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// ONE-COUNT-2: memref.prefetch %{{.*}}, read, locality<2>, data : memref<4x64x32xf32>
// ONE-NOT: memref.prefetch
// ONE: vector.transfer_read
func.func @one_tile(%a: memref<8x64xf32>, %w: memref<4x64x32xf32>, %out: memref<8x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %init = arith.constant dense<0.0> : vector<32xf32>
  scf.for %p = %c0 to %c4 step %c1 {
    scf.for %m = %c0 to %c16 step %c8 {
      %acc = scf.for %k = %c0 to %c64 step %c1 iter_args(%sum = %init) -> (vector<32xf32>) {
        %x = memref.load %a[%m, %k] : memref<8x64xf32>
        %b = vector.transfer_read %w[%p, %k, %c0], %zero {in_bounds = [true]} : memref<4x64x32xf32>, vector<32xf32>
        %s = vector.outerproduct %b, %x, %sum {kind = #vector.kind<add>} : vector<32xf32>, f32
        scf.yield %s : vector<32xf32>
      }
      %col = arith.muli %p, %c8 : index
      vector.transfer_write %acc, %out[%m, %col] {in_bounds = [true]} : vector<32xf32>, memref<8x128xf32>
    }
  }
  return
}

// -----

// Sixteen tiles (a 128-token prefill): each panel is reused long enough; left alone.
// CHECK-LABEL: func.func @sixteen_tiles
// CHECK-NOT: memref.prefetch
func.func @sixteen_tiles(%a: memref<128x64xf32>, %w: memref<4x64x32xf32>, %out: memref<128x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 128 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %init = arith.constant dense<0.0> : vector<32xf32>
  scf.for %p = %c0 to %c4 step %c1 {
    scf.for %m = %c0 to %c16 step %c8 {
      %acc = scf.for %k = %c0 to %c64 step %c1 iter_args(%sum = %init) -> (vector<32xf32>) {
        %x = memref.load %a[%m, %k] : memref<128x64xf32>
        %b = vector.transfer_read %w[%p, %k, %c0], %zero {in_bounds = [true]} : memref<4x64x32xf32>, vector<32xf32>
        %s = vector.outerproduct %b, %x, %sum {kind = #vector.kind<add>} : vector<32xf32>, f32
        scf.yield %s : vector<32xf32>
      }
      %col = arith.muli %p, %c8 : index
      vector.transfer_write %acc, %out[%m, %col] {in_bounds = [true]} : vector<32xf32>, memref<128x128xf32>
    }
  }
  return
}

// -----

// The K loop's parent runs over panels (its index moves the weight read), not over row tiles: a
// single tile, left alone, however few panels there are.
// CHECK-LABEL: func.func @panel_loop_parent
// CHECK-NOT: memref.prefetch
func.func @panel_loop_parent(%a: memref<1x64xf32>, %w: memref<2x64x32xf32>, %out: memref<1x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %init = arith.constant dense<0.0> : vector<32xf32>
  scf.for %p = %c0 to %c2 step %c1 {
    %acc = scf.for %k = %c0 to %c64 step %c1 iter_args(%sum = %init) -> (vector<32xf32>) {
      %x = memref.load %a[%c0, %k] : memref<1x64xf32>
      %b = vector.transfer_read %w[%p, %k, %c0], %zero {in_bounds = [true]} : memref<2x64x32xf32>, vector<32xf32>
      %s = vector.outerproduct %b, %x, %sum {kind = #vector.kind<add>} : vector<32xf32>, f32
      scf.yield %s : vector<32xf32>
    }
    %col = arith.muli %p, %c32 : index
    vector.transfer_write %acc, %out[%c0, %col] {in_bounds = [true]} : vector<32xf32>, memref<1x64xf32>
  }
  return
}
