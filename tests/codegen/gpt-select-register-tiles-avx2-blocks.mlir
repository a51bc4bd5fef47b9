// Block-quantized matmuls on AVX2 without VNNI (16 ymm), where a block tile of half the f32 tile's
// rows would be one row: the formats whose codes stay below 128 (the dots vpmaddubsw sums in 16
// bits) take several rows anyway, each weight word unpacked once for all of them: blocks of 32
// (q4_0, q4_1, q5_0, q5_1) 4 rows, or 2 where 4 do not divide the rows; super-blocks (the
// K-quants, whose partials span several blocks a step) 2 rows. q8_0's offset codes (up to 255)
// keep one row. AVX-512's block tiles are 4 rows of their own; Alder Lake's (AVX2 with
// vpdpbusd) and Sandy Bridge's (256-bit AVX without AVX2: plain arithmetic), not measured, keep
// one row.
// RUN: gpt-opt %s --split-input-file --gpt-set-target="cpu=haswell" --gpt-select-register-tiles | FileCheck %s
// RUN: gpt-opt %s --split-input-file --gpt-set-target="cpu=znver3" --gpt-select-register-tiles | FileCheck %s
// RUN: gpt-opt %s --split-input-file --gpt-set-target="cpu=znver4" --gpt-select-register-tiles | FileCheck %s --check-prefix=AVX512
// RUN: gpt-opt %s --split-input-file --gpt-set-target="cpu=alderlake" --gpt-select-register-tiles | FileCheck %s --check-prefix=VNNI
// RUN: gpt-opt %s --split-input-file --gpt-set-target="cpu=sandybridge" --gpt-select-register-tiles | FileCheck %s --check-prefix=VNNI

