// bf16 prefill matmuls on AMX tiles: --gpt-select-register-tiles marks a bf16 packed matmul of a
// multiple of 16 rows with gpt.amx_tile where the module's gpt.target has amx-bf16
// (sapphirerapids), and a register tile elsewhere (znver4: AVX-512 BF16, no AMX) and for decode's
// one row; the bufferized stage's --gpt-lower-amx-matmuls turns the marked op into tile loads,
// tdpbf16ps and stores, which --convert-vector-to-llvm=enable-amx takes to the intrinsics.
// RUN: gpt-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(gpt-select-register-tiles{threads=2}))' | FileCheck %s --check-prefix=SELECT
// RUN: gpt-opt %s --split-input-file --gpt-vectorized-stage=threads=2 --gpt-bufferized-stage=threads=2 | FileCheck %s --check-prefix=TILES
// RUN: gpt-opt %s --split-input-file --gpt-vectorized-stage --gpt-bufferized-stage --gpt-llvm-stage | FileCheck %s --check-prefix=LLVM

#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, j)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
// SELECT-LABEL: module attributes {gpt.target = {cpu = "sapphirerapids"
// SELECT: gpt.amx_chunks = 2 : i64, gpt.amx_tile = [32, 32, 128], gpt.packed_matmul
// SELECT-NOT: gpt.register_tile
// SELECT: gpt.packed_matmul, gpt.register_tile = [1, 2, 32, 1]
// TILES-LABEL: func.func @prefill_and_decode
// TILES: memref.reinterpret_cast {{.*}} to offset: [0], sizes: [32, 512], strides: [512, 1]
// TILES: memref.reinterpret_cast {{.*}} to offset: [0], sizes: [4096, 32], strides: [32, 1]
// TILES: memref.reinterpret_cast {{.*}} to offset: [0], sizes: [32, 256], strides: [256, 1]
// TILES: memref.atomic_rmw addi
// TILES-COUNT-4: amx.tile_load {{.*}} into vector<16x16xf32>
// TILES: amx.tile_load {{.*}} : memref<32x512xi32, strided<[512, 1]>> into vector<16x32xbf16>
// TILES: amx.tile_load {{.*}} : memref<32x512xi32, strided<[512, 1]>> into vector<16x32xbf16>
// TILES: amx.tile_load {{.*}} : memref<4096x32xi32, strided<[32, 1]>> into vector<16x32xbf16>
// TILES: amx.tile_load {{.*}} : memref<4096x32xi32, strided<[32, 1]>> into vector<16x32xbf16>
// TILES-COUNT-4: amx.tile_mulf {{.*}} : vector<16x32xbf16>, vector<16x32xbf16>, vector<16x16xf32>
// TILES-COUNT-28: amx.tile_mulf
// TILES-COUNT-4: amx.tile_store
// TILES-NOT: amx.
// TILES-NOT: transformer.lane_dot_bf16 {{.*}} : i32
// LLVM-LABEL: llvm.func @prefill_and_decode
// LLVM: "amx.tileloadd64"
// LLVM-COUNT-32: "amx.tdpbf16ps"
// LLVM: "amx.tilestored64"
// LLVM-NOT: "amx.tdpbf16ps"
module attributes {gpt.target = {cpu = "sapphirerapids", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64,
                                 features = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16", "amx-bf16", "amx-int8"]}} {
  func.func @prefill_and_decode(%a: tensor<32x512xi32>, %w: tensor<8x512x32xi32>, %c: tensor<32x8x32xf32>,
                                %x: tensor<1x512xi32>, %d: tensor<1x8x32xf32>) -> (tensor<32x8x32xf32>, tensor<1x8x32xf32>) {
    %0 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%a, %w : tensor<32x512xi32>, tensor<8x512x32xi32>) outs(%c : tensor<32x8x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%s: i32, %t: i32, %r: f32):
      %p = transformer.lane_dot_bf16 %r, %s, %t : i32 -> f32
      linalg.yield %p : f32
    } -> tensor<32x8x32xf32>
    %1 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%x, %w : tensor<1x512xi32>, tensor<8x512x32xi32>) outs(%d : tensor<1x8x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%s: i32, %t: i32, %r: f32):
      %p = transformer.lane_dot_bf16 %r, %s, %t : i32 -> f32
      linalg.yield %p : f32
    } -> tensor<1x8x32xf32>
    return %0, %1 : tensor<32x8x32xf32>, tensor<1x8x32xf32>
  }
}

