// One pre-LayerNorm (non-causal) attention head over 8 tokens of width 16, written the way a front
// end would emit it: intermediate types left unranked, plus two redundancies (a double transpose
// and an add of zeros) that canonicalization removes. `python -m gpt stages` prints it at every stage.
func.func @attention_head(%x: tensor<8x16xf32>, %ln_w: tensor<16xf32>, %ln_b: tensor<16xf32>,
                          %wq: tensor<16x16xf32>, %wk: tensor<16x16xf32>, %wv: tensor<16x16xf32>,
                          %wo: tensor<16x16xf32>, %bo: tensor<16xf32>) -> tensor<*xf32> {
  %h = transformer.layer_norm %x, %ln_w, %ln_b {epsilon = 1.0e-5 : f32}
      : (tensor<8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<*xf32>
  %q = transformer.matmul %h, %wq : (tensor<*xf32>, tensor<16x16xf32>) -> tensor<*xf32>
  %k = transformer.matmul %h, %wk : (tensor<*xf32>, tensor<16x16xf32>) -> tensor<*xf32>
  %v = transformer.matmul %h, %wv : (tensor<*xf32>, tensor<16x16xf32>) -> tensor<*xf32>
  %kt = transformer.transpose %k : tensor<*xf32> -> tensor<*xf32>
  %scores = transformer.matmul %q, %kt : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  %scale = transformer.constant dense<0.25> : tensor<f32>
  %scaled = transformer.mul %scores, %scale : (tensor<*xf32>, tensor<f32>) -> tensor<*xf32>
  %probs = transformer.softmax %scaled : tensor<*xf32> -> tensor<*xf32>
  %ctx = transformer.matmul %probs, %v : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  // Redundant: transpose(transpose(ctx)) = ctx.
  %t1 = transformer.transpose %ctx : tensor<*xf32> -> tensor<*xf32>
  %t2 = transformer.transpose %t1 : tensor<*xf32> -> tensor<*xf32>
  %proj = transformer.matmul %t2, %wo : (tensor<*xf32>, tensor<16x16xf32>) -> tensor<*xf32>
  %biased = transformer.add %proj, %bo : (tensor<*xf32>, tensor<16xf32>) -> tensor<*xf32>
  // Redundant: adding zeros.
  %zero = transformer.constant dense<0.0> : tensor<16xf32>
  %same = transformer.add %biased, %zero : (tensor<*xf32>, tensor<16xf32>) -> tensor<*xf32>
  %out = transformer.add %x, %same : (tensor<8x16xf32>, tensor<*xf32>) -> tensor<*xf32>
  return %out : tensor<*xf32>
}
