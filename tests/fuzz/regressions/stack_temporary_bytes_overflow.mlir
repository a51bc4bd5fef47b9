// UBSan: signed overflow computing the byte size of a temporary in gpt-stack-allocate-temporaries.
func.func @f(%x: tensor<9223372036854775807x9223372036854775807xf32>) -> tensor<*xf32> {
  %r = transformer.softmax %x : tensor<9223372036854775807x9223372036854775807xf32> -> tensor<*xf32>
  return %r : tensor<*xf32>
}