// --gpt-prefetch-decode-lanes: a decode step's two-panel read of quantized weight lanes
// (vector<2x32xi32> over the panel and the lane columns) in a loop over blocks prefetches the same
// lanes bytes-ahead on: one prefetch per cache line (32 i32 = two lines) in each of its two panels,
// at the loop's index plus ceil(bytes-ahead / the bytes of one step); a few-row tile's one-panel
// read likewise, in its one panel, where at most 4 row tiles read it. The default takes the
// module's gpt.target's choice: 1 KiB on sapphirerapids and CPUs with AMX, none on znver4 or without a target.
// RUN: gpt-opt %s --split-input-file --gpt-prefetch-decode-lanes=bytes-ahead=1024 --canonicalize | FileCheck %s
// RUN: gpt-opt %s --split-input-file --gpt-prefetch-decode-lanes | FileCheck %s --check-prefix=TARGET

#lanes = affine_map<(d0, d1, d2, d3, d4) -> (d0, d4)>

// 512 bytes a step (4 lanes of 32 i32): 1 KiB ahead is two steps on.
// CHECK-LABEL: func.func @q4_k_lanes
// CHECK-SAME: %[[W:[a-z0-9]+]]: memref<16x8x8x4x32xi32>, %[[P:[a-z0-9]+]]: index, %[[B:[a-z0-9]+]]: index
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : index
// CHECK-DAG: %[[C3:.*]] = arith.constant 3 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK: scf.for %[[S:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT: %[[AHEAD:.*]] = arith.addi %[[S]], %[[C2]] : index
// CHECK-NEXT: memref.prefetch %[[W]][%[[P]], %[[B]], %[[AHEAD]], %[[C3]], %[[C0]]], read, locality<3>, data
// CHECK-NEXT: memref.prefetch %[[W]][%[[P]], %[[B]], %[[AHEAD]], %[[C3]], %[[C16]]], read, locality<3>, data
// CHECK-NEXT: %[[NEXT:.*]] = arith.addi %[[P]], %[[C1]] : index
// CHECK-NEXT: memref.prefetch %[[W]][%[[NEXT]], %[[B]], %[[AHEAD]], %[[C3]], %[[C0]]], read, locality<3>, data
// CHECK-NEXT: memref.prefetch %[[W]][%[[NEXT]], %[[B]], %[[AHEAD]], %[[C3]], %[[C16]]], read, locality<3>, data
// CHECK-NEXT: vector.transfer_read %[[W]][%[[P]], %[[B]], %[[S]], %[[C3]], %[[C0]]]
// CHECK-NOT: memref.prefetch
// TARGET-LABEL: func.func @q4_k_lanes
// TARGET: memref.prefetch
// TARGET-COUNT-3: memref.prefetch
// TARGET-NOT: memref.prefetch
module attributes {gpt.target = {cpu = "sapphirerapids", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64, features = ["avx512f", "avx512bw", "avx512vnni"]}} {
  func.func @q4_k_lanes(%w: memref<16x8x8x4x32xi32>, %p: index, %b: index) -> vector<2x32xi32> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c8 = arith.constant 8 : index
    %z = arith.constant 0 : i32
    %init = arith.constant dense<0> : vector<2x32xi32>
    %sum = scf.for %s = %c0 to %c8 step %c1 iter_args(%acc = %init) -> (vector<2x32xi32>) {
      %l = vector.transfer_read %w[%p, %b, %s, %c3, %c0], %z {in_bounds = [true, true], permutation_map = #lanes}
          : memref<16x8x8x4x32xi32>, vector<2x32xi32>
      %next = arith.addi %acc, %l : vector<2x32xi32>
      scf.yield %next : vector<2x32xi32>
    }
    return %sum : vector<2x32xi32>
  }
}

// -----