// -----

#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, j)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
// Without amx-bf16 (znver4), the same prefill matmul takes an AVX-512 register tile.
// SELECT-LABEL: module attributes {gpt.target = {cpu = "znver4"
// SELECT-NOT: gpt.amx_tile
// SELECT: gpt.register_tile = [8, 1, 32, 1]
// TILES-LABEL: func.func @prefill
// TILES-NOT: amx.
// LLVM-LABEL: llvm.func @prefill
// LLVM-NOT: amx.
module attributes {gpt.target = {cpu = "znver4", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64,
                                 features = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16"]}} {
  func.func @prefill(%a: tensor<32x512xi32>, %w: tensor<8x512x32xi32>, %c: tensor<32x8x32xf32>) -> tensor<32x8x32xf32> {
    %0 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%a, %w : tensor<32x512xi32>, tensor<8x512x32xi32>) outs(%c : tensor<32x8x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%s: i32, %t: i32, %r: f32):
      %p = transformer.lane_dot_bf16 %r, %s, %t : i32 -> f32
      linalg.yield %p : f32
    } -> tensor<32x8x32xf32>
    return %0 : tensor<32x8x32xf32>
  }
}

// -----

#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, j)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
// A zero-filled output (the packed matmul's own init, as --transformer-to-linalg builds it): the
// first K step loads its accumulators from a 16 x 32 block of zeros, later ones what the previous
// step stored, and the output's fill goes. 16 rows: 1 x 2 accumulator tiles; 64 K words: one
// step of 4 tile steps.
// SELECT-LABEL: module attributes {gpt.target = {cpu = "sapphirerapids"
// SELECT: gpt.amx_chunks = 1 : i64, gpt.amx_tile = [16, 32, 64]
// TILES-LABEL: func.func @zero_filled
// TILES: %[[ZEROS:.*]] = memref.alloca() {alignment = 64 : i64} : memref<16x32xf32>
// TILES-NOT: memref.store {{.*}} : memref<16x2x32xf32>
// TILES: memref.store %{{.*}}, %[[ZEROS]]
// TILES-NOT: memref.store
// TILES: amx.tile_load %[[ZEROS]][%c0, %c0] : memref<16x32xf32> into vector<16x16xf32>
// TILES: amx.tile_load %[[ZEROS]][%c0, %c16] : memref<16x32xf32> into vector<16x16xf32>
// TILES-COUNT-8: amx.tile_mulf
// TILES-COUNT-2: amx.tile_store
// TILES-NOT: amx.
// LLVM-LABEL: llvm.func @zero_filled
// LLVM-COUNT-8: "amx.tdpbf16ps"
module attributes {gpt.target = {cpu = "sapphirerapids", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64,
                                 features = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16", "amx-bf16", "amx-int8"]}} {
  func.func @zero_filled(%a: tensor<16x64xi32>, %w: tensor<2x64x32xi32>) -> tensor<16x2x32xf32> {
    %zero = arith.constant 0.0 : f32
    %empty = tensor.empty() : tensor<16x2x32xf32>
    %c = linalg.fill ins(%zero : f32) outs(%empty : tensor<16x2x32xf32>) -> tensor<16x2x32xf32>
    %0 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%a, %w : tensor<16x64xi32>, tensor<2x64x32xi32>) outs(%c : tensor<16x2x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%s: i32, %t: i32, %r: f32):
      %p = transformer.lane_dot_bf16 %r, %s, %t : i32 -> f32
      linalg.yield %p : f32
    } -> tensor<16x2x32xf32>
    return %0 : tensor<16x2x32xf32>
  }
}
