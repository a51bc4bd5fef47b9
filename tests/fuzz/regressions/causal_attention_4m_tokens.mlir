// Once ran the compiler out of memory: --transformer-classify-attention-tiles allocated a letter
// per (query block, key block) tile, 131072 x 131072 of them for 4M tokens.
func.func @huge(%q: tensor<1x4194304x4xf32>) -> tensor<1x4194304x4xf32> {
  %a = transformer.causal_attention %q, %q, %q {scale = 0.5 : f32} : (tensor<1x4194304x4xf32>, tensor<1x4194304x4xf32>, tensor<1x4194304x4xf32>) -> tensor<1x4194304x4xf32>
  return %a : tensor<1x4194304x4xf32>
}
