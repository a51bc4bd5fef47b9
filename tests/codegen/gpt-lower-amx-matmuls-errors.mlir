// --gpt-lower-amx-matmuls reports a marked op (bf16 or q8_0) it cannot lower, instead of leaving
// it to become scalar loops.
// RUN: gpt-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(func.func(gpt-lower-amx-matmuls))' -o /dev/null

#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, j)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
// A marked op whose output has no static strides cannot be lowered: an error, not scalar loops.
func.func @dynamic_strides(%a: memref<32x512xi32>, %w: memref<8x512x32xi32>, %c: memref<32x8x32xf32, strided<[?, 32, 1]>>) {
  // expected-error @+1 {{is marked 'gpt.amx_tile' but cannot be lowered to AMX tiles: expected buffers with static strides}}
  linalg.generic {indexing_maps = [#qA, #qB, #qC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%a, %w : memref<32x512xi32>, memref<8x512x32xi32>) outs(%c : memref<32x8x32xf32, strided<[?, 32, 1]>>)
      attrs = {gpt.packed_matmul, gpt.amx_tile = [32, 32, 128], gpt.amx_chunks = 1 : i64} {
  ^bb0(%s: i32, %t: i32, %r: f32):
    %p = transformer.lane_dot_bf16 %r, %s, %t : i32 -> f32
    linalg.yield %p : f32
  }
  return
}

// -----

#pX = affine_map<(m, p, j, b, l) -> (m, b, l)>
#pW = affine_map<(m, p, j, b, l) -> (p, b, l, j)>
#pS = affine_map<(m, p, j, b, l) -> (m, p, b, j)>
#sS = affine_map<(m, p, j, b) -> (m, p, b, j)>
#sW = affine_map<(m, p, j, b) -> (p, b, j)>
#sX = affine_map<(m, p, j, b) -> (m, b)>
#sC = affine_map<(m, p, j, b) -> (m, p, j)>
// q8_0: the lowering computes the block sums in tiles and deletes their buffer, so a marked
// matmul whose block sums something else reads cannot be lowered.
func.func @q8_sums_read_elsewhere(%x: memref<32x8x8xi32>, %w: memref<2x8x8x32xi32>, %dw: memref<2x8x32xf16>,
                                  %dx: memref<32x8xf32>, %cx: memref<32x8xf32>, %c: memref<32x2x32xf32>,
                                  %copy: memref<32x2x8x32xi32>) {
  %flip = arith.constant -2139062144 : i32
  %sums = memref.alloc() : memref<32x2x8x32xi32>
  linalg.generic {indexing_maps = [#pX, #pW, #pS], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<32x8x8xi32>, memref<2x8x8x32xi32>) outs(%sums : memref<32x2x8x32xi32>) attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %b: i32, %acc: i32):
    %u = arith.xori %b, %flip : i32
    %d = transformer.lane_dot_u8i8 %acc, %u, %a : i32 -> i32
    linalg.yield %d : i32
  }
  memref.copy %sums, %copy : memref<32x2x8x32xi32> to memref<32x2x8x32xi32>
  // expected-error @+1 {{is marked 'gpt.amx_tile' but cannot be lowered to AMX tiles: its block sums are used elsewhere}}
  linalg.generic {indexing_maps = [#sS, #sW, #sX, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%sums, %dw, %dx, %cx : memref<32x2x8x32xi32>, memref<2x8x32xf16>, memref<32x8xf32>, memref<32x8xf32>)
      outs(%c : memref<32x2x32xf32>) attrs = {gpt.packed_matmul, gpt.amx_tile = [32, 32, 32], gpt.amx_chunks = 1 : i64} {
  ^bb0(%s: i32, %sw: f16, %sx: f32, %cc: f32, %acc: f32):
    %si = arith.sitofp %s : i32 to f32
    %t = arith.subf %si, %cc : f32
    %wf = arith.extf %sw : f16 to f32
    %sc = arith.mulf %wf, %sx : f32
    %r = math.fma %t, %sc, %acc : f32
    linalg.yield %r : f32
  }
  return
}

// -----

#pX = affine_map<(m, p, j, b, l) -> (m, b, l)>
#pW = affine_map<(m, p, j, b, l) -> (p, b, l, j)>
#pS = affine_map<(m, p, j, b, l) -> (m, p, b, j)>
#sS = affine_map<(m, p, j, b) -> (m, p, b, j)>
#sW = affine_map<(m, p, j, b) -> (p, b, j)>
#sX = affine_map<(m, p, j, b) -> (m, b)>
#sC = affine_map<(m, p, j, b) -> (m, p, j)>
// q8_0: 24 K words per trip of the totals is 3 blocks, which do not divide the 8 blocks of K.
func.func @q8_partial_group(%x: memref<32x8x8xi32>, %w: memref<2x8x8x32xi32>, %dw: memref<2x8x32xf16>,
                            %dx: memref<32x8xf32>, %cx: memref<32x8xf32>, %c: memref<32x2x32xf32>) {
  %flip = arith.constant -2139062144 : i32
  %sums = memref.alloc() : memref<32x2x8x32xi32>
  linalg.generic {indexing_maps = [#pX, #pW, #pS], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<32x8x8xi32>, memref<2x8x8x32xi32>) outs(%sums : memref<32x2x8x32xi32>) attrs = {gpt.block_partials} {
  ^bb0(%a: i32, %b: i32, %acc: i32):
    %u = arith.xori %b, %flip : i32
    %d = transformer.lane_dot_u8i8 %acc, %u, %a : i32 -> i32
    linalg.yield %d : i32
  }
  // expected-error @+1 {{cannot be lowered to AMX tiles: the block needs more tile registers than there are, or is not made of 16 x 16 tiles and whole blocks of K}}
  linalg.generic {indexing_maps = [#sS, #sW, #sX, #sX, #sC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%sums, %dw, %dx, %cx : memref<32x2x8x32xi32>, memref<2x8x32xf16>, memref<32x8xf32>, memref<32x8xf32>)
      outs(%c : memref<32x2x32xf32>) attrs = {gpt.packed_matmul, gpt.amx_tile = [32, 32, 24], gpt.amx_chunks = 1 : i64} {
  ^bb0(%s: i32, %sw: f16, %sx: f32, %cc: f32, %acc: f32):
    %si = arith.sitofp %s : i32 to f32
    %t = arith.subf %si, %cc : f32
    %wf = arith.extf %sw : f16 to f32
    %sc = arith.mulf %wf, %sx : f32
    %r = math.fma %t, %sc, %acc : f32
    linalg.yield %r : f32
  }
  return
}
