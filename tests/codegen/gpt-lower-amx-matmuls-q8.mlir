// q8_0 prefill matmuls on AMX int8 tiles: where the module's gpt.target has amx-int8
// (sapphirerapids), --gpt-select-register-tiles marks the scaled sum over blocks of a q8_0 packed
// matmul of a multiple of 16 rows with gpt.amx_tile = [rows, columns, 8] (one block of 32 int8
// codes, 8 words, per tile step), and a register tile elsewhere (znver4: AVX-512 VNNI, no AMX),
// for decode's one row and for q4_0; its block partial sums stay a plain generic. The bufferized
// stage's --gpt-lower-amx-matmuls computes both with tdpbssd (signed codes by signed codes: the
// weight's lanes as they lie, no +128 offset, no compensation), one 16 x 16 i32 tile of block
// sums each, stored and scaled into the output by d_w * d_x in vector code.
// RUN: gpt-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(gpt-select-register-tiles{threads=2}))' | FileCheck %s --check-prefix=SELECT
// RUN: gpt-opt %s --split-input-file --gpt-vectorized-stage=threads=2 --gpt-bufferized-stage=threads=2 | FileCheck %s --check-prefix=TILES
// RUN: gpt-opt %s --split-input-file --gpt-vectorized-stage --gpt-bufferized-stage --gpt-llvm-stage | FileCheck %s --check-prefix=LLVM

