// --gpt-lower-amx-matmuls reports a marked op it cannot lower, instead of leaving it to become
// scalar loops.
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