// znver4 chooses none; a read of f32 is not a lane read, nor one panel of bytes (a q8_0 KV cache's
// rows, which attention reads in the same form as a few-row tile reads its lane words).
// CHECK-LABEL: func.func @not_lanes
// CHECK-NOT: memref.prefetch
// TARGET-LABEL: func.func @not_lanes
// TARGET-NOT: memref.prefetch
#two_panels = affine_map<(d0, d1, d2) -> (d0, d2)>
#cache_row = affine_map<(d0, d1, d2) -> (d2)>
module attributes {gpt.target = {cpu = "znver4", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64, features = ["avx512f", "avx512bw", "avx512vnni"]}} {
  func.func @not_lanes(%f: memref<16x8x32xf32>, %kv: memref<16x8x64xi8>, %p: index) -> (vector<2x32xf32>, vector<64xi8>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %zf = arith.constant 0.0 : f32
    %zb = arith.constant 0 : i8
    %initf = arith.constant dense<0.0> : vector<2x32xf32>
    %initb = arith.constant dense<0> : vector<64xi8>
    %sums:2 = scf.for %k = %c0 to %c8 step %c1 iter_args(%accf = %initf, %accb = %initb) -> (vector<2x32xf32>, vector<64xi8>) {
      %lf = vector.transfer_read %f[%p, %k, %c0], %zf {in_bounds = [true, true], permutation_map = #two_panels}
          : memref<16x8x32xf32>, vector<2x32xf32>
      %row = vector.transfer_read %kv[%p, %k, %c0], %zb {in_bounds = [true], permutation_map = #cache_row}
          : memref<16x8x64xi8>, vector<64xi8>
      %nextf = arith.addf %accf, %lf : vector<2x32xf32>
      %nextb = arith.addi %accb, %row : vector<64xi8>
      scf.yield %nextf, %nextb : vector<2x32xf32>, vector<64xi8>
    }
    return %sums#0, %sums#1 : vector<2x32xf32>, vector<64xi8>
  }
}

// -----

// A tile of a few rows reads one panel (vector<32xi32>, two lines) per block: prefetched where at
// most 4 row tiles read it (a step of a few tokens); not where 8 do (a prefill, whose later tiles
// find the panel in the cache). The row-tile loop is the one whose index the read does not use.
// 128 bytes a step: 1 KiB ahead is 8 steps on.
// CHECK-LABEL: func.func @few_row_tiles
// CHECK-SAME: %[[W:[a-z0-9]+]]: memref<16x8x32xi32>, %[[P:[a-z0-9]+]]: index
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK: scf.for
// CHECK: scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT: %[[AHEAD:.*]] = arith.addi %[[K]], %[[C8]] : index
// CHECK-NEXT: memref.prefetch %[[W]][%[[P]], %[[AHEAD]], %[[C0]]], read, locality<3>, data
// CHECK-NEXT: memref.prefetch %[[W]][%[[P]], %[[AHEAD]], %[[C16]]], read, locality<3>, data
// CHECK-NEXT: vector.transfer_read %[[W]][%[[P]], %[[K]], %[[C0]]]
// CHECK-NOT: memref.prefetch
// CHECK-LABEL: func.func @many_row_tiles
// CHECK-NOT: memref.prefetch
// TARGET-LABEL: func.func @few_row_tiles
// TARGET-COUNT-2: memref.prefetch
// TARGET-NOT: memref.prefetch
#one_panel = affine_map<(d0, d1, d2) -> (d2)>
module attributes {gpt.target = {cpu = "sapphirerapids", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64, features = ["avx512f", "avx512bw", "avx512vnni"]}} {
  func.func @few_row_tiles(%w: memref<16x8x32xi32>, %p: index, %out: memref<16x32xi32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    %c16 = arith.constant 16 : index
    %z = arith.constant 0 : i32
    %init = arith.constant dense<0> : vector<32xi32>
    scf.for %row = %c0 to %c16 step %c4 {
      %sum = scf.for %k = %c0 to %c8 step %c1 iter_args(%acc = %init) -> (vector<32xi32>) {
        %l = vector.transfer_read %w[%p, %k, %c0], %z {in_bounds = [true], permutation_map = #one_panel}
            : memref<16x8x32xi32>, vector<32xi32>
        %next = arith.addi %acc, %l : vector<32xi32>
        scf.yield %next : vector<32xi32>
      }
      vector.transfer_write %sum, %out[%row, %c0] {in_bounds = [true]} : vector<32xi32>, memref<16x32xi32>
    }
    return
  }

  func.func @many_row_tiles(%w: memref<16x8x32xi32>, %p: index, %out: memref<32x32xi32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    %c32 = arith.constant 32 : index
    %z = arith.constant 0 : i32
    %init = arith.constant dense<0> : vector<32xi32>
    scf.for %row = %c0 to %c32 step %c4 {
      %sum = scf.for %k = %c0 to %c8 step %c1 iter_args(%acc = %init) -> (vector<32xi32>) {
        %l = vector.transfer_read %w[%p, %k, %c0], %z {in_bounds = [true], permutation_map = #one_panel}
            : memref<16x8x32xi32>, vector<32xi32>
        %next = arith.addi %acc, %l : vector<32xi32>
        scf.yield %next : vector<32xi32>
      }
      vector.transfer_write %sum, %out[%row, %c0] {in_bounds = [true]} : vector<32xi32>, memref<32x32xi32>
    }
    return
  }
}

// -----

// A CPU with AMX is an Intel server core whatever a VM names it (family 6 model 167, which LLVM
// names rocketlake, a client core without AMX): the target's choice is 1 KiB there too.
// CHECK-LABEL: func.func @amx_core_lanes
// TARGET-LABEL: func.func @amx_core_lanes
// TARGET: memref.prefetch
// TARGET-COUNT-3: memref.prefetch
// TARGET-NOT: memref.prefetch
#amx_lanes = affine_map<(d0, d1, d2, d3, d4) -> (d0, d4)>
module attributes {gpt.target = {cpu = "rocketlake", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64,
                                 features = ["avx512f", "avx512bw", "avx512vnni", "amx-bf16", "amx-int8"]}} {
  func.func @amx_core_lanes(%w: memref<16x8x8x4x32xi32>, %p: index, %b: index) -> vector<2x32xi32> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c8 = arith.constant 8 : index
    %z = arith.constant 0 : i32
    %init = arith.constant dense<0> : vector<2x32xi32>
    %sum = scf.for %s = %c0 to %c8 step %c1 iter_args(%acc = %init) -> (vector<2x32xi32>) {
      %l = vector.transfer_read %w[%p, %b, %s, %c3, %c0], %z {in_bounds = [true, true], permutation_map = #amx_lanes}
          : memref<16x8x8x4x32xi32>, vector<2x32xi32>
      %next = arith.addi %acc, %l : vector<2x32xi32>
      scf.yield %next : vector<2x32xi32>
    }
    return %sum : vector<2x32xi32>
  }
}