#bA = affine_map<(m, p, j, b, i) -> (m, b, i)>
#bW = affine_map<(m, p, j, b, i) -> (p, b, i, j)>
#bP = affine_map<(m, p, j, b, i) -> (m, p, b, j)>
#sP = affine_map<(m, p, j, b) -> (m, p, b, j)>
#sS = affine_map<(m, p, j, b) -> (p, b, j)>
#sX = affine_map<(m, p, j, b) -> (m, b)>
#sC = affine_map<(m, p, j, b) -> (m, p, j)>
// CHECK-LABEL: func.func @nibble_codes
// CHECK: gpt.register_tile = [4, 1, 32, 1]
// AVX512-LABEL: func.func @nibble_codes
// AVX512: gpt.register_tile = [4, 1, 32, 1]
// VNNI-LABEL: func.func @nibble_codes
// VNNI: gpt.register_tile = [1, 1, 32, 1]
func.func @nibble_codes(%x: tensor<16x2x8xi32>, %w: tensor<6x2x8x32xi32>, %d: tensor<6x2x32xf16>,
                        %dx: tensor<16x2xf32>, %zeros: tensor<16x6x2x32xi32>, %init: tensor<16x6x32xf32>)
    -> tensor<16x6x32xf32> {
  %partials = linalg.generic {indexing_maps = [#bA, #bW, #bP],
                              iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x2x8xi32>, tensor<6x2x8x32xi32>) outs(%zeros : tensor<16x6x2x32xi32>)
      attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %q: i32, %acc: i32):
    %mask = arith.constant 252645135 : i32
    %code = arith.andi %q, %mask : i32
    %r = transformer.lane_dot_u8i8 %acc, %code, %a : i32 -> i32
    linalg.yield %r : i32
  } -> tensor<16x6x2x32xi32>
  %0 = linalg.generic {indexing_maps = [#sP, #sS, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%partials, %d, %dx : tensor<16x6x2x32xi32>, tensor<6x2x32xf16>, tensor<16x2xf32>)
      outs(%init : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%p: i32, %s: f16, %sx: f32, %acc: f32):
    %pf = arith.sitofp %p : i32 to f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %pf, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<16x6x32xf32>
  return %0 : tensor<16x6x32xf32>
}

// -----

// 6 rows: 4 do not divide them, 2 do.
#bA = affine_map<(m, p, j, b, i) -> (m, b, i)>
#bW = affine_map<(m, p, j, b, i) -> (p, b, i, j)>
#bP = affine_map<(m, p, j, b, i) -> (m, p, b, j)>
#sP = affine_map<(m, p, j, b) -> (m, p, b, j)>
#sS = affine_map<(m, p, j, b) -> (p, b, j)>
#sX = affine_map<(m, p, j, b) -> (m, b)>
#sC = affine_map<(m, p, j, b) -> (m, p, j)>
// CHECK-LABEL: func.func @nibble_codes_of_six_rows
// CHECK: gpt.register_tile = [2, 1, 32, 1]
func.func @nibble_codes_of_six_rows(%x: tensor<6x2x8xi32>, %w: tensor<6x2x8x32xi32>, %d: tensor<6x2x32xf16>,
                                    %dx: tensor<6x2xf32>, %zeros: tensor<6x6x2x32xi32>, %init: tensor<6x6x32xf32>)
    -> tensor<6x6x32xf32> {
  %partials = linalg.generic {indexing_maps = [#bA, #bW, #bP],
                              iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<6x2x8xi32>, tensor<6x2x8x32xi32>) outs(%zeros : tensor<6x6x2x32xi32>)
      attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %q: i32, %acc: i32):
    %mask = arith.constant 252645135 : i32
    %code = arith.andi %q, %mask : i32
    %r = transformer.lane_dot_u8i8 %acc, %code, %a : i32 -> i32
    linalg.yield %r : i32
  } -> tensor<6x6x2x32xi32>
  %0 = linalg.generic {indexing_maps = [#sP, #sS, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%partials, %d, %dx : tensor<6x6x2x32xi32>, tensor<6x2x32xf16>, tensor<6x2xf32>)
      outs(%init : tensor<6x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%p: i32, %s: f16, %sx: f32, %acc: f32):
    %pf = arith.sitofp %p : i32 to f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %pf, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<6x6x32xf32>
  return %0 : tensor<6x6x32xf32>
}

// -----

// A super-block's partials (gpt.block_partials = 8: eight blocks a step, as the K-quants').
#bA = affine_map<(m, p, j, b, i) -> (m, b, i)>
#bW = affine_map<(m, p, j, b, i) -> (p, b, i, j)>
#bP = affine_map<(m, p, j, b, i) -> (m, p, b, j)>
#sP = affine_map<(m, p, j, b) -> (m, p, b, j)>
#sS = affine_map<(m, p, j, b) -> (p, b, j)>
#sX = affine_map<(m, p, j, b) -> (m, b)>
#sC = affine_map<(m, p, j, b) -> (m, p, j)>
// CHECK-LABEL: func.func @super_block_codes
// CHECK: gpt.register_tile = [2, 1, 32, 1]
func.func @super_block_codes(%x: tensor<16x2x8xi32>, %w: tensor<6x2x8x32xi32>, %d: tensor<6x2x32xf16>,
                             %dx: tensor<16x2xf32>, %zeros: tensor<16x6x2x32xi32>, %init: tensor<16x6x32xf32>)
    -> tensor<16x6x32xf32> {
  %partials = linalg.generic {indexing_maps = [#bA, #bW, #bP],
                              iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x2x8xi32>, tensor<6x2x8x32xi32>) outs(%zeros : tensor<16x6x2x32xi32>)
      attrs = {gpt.block_partials = 8 : i64} {
  ^bb0(%a: i32, %q: i32, %acc: i32):
    %mask = arith.constant 1061109567 : i32
    %code = arith.andi %q, %mask : i32
    %r = transformer.lane_dot_u8i8 %acc, %code, %a : i32 -> i32
    linalg.yield %r : i32
  } -> tensor<16x6x2x32xi32>
  %0 = linalg.generic {indexing_maps = [#sP, #sS, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%partials, %d, %dx : tensor<16x6x2x32xi32>, tensor<6x2x32xf16>, tensor<16x2xf32>)
      outs(%init : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%p: i32, %s: f16, %sx: f32, %acc: f32):
    %pf = arith.sitofp %p : i32 to f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %pf, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<16x6x32xf32>
  return %0 : tensor<16x6x32xf32>
}

// -----

// q8_0's offset codes (the weight's bytes xor'ed with 0x80: up to 255) keep one row.
#bA = affine_map<(m, p, j, b, i) -> (m, b, i)>
#bW = affine_map<(m, p, j, b, i) -> (p, b, i, j)>
#bP = affine_map<(m, p, j, b, i) -> (m, p, b, j)>
#sP = affine_map<(m, p, j, b) -> (m, p, b, j)>
#sS = affine_map<(m, p, j, b) -> (p, b, j)>
#sX = affine_map<(m, p, j, b) -> (m, b)>
#sC = affine_map<(m, p, j, b) -> (m, p, j)>
// CHECK-LABEL: func.func @offset_codes
// CHECK: gpt.register_tile = [1, 1, 32, 1]
// AVX512-LABEL: func.func @offset_codes
// AVX512: gpt.register_tile = [4, 1, 32, 1]
func.func @offset_codes(%x: tensor<16x2x8xi32>, %w: tensor<6x2x8x32xi32>, %d: tensor<6x2x32xf16>,
                        %dx: tensor<16x2xf32>, %zeros: tensor<16x6x2x32xi32>, %init: tensor<16x6x32xf32>)
    -> tensor<16x6x32xf32> {
  %partials = linalg.generic {indexing_maps = [#bA, #bW, #bP],
                              iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x2x8xi32>, tensor<6x2x8x32xi32>) outs(%zeros : tensor<16x6x2x32xi32>)
      attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %q: i32, %acc: i32):
    %offset = arith.constant -2139062144 : i32
    %code = arith.xori %q, %offset : i32
    %r = transformer.lane_dot_u8i8 %acc, %code, %a : i32 -> i32
    linalg.yield %r : i32
  } -> tensor<16x6x2x32xi32>
  %0 = linalg.generic {indexing_maps = [#sP, #sS, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%partials, %d, %dx : tensor<16x6x2x32xi32>, tensor<6x2x32xf16>, tensor<16x2xf32>)
      outs(%init : tensor<16x6x32xf32>) attrs = {gpt.packed_matmul} {
  ^bb0(%p: i32, %s: f16, %sx: f32, %acc: f32):
    %pf = arith.sitofp %p : i32 to f32
    %sf = arith.extf %s : f16 to f32
    %scale = arith.mulf %sf, %sx : f32
    %r = math.fma %pf, %scale, %acc : f32
    linalg.yield %r : f32
  } -> tensor<16x6x32xf32>
  return %0 : tensor<16x6x32xf32>
}
