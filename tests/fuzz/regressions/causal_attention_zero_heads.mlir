// Attention with 0 heads once divided by zero; now a compiler error.
func.func @f(%q: tensor<0x8x4xf32>) -> tensor<*xf32> {
  %0 = transformer.causal_attention %q, %q, %q {scale = 0.5 : f32}
      : (tensor<0x8x4xf32>, tensor<0x8x4xf32>, tensor<0x8x4xf32>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}
