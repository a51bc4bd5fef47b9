// The module's gpt.target decides, whatever the pass options say: one input, three targets (an
// AVX2 CPU with AVX-VNNI, an AVX-512 one with VNNI, an AArch64 one), each choosing its register
// tiles (--gpt-select-register-tiles) and its int8 dot products (--gpt-lower-lane-dots).
// RUN: gpt-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(gpt-select-register-tiles), gpt-lower-lane-dots)' | FileCheck %s

#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, j)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
// CHECK-LABEL: module attributes {gpt.target = {cpu = "alderlake"
// CHECK: gpt.packed_matmul, gpt.register_tile = [2, 1, 32, 1]
// CHECK-COUNT-4: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.256"
module attributes {gpt.target = {cpu = "alderlake", triple = "x86_64-pc-linux-gnu", vector_bits = 256 : i64,
                                 vector_registers = 16 : i64, features = ["avx2", "fma", "avxvnni"]}} {
  func.func @tiles_and_dots(%a: tensor<16x256xf32>, %w: tensor<6x256x32xf32>, %c: tensor<16x6x32xf32>,
                            %acc: vector<32xi32>, %x: vector<32xi32>, %y: vector<32xi32>) -> (tensor<16x6x32xf32>, vector<32xi32>) {
    %0 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%a, %w : tensor<16x256xf32>, tensor<6x256x32xf32>) outs(%c : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%s: f32, %t: f32, %r: f32):
      %p = arith.mulf %s, %t : f32
      %q = arith.addf %r, %p : f32
      linalg.yield %q : f32
    } -> tensor<16x6x32xf32>
    %1 = transformer.lane_dot_u8i8 %acc, %x, %y : vector<32xi32> -> vector<32xi32>
    return %0, %1 : tensor<16x6x32xf32>, vector<32xi32>
  }
}

// -----

#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, j)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
// CHECK-LABEL: module attributes {gpt.target = {cpu = "znver4"
// CHECK: gpt.packed_matmul, gpt.register_tile = [8, 1, 32, 1]
// CHECK-COUNT-2: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
module attributes {gpt.target = {cpu = "znver4", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64, features = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni"]}} {
  func.func @tiles_and_dots(%a: tensor<16x256xf32>, %w: tensor<6x256x32xf32>, %c: tensor<16x6x32xf32>,
                            %acc: vector<32xi32>, %x: vector<32xi32>, %y: vector<32xi32>) -> (tensor<16x6x32xf32>, vector<32xi32>) {
    %0 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%a, %w : tensor<16x256xf32>, tensor<6x256x32xf32>) outs(%c : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%s: f32, %t: f32, %r: f32):
      %p = arith.mulf %s, %t : f32
      %q = arith.addf %r, %p : f32
      linalg.yield %q : f32
    } -> tensor<16x6x32xf32>
    %1 = transformer.lane_dot_u8i8 %acc, %x, %y : vector<32xi32> -> vector<32xi32>
    return %0, %1 : tensor<16x6x32xf32>, vector<32xi32>
  }
}

// -----

#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, j)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
// No x86 intrinsic for an AArch64 target, even with features that share x86's names.
// CHECK-LABEL: module attributes {gpt.target = {cpu = "neoverse-v1"
// CHECK: gpt.packed_matmul, gpt.register_tile = [2, 1, 32, 1]
// CHECK-NOT: llvm.call_intrinsic
// CHECK: arith.muli
module attributes {gpt.target = {cpu = "neoverse-v1", triple = "aarch64-unknown-linux-gnu", vector_bits = 128 : i64,
                                 vector_registers = 32 : i64, features = ["neon", "dotprod", "avx512vnni"]}} {
  func.func @tiles_and_dots(%a: tensor<16x256xf32>, %w: tensor<6x256x32xf32>, %c: tensor<16x6x32xf32>,
                            %acc: vector<32xi32>, %x: vector<32xi32>, %y: vector<32xi32>) -> (tensor<16x6x32xf32>, vector<32xi32>) {
    %0 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%a, %w : tensor<16x256xf32>, tensor<6x256x32xf32>) outs(%c : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
    ^bb0(%s: f32, %t: f32, %r: f32):
      %p = arith.mulf %s, %t : f32
      %q = arith.addf %r, %p : f32
      linalg.yield %q : f32
    } -> tensor<16x6x32xf32>
    %1 = transformer.lane_dot_u8i8 %acc, %x, %y : vector<32xi32> -> vector<32xi32>
    return %0, %1 : tensor<16x6x32xf32>, vector<32xi32>
  }
}
