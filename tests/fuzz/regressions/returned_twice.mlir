// The same value returned twice once crashed results-to-out-params.
func.func @f(%x: tensor<8x16xf32>) -> (tensor<*xf32>, tensor<*xf32>) {
  %0 = transformer.gelu %x : tensor<8x16xf32> -> tensor<*xf32>
  return %0, %0 : tensor<*xf32>, tensor<*xf32>
}
