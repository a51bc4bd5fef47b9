// Once crashed lowering a rank-1 layer_norm (a null affine map).
func.func @f(%x: tensor<8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  %0 = transformer.layer_norm %x, %w, %b {epsilon = 1.0e-5 : f32}
      : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
