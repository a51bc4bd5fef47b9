// The zero-input fill generic of a 3-D matmul crashed gpt-select-register-tiles (vectorized level).
func.func @matmul_shared_weight(%x: tensor<2x4x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x4x16xf32> {
  %0 = transformer.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}
