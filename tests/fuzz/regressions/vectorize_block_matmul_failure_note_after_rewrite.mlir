#qA = affine_map<(m, p, j, k) -> (m, k)>
#qB = affine_map<(m, p, j, k) -> (p, k, 2)>
#qC = affine_map<(m, p, j, k) -> (m, p, j)>
module attributes {gpt.target = {cpu = "sapphirerapids", triple = "x86_64-pc-linux-gnu", vector_bits = 512 : i64,
                                 vector_registers = 32 : i64,
                                 faruetes = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16", "amx-bf16", "amx-int8"]}} {
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
