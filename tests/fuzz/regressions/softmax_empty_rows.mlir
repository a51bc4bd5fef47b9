// Zero-length rows once crashed the vectorizing schedule (a tile of an empty dimension).
func.func @f(%x: tensor<4x0xf32>) -> tensor<4x0xf32> {
  %0 = transformer.softmax %x : tensor<4x0xf32> -> tensor<4x0xf32>
  return %0 : tensor<4x0xf32>
}
