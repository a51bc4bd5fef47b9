// --gpt-select-register-tiles takes a packed matmul's columns from its weight's panels and its rows
// from the module's gpt.target: as many rows of one panel as fill half the vector registers. The
// builder packs 32-wide panels for every target (cc/TargetParameters.h), so haswell (16 ymm of 8
// lanes) gets 2 x 32 tiles and an AVX-512 CPU (32 zmm) 8 x 32; weights packed in 16-wide panels
// (IR from elsewhere) get 4 x 16 on haswell.
// RUN: gpt-opt %s --split-input-file --gpt-select-register-tiles | FileCheck %s

#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, j)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
// CHECK-LABEL: func.func @haswell_narrow_panels
// CHECK: gpt.packed_matmul, gpt.register_tile = [4, 1, 16, 1]
// CHECK-SAME: gpt.tile_interchange = [1, 0, 2, 3]
module attributes {gpt.target = {cpu = "haswell", triple = "x86_64-pc-linux-gnu", vector_bits = 256 : i64,
                                 vector_registers = 16 : i64, features = ["avx2", "fma"]}} {
  func.func @haswell_narrow_panels(%a: tensor<16x256xf32>, %w: tensor<12x256x16xf32>, %c: tensor<16x12x16xf32>) -> tensor<16x12x16xf32> {
    %0 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%a, %w : tensor<16x256xf32>, tensor<12x256x16xf32>) outs(%c : tensor<16x12x16xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%x: f32, %y: f32, %acc: f32):
      %p = arith.mulf %x, %y : f32
      %t = arith.addf %acc, %p : f32
      linalg.yield %t : f32
    } -> tensor<16x12x16xf32>
    return %0 : tensor<16x12x16xf32>
  }
}

// -----

#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, j)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
// CHECK-LABEL: func.func @avx512_panels
// CHECK: gpt.packed_matmul, gpt.register_tile = [8, 1, 32, 1]
module attributes {gpt.target = {cpu = "skylake-avx512", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64, features = ["avx512f", "avx512bw", "fma"]}} {
  func.func @avx512_panels(%a: tensor<16x256xf32>, %w: tensor<6x256x32xf32>, %c: tensor<16x6x32xf32>) -> tensor<16x6x32xf32> {
    %0 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%a, %w : tensor<16x256xf32>, tensor<6x256x32xf32>) outs(%c : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%x: f32, %y: f32, %acc: f32):
      %p = arith.mulf %x, %y : f32
      %t = arith.addf %acc, %p : f32
      linalg.yield %t : f32
    } -> tensor<16x6x32xf32>
    return %0 : tensor<16x6x32xf32>
  }
}

// -----

#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, j)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
// CHECK-LABEL: func.func @haswell_panels
// CHECK: gpt.packed_matmul, gpt.register_tile = [2, 1, 32, 1]
module attributes {gpt.target = {cpu = "haswell", triple = "x86_64-pc-linux-gnu", vector_bits = 256 : i64,
                                 vector_registers = 16 : i64, features = ["avx2", "fma"]}} {
  func.func @haswell_panels(%a: tensor<16x256xf32>, %w: tensor<6x256x32xf32>, %c: tensor<16x6x32xf32>) -> tensor<16x6x32xf32> {
    %0 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%a, %w : tensor<16x256xf32>, tensor<6x256x32xf32>) outs(%c : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%x: f32, %y: f32, %acc: f32):
      %p = arith.mulf %x, %y : f32
      %t = arith.addf %acc, %p : f32
      linalg.yield %t : f32
    } -> tensor<16x6x32xf32>
    return %0 : tensor<16x6x32xf32>
  }
}
