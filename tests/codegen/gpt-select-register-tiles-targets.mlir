// --gpt-select-register-tiles sizes register tiles from the target's register file: one input,
// three targets. Accumulators fill at most half the registers, so AVX-512 (32 zmm) takes 8 rows
// of a 32-wide panel (2 registers a row), AVX2 (16 ymm) 2 rows (4 registers a row), and NEON
// (32 q registers of 128 bits) 2 rows (8 registers a row).
// RUN: gpt-opt %s --split-input-file --gpt-select-register-tiles | FileCheck %s --check-prefix=AVX512
// The target is the module's gpt.target (--gpt-set-target names a CPU; without one, AVX-512's).
// RUN: gpt-opt %s --split-input-file --gpt-set-target="cpu=haswell" --gpt-select-register-tiles | FileCheck %s --check-prefix=AVX2
// RUN: gpt-opt %s --split-input-file --gpt-set-target="cpu=aarch64:neoverse-v1" --gpt-select-register-tiles | FileCheck %s --check-prefix=NEON
// RUN: gpt-opt %s --split-input-file --gpt-set-target="cpu=znver4" --gpt-select-register-tiles | FileCheck %s --check-prefix=AVX512

#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, j)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
// AVX512-LABEL: func.func @packed_prefill
// AVX512: gpt.packed_matmul, gpt.register_tile = [8, 1, 32, 1]
// AVX512: linalg.matmul {gpt.register_tile = [8, 32, 1]}
// AVX512: linalg.matmul {gpt.register_tile = [8, 16, 1]}
// AVX2-LABEL: func.func @packed_prefill
// AVX2: gpt.packed_matmul, gpt.register_tile = [2, 1, 32, 1]
// AVX2: linalg.matmul {gpt.register_tile = [2, 32, 1]}
// AVX2: linalg.matmul {gpt.register_tile = [4, 16, 1]}
// NEON-LABEL: func.func @packed_prefill
// NEON: gpt.packed_matmul, gpt.register_tile = [2, 1, 32, 1]
// NEON: linalg.matmul {gpt.register_tile = [2, 32, 1]}
// NEON: linalg.matmul {gpt.register_tile = [4, 16, 1]}
func.func @packed_prefill(%a: tensor<16x256xf32>, %w: tensor<6x256x32xf32>, %c: tensor<16x6x32xf32>,
                          %q: tensor<16x64xf32>, %k: tensor<64x96xf32>, %s: tensor<16x96xf32>,
                          %k2: tensor<64x48xf32>, %s2: tensor<16x48xf32>)
    -> (tensor<16x6x32xf32>, tensor<16x96xf32>, tensor<16x48xf32>) {
  %0 = linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%a, %w : tensor<16x256xf32>, tensor<6x256x32xf32>) outs(%c : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %t = arith.addf %acc, %p : f32
    linalg.yield %t : f32
  } -> tensor<16x6x32xf32>
  %1 = linalg.matmul ins(%q, %k : tensor<16x64xf32>, tensor<64x96xf32>) outs(%s : tensor<16x96xf32>) -> tensor<16x96xf32>
  %2 = linalg.matmul ins(%q, %k2 : tensor<16x64xf32>, tensor<64x48xf32>) outs(%s2 : tensor<16x48xf32>) -> tensor<16x48xf32>
  return %0, %1, %2 : tensor<16x6x32xf32>, tensor<16x96xf32>, tensor<16x48xf32>
}
