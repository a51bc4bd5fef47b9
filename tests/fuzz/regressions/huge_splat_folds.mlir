// Canonicalization once checked add(x, 0) element by element (10^14 of them: a hang) and folded
// neg of a huge splat by allocating every element (out of memory).
func.func @f(%x: tensor<10000000x10000000xf32>) -> (tensor<10000000x10000000xf32>, tensor<10000000x10000000xf32>) {
  %zero = transformer.constant dense<0.0> : tensor<10000000x10000000xf32>
  %one = transformer.constant dense<1.0> : tensor<10000000x10000000xf32>
  %0 = transformer.add %x, %zero : (tensor<10000000x10000000xf32>, tensor<10000000x10000000xf32>) -> tensor<10000000x10000000xf32>
  %1 = transformer.neg %one : tensor<10000000x10000000xf32> -> tensor<10000000x10000000xf32>
  return %0, %1 : tensor<10000000x10000000xf32>, tensor<10000000x10000000xf32>
}