#pX = affine_map<(m, p, j, b, l) -> (m, b, l)>
#pW = affine_map<(m, p, j, b, l) -> (p, b, l, j)>
#pS = affine_map<(m, p, j, b, l) -> (m, p, b, j)>
#sS = affine_map<(m, p, j, b) -> (m, p, b, j)>
#sW = affine_map<(m, p, j, b) -> (p, b, j)>
#sX = affine_map<(m, p, j, b) -> (m, b)>
#sC = affine_map<(m, p, j, b) -> (m, p, j)>
// Prefill (32 rows, K = 512, N = 128: 2 x 2 accumulator tiles, 4 blocks of K per trip of the
// totals, 2 pieces for threads) and decode (one row of two panels: a register tile and vpdpbusd) against the
// same weight. The prefill output's zero fill goes: its totals start from zeros.
// SELECT-LABEL: module attributes {gpt.target = {cpu = "sapphirerapids"
// SELECT: gpt.block_partials
// SELECT-NOT: gpt.register_tile
// SELECT: gpt.amx_chunks = 2 : i64, gpt.amx_tile = [32, 32, 32], gpt.packed_matmul
// SELECT: gpt.block_partials
// SELECT: gpt.packed_matmul, gpt.register_tile = [1, 2, 32, 1]
// TILES-LABEL: func.func @prefill_and_decode
// TILES: %[[ZEROS:.*]] = memref.alloca() {alignment = 64 : i64} : memref<16x64xi32>
// TILES: %[[SUMS:.*]] = memref.alloca() {alignment = 64 : i64} : memref<12288xi32>
// TILES: %[[TOTALS:.*]] = memref.alloca() {alignment = 64 : i64} : memref<2048xf32>
// TILES-NOT: linalg.fill {{.*}} memref<32x4x32xf32>
// TILES-NOT: memref<32x4x16x32xi32>
// TILES: memref.reinterpret_cast {{.*}} to offset: [0], sizes: [32, 128], strides: [128, 1]
// TILES: memref.reinterpret_cast {{.*}} to offset: [0], sizes: [512, 32], strides: [32, 1]
// TILES: memref.reinterpret_cast %[[SUMS]] to offset: [0], sizes: [256, 48], strides: [48, 1]
// TILES: memref.reinterpret_cast %[[TOTALS]] to offset: [0], sizes: [64, 32], strides: [32, 1]
// TILES: memref.atomic_rmw addi
// TILES-COUNT-2: vector.store %cst{{.*}} : memref<64x32xf32>, vector<16xf32>
// TILES: amx.tile_load {{.*}} : memref<32x128xi32, strided<[128, 1]>> into vector<16x32xi8>
// TILES: amx.tile_load {{.*}} : memref<32x128xi32, strided<[128, 1]>> into vector<16x32xi8>
// TILES: amx.tile_load {{.*}} : memref<512x32xi32, strided<[32, 1]>> into vector<8x64xi8>
// TILES: amx.tile_load {{.*}} : memref<512x32xi32, strided<[32, 1]>> into vector<8x64xi8>
// TILES: amx.tile_load %[[ZEROS]][%c0, %c0] : memref<16x64xi32> into vector<16x16xi32>
// TILES: amx.tile_load %[[ZEROS]][%c0, %c16] : memref<16x64xi32> into vector<16x16xi32>
// TILES: amx.tile_load %[[ZEROS]][%c0, %c32] : memref<16x64xi32> into vector<16x16xi32>
// TILES: amx.tile_load %[[ZEROS]][%c0, %c48] : memref<16x64xi32> into vector<16x16xi32>
// TILES-COUNT-4: amx.tile_muli %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} : vector<16x32xi8>, vector<8x64xi8>, vector<16x16xi32>
// TILES-COUNT-4: amx.tile_store {{.*}} : memref<256x48xi32>, vector<16x16xi32>
// TILES-COUNT-12: amx.tile_muli
// TILES: vector.load {{.*}} : memref<4x16x32xf16>, vector<16xf16>
// TILES: arith.extf {{.*}} : vector<16xf16> to vector<16xf32>
// TILES: scf.for
// TILES-COUNT-4: memref.load {{.*}} : memref<32x16xf32>
// TILES: vector.load {{.*}} : memref<64x32xf32>, vector<16xf32>
// TILES: vector.load {{.*}} : memref<256x48xi32>, vector<16xi32>
// TILES-NEXT: arith.sitofp {{.*}} : vector<16xi32> to vector<16xf32>
// TILES-NEXT: arith.mulf
// TILES-NEXT: math.fma
// TILES-COUNT-3: math.fma
// TILES: vector.store {{.*}} : memref<64x32xf32>, vector<16xf32>
// TILES: vector.store {{.*}} : memref<32x4x32xf32>, vector<16xf32>
// TILES-NOT: amx.
// TILES-NOT: gpt.block_partials
// TILES: transformer.lane_dot_u8i8 {{.*}} : vector<2x32xi32> -> vector<2x32xi32>
// TILES-NOT: amx.
// LLVM-LABEL: llvm.func @prefill_and_decode
// LLVM: "amx.tileloadd64"
// LLVM-COUNT-16: "amx.tdpbssd"
// LLVM-NOT: "amx.tdpbssd"
// LLVM-NOT: "amx.tdpbusd"
module attributes {gpt.target = {cpu = "sapphirerapids", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64,
                                 features = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16", "amx-bf16", "amx-int8"]}} {
  func.func @prefill_and_decode(%x: tensor<32x16x8xi32>, %dx: tensor<32x16xf32>, %cx: tensor<32x16xf32>,
                                %w: tensor<4x128x32xi32>, %dw: tensor<4x16x32xf16>,
                                %y: tensor<1x16x8xi32>, %dy: tensor<1x16xf32>, %cy: tensor<1x16xf32>)
      -> (tensor<32x4x32xf32>, tensor<1x4x32xf32>) {
    %flip = arith.constant -2139062144 : i32
    %zero = arith.constant 0 : i32
    %fzero = arith.constant 0.0 : f32
    %lanes = tensor.expand_shape %w [[0], [1, 2], [3]] output_shape [4, 16, 8, 32] : tensor<4x128x32xi32> into tensor<4x16x8x32xi32>
    %e0 = tensor.empty() : tensor<32x4x16x32xi32>
    %z0 = linalg.fill ins(%zero : i32) outs(%e0 : tensor<32x4x16x32xi32>) -> tensor<32x4x16x32xi32>
    %p0 = linalg.generic {indexing_maps = [#pX, #pW, #pS], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
        ins(%x, %lanes : tensor<32x16x8xi32>, tensor<4x16x8x32xi32>) outs(%z0 : tensor<32x4x16x32xi32>) attrs = {gpt.block_partials} {
    ^bb0(%a: i32, %b: i32, %acc: i32):
      %u = arith.xori %b, %flip : i32
      %d = transformer.lane_dot_u8i8 %acc, %u, %a : i32 -> i32
      linalg.yield %d : i32
    } -> tensor<32x4x16x32xi32>
    %o0 = tensor.empty() : tensor<32x4x32xf32>
    %f0 = linalg.fill ins(%fzero : f32) outs(%o0 : tensor<32x4x32xf32>) -> tensor<32x4x32xf32>
    %r0 = linalg.generic {indexing_maps = [#sS, #sW, #sX, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%p0, %dw, %dx, %cx : tensor<32x4x16x32xi32>, tensor<4x16x32xf16>, tensor<32x16xf32>, tensor<32x16xf32>)
        outs(%f0 : tensor<32x4x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%s: i32, %sw: f16, %sx: f32, %c: f32, %acc: f32):
      %si = arith.sitofp %s : i32 to f32
      %t = arith.subf %si, %c : f32
      %wf = arith.extf %sw : f16 to f32
      %sc = arith.mulf %wf, %sx : f32
      %r = math.fma %t, %sc, %acc : f32
      linalg.yield %r : f32
    } -> tensor<32x4x32xf32>
    %e1 = tensor.empty() : tensor<1x4x16x32xi32>
    %z1 = linalg.fill ins(%zero : i32) outs(%e1 : tensor<1x4x16x32xi32>) -> tensor<1x4x16x32xi32>
    %p1 = linalg.generic {indexing_maps = [#pX, #pW, #pS], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
        ins(%y, %lanes : tensor<1x16x8xi32>, tensor<4x16x8x32xi32>) outs(%z1 : tensor<1x4x16x32xi32>) attrs = {gpt.block_partials} {
    ^bb0(%a: i32, %b: i32, %acc: i32):
      %u = arith.xori %b, %flip : i32
      %d = transformer.lane_dot_u8i8 %acc, %u, %a : i32 -> i32
      linalg.yield %d : i32
    } -> tensor<1x4x16x32xi32>
    %o1 = tensor.empty() : tensor<1x4x32xf32>
    %f1 = linalg.fill ins(%fzero : f32) outs(%o1 : tensor<1x4x32xf32>) -> tensor<1x4x32xf32>
    %r1 = linalg.generic {indexing_maps = [#sS, #sW, #sX, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%p1, %dw, %dy, %cy : tensor<1x4x16x32xi32>, tensor<4x16x32xf16>, tensor<1x16xf32>, tensor<1x16xf32>)
        outs(%f1 : tensor<1x4x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%s: i32, %sw: f16, %sx: f32, %c: f32, %acc: f32):
      %si = arith.sitofp %s : i32 to f32
      %t = arith.subf %si, %c : f32
      %wf = arith.extf %sw : f16 to f32
      %sc = arith.mulf %wf, %sx : f32
      %r = math.fma %t, %sc, %acc : f32
      linalg.yield %r : f32
    } -> tensor<1x4x32xf32>
    return %r0, %r1 : tensor<32x4x32xf32>, tensor<1x4x32xf32>
  }
}

// -----

#pX = affine_map<(m, p, j, b, l) -> (m, b, l)>
#pW = affine_map<(m, p, j, b, l) -> (p, b, l, j)>
#pS = affine_map<(m, p, j, b, l) -> (m, p, b, j)>
#sS = affine_map<(m, p, j, b) -> (m, p, b, j)>
#sW = affine_map<(m, p, j, b) -> (p, b, j)>
#sX = affine_map<(m, p, j, b) -> (m, b)>
#sC = affine_map<(m, p, j, b) -> (m, p, j)>
// 16 rows and 3 blocks of K: 1 x 2 accumulator tiles, one block per trip of the totals; one
// piece (too small to split). An output that is not zero-filled (an argument) is added to: its
// totals start from it.
// SELECT-LABEL: module attributes {gpt.target = {cpu = "sapphirerapids"
// SELECT: gpt.amx_chunks = 1 : i64, gpt.amx_tile = [16, 32, 8], gpt.packed_matmul
// TILES-LABEL: func.func @sixteen_rows
// TILES-NOT: memref.atomic_rmw
// TILES: vector.load %{{.*}} : memref<16x2x32xf32>, vector<16xf32>
// TILES: vector.store {{.*}} : memref<16x32xf32>, vector<16xf32>
// TILES-COUNT-2: amx.tile_muli
// TILES-NOT: amx.tile_muli
// TILES-COUNT-2: amx.tile_store
// TILES-NOT: amx.
// LLVM-LABEL: llvm.func @sixteen_rows
// LLVM-COUNT-2: "amx.tdpbssd"
// LLVM-NOT: "amx.tdpbssd"
module attributes {gpt.target = {cpu = "sapphirerapids", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64,
                                 features = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16", "amx-bf16", "amx-int8"]}} {
  func.func @sixteen_rows(%x: tensor<16x3x8xi32>, %dx: tensor<16x3xf32>, %cx: tensor<16x3xf32>,
                          %w: tensor<2x24x32xi32>, %dw: tensor<2x3x32xf16>, %c: tensor<16x2x32xf32>) -> tensor<16x2x32xf32> {
    %flip = arith.constant -2139062144 : i32
    %zero = arith.constant 0 : i32
    %lanes = tensor.expand_shape %w [[0], [1, 2], [3]] output_shape [2, 3, 8, 32] : tensor<2x24x32xi32> into tensor<2x3x8x32xi32>
    %e0 = tensor.empty() : tensor<16x2x3x32xi32>
    %z0 = linalg.fill ins(%zero : i32) outs(%e0 : tensor<16x2x3x32xi32>) -> tensor<16x2x3x32xi32>
    %p0 = linalg.generic {indexing_maps = [#pX, #pW, #pS], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
        ins(%x, %lanes : tensor<16x3x8xi32>, tensor<2x3x8x32xi32>) outs(%z0 : tensor<16x2x3x32xi32>) attrs = {gpt.block_partials} {
    ^bb0(%a: i32, %b: i32, %acc: i32):
      %u = arith.xori %b, %flip : i32
      %d = transformer.lane_dot_u8i8 %acc, %u, %a : i32 -> i32
      linalg.yield %d : i32
    } -> tensor<16x2x3x32xi32>
    %r0 = linalg.generic {indexing_maps = [#sS, #sW, #sX, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%p0, %dw, %dx, %cx : tensor<16x2x3x32xi32>, tensor<2x3x32xf16>, tensor<16x3xf32>, tensor<16x3xf32>)
        outs(%c : tensor<16x2x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%s: i32, %sw: f16, %sx: f32, %cc: f32, %acc: f32):
      %si = arith.sitofp %s : i32 to f32
      %t = arith.subf %si, %cc : f32
      %wf = arith.extf %sw : f16 to f32
      %sc = arith.mulf %wf, %sx : f32
      %r = math.fma %t, %sc, %acc : f32
      linalg.yield %r : f32
    } -> tensor<16x2x32xf32>
    return %r0 : tensor<16x2x32xf32>
  }
}

// -----

#pX = affine_map<(m, p, j, b, l) -> (m, b, l)>
#pW = affine_map<(m, p, j, b, l) -> (p, b, l, j)>
#pS = affine_map<(m, p, j, b, l) -> (m, p, b, j)>
#sS = affine_map<(m, p, j, b) -> (m, p, b, j)>
#sW = affine_map<(m, p, j, b) -> (p, b, j)>
#sX = affine_map<(m, p, j, b) -> (m, b)>
#sC = affine_map<(m, p, j, b) -> (m, p, j)>
// Off the tiles: q8_0 on znver4 (AVX-512 VNNI, no AMX), and q4_0 on sapphirerapids (its weight
// nibbles are unsigned codes + 8, not the signed bytes tdpbssd multiplies).
// SELECT-LABEL: module attributes {gpt.target = {cpu = "znver4"
// SELECT-NOT: gpt.amx_tile
// SELECT: gpt.packed_matmul, gpt.parallel_chunks = [0, 2], gpt.register_tile = [4, 1, 32, 1]
// TILES-LABEL: func.func @q8_without_amx
// TILES-NOT: amx.
// LLVM-LABEL: llvm.func @q8_without_amx
// LLVM-NOT: amx.
module attributes {gpt.target = {cpu = "znver4", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64,
                                 features = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16"]}} {
  func.func @q8_without_amx(%x: tensor<32x8x8xi32>, %dx: tensor<32x8xf32>, %cx: tensor<32x8xf32>,
                            %w: tensor<2x64x32xi32>, %dw: tensor<2x8x32xf16>) -> tensor<32x2x32xf32> {
    %flip = arith.constant -2139062144 : i32
    %zero = arith.constant 0 : i32
    %fzero = arith.constant 0.0 : f32
    %lanes = tensor.expand_shape %w [[0], [1, 2], [3]] output_shape [2, 8, 8, 32] : tensor<2x64x32xi32> into tensor<2x8x8x32xi32>
    %e0 = tensor.empty() : tensor<32x2x8x32xi32>
    %z0 = linalg.fill ins(%zero : i32) outs(%e0 : tensor<32x2x8x32xi32>) -> tensor<32x2x8x32xi32>
    %p0 = linalg.generic {indexing_maps = [#pX, #pW, #pS], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
        ins(%x, %lanes : tensor<32x8x8xi32>, tensor<2x8x8x32xi32>) outs(%z0 : tensor<32x2x8x32xi32>) attrs = {gpt.block_partials} {
    ^bb0(%a: i32, %b: i32, %acc: i32):
      %u = arith.xori %b, %flip : i32
      %d = transformer.lane_dot_u8i8 %acc, %u, %a : i32 -> i32
      linalg.yield %d : i32
    } -> tensor<32x2x8x32xi32>
    %o0 = tensor.empty() : tensor<32x2x32xf32>
    %f0 = linalg.fill ins(%fzero : f32) outs(%o0 : tensor<32x2x32xf32>) -> tensor<32x2x32xf32>
    %r0 = linalg.generic {indexing_maps = [#sS, #sW, #sX, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%p0, %dw, %dx, %cx : tensor<32x2x8x32xi32>, tensor<2x8x32xf16>, tensor<32x8xf32>, tensor<32x8xf32>)
        outs(%f0 : tensor<32x2x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%s: i32, %sw: f16, %sx: f32, %c: f32, %acc: f32):
      %si = arith.sitofp %s : i32 to f32
      %t = arith.subf %si, %c : f32
      %wf = arith.extf %sw : f16 to f32
      %sc = arith.mulf %wf, %sx : f32
      %r = math.fma %t, %sc, %acc : f32
      linalg.yield %r : f32
    } -> tensor<32x2x32xf32>
    return %r0 : tensor<32x2x32xf32>
  }
}

// -----

#pX = affine_map<(m, p, j, b, l) -> (m, b, l)>
#pW = affine_map<(m, p, j, b, l) -> (p, b, l, j)>
#pS = affine_map<(m, p, j, b, l) -> (m, p, b, j)>
#sS = affine_map<(m, p, j, b) -> (m, p, b, j)>
#sW = affine_map<(m, p, j, b) -> (p, b, j)>
#sX = affine_map<(m, p, j, b) -> (m, b)>
#sC = affine_map<(m, p, j, b) -> (m, p, j)>
// SELECT-LABEL: module attributes {gpt.target = {cpu = "sapphirerapids"
// SELECT-NOT: gpt.amx_tile
// SELECT: gpt.packed_matmul, gpt.parallel_chunks = [0, 2], gpt.register_tile = [4, 1, 32, 1]
// TILES-LABEL: func.func @q4_stays_off_the_tiles
// TILES-NOT: amx.
// LLVM-LABEL: llvm.func @q4_stays_off_the_tiles
// LLVM-NOT: amx.
module attributes {gpt.target = {cpu = "sapphirerapids", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64,
                                 features = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16", "amx-bf16", "amx-int8"]}} {
  func.func @q4_stays_off_the_tiles(%lo: tensor<32x8x4xi32>, %hi: tensor<32x8x4xi32>, %dx: tensor<32x8xf32>,
                                    %cx: tensor<32x8xf32>, %w: tensor<2x32x32xi32>, %dw: tensor<2x8x32xf16>) -> tensor<32x2x32xf32> {
    %nibbles = arith.constant 252645135 : i32
    %four = arith.constant 4 : i32
    %zero = arith.constant 0 : i32
    %fzero = arith.constant 0.0 : f32
    %lanes = tensor.expand_shape %w [[0], [1, 2], [3]] output_shape [2, 8, 4, 32] : tensor<2x32x32xi32> into tensor<2x8x4x32xi32>
    %e0 = tensor.empty() : tensor<32x2x8x32xi32>
    %z0 = linalg.fill ins(%zero : i32) outs(%e0 : tensor<32x2x8x32xi32>) -> tensor<32x2x8x32xi32>
    %p0 = linalg.generic {indexing_maps = [#pX, #pX, #pW, #pS], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
        ins(%lo, %hi, %lanes : tensor<32x8x4xi32>, tensor<32x8x4xi32>, tensor<2x8x4x32xi32>) outs(%z0 : tensor<32x2x8x32xi32>) attrs = {gpt.block_partials} {
    ^bb0(%a: i32, %a2: i32, %b: i32, %acc: i32):
      %low = arith.andi %b, %nibbles : i32
      %shifted = arith.shrui %b, %four : i32
      %high = arith.andi %shifted, %nibbles : i32
      %d = transformer.lane_dot_u8i8 %acc, %low, %a : i32 -> i32
      %e = transformer.lane_dot_u8i8 %d, %high, %a2 : i32 -> i32
      linalg.yield %e : i32
    } -> tensor<32x2x8x32xi32>
    %o0 = tensor.empty() : tensor<32x2x32xf32>
    %f0 = linalg.fill ins(%fzero : f32) outs(%o0 : tensor<32x2x32xf32>) -> tensor<32x2x32xf32>
    %r0 = linalg.generic {indexing_maps = [#sS, #sW, #sX, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%p0, %dw, %dx, %cx : tensor<32x2x8x32xi32>, tensor<2x8x32xf16>, tensor<32x8xf32>, tensor<32x8xf32>)
        outs(%f0 : tensor<32x2x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%s: i32, %sw: f16, %sx: f32, %c: f32, %acc: f32):
      %si = arith.sitofp %s : i32 to f32
      %t = arith.subf %si, %c : f32
      %wf = arith.extf %sw : f16 to f32
      %sc = arith.mulf %wf, %sx : f32
      %r = math.fma %t, %sc, %acc : f32
      linalg.yield %r : f32
    } -> tensor<32x2x32xf32>
    return %r0 : tensor<32x2x32xf32>
  }
}
