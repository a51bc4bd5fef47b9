// The conversion of the `transformer` dialect to linalg on tensors.
#ifndef GPT_CC_CONVERSION_PASSES_TD
#define GPT_CC_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def TransformerToLinalg : Pass<"transformer-to-linalg", "::mlir::ModuleOp"> {
  let summary = "Lower the transformer dialect to linalg on tensors";
  let description = [{
    Rewrites every `transformer` op into linalg, tensor, arith and math ops on tensors with the
    same meaning: `matmul` becomes `linalg.matmul` or `linalg.batch_matmul` (with reshapes when
    the weight is shared across a batch), `transpose` becomes `linalg.transpose`, elementwise ops
    become `linalg.generic` with broadcasting indexing maps, and `layer_norm` / `softmax` become
    row reductions followed by an elementwise `linalg.generic`. `packed_matmul` becomes a
    `linalg.generic` over (m, panel, column, k) marked `gpt.packed_matmul`, viewed as [M, N] by
    a `tensor.collapse_shape`. `causal_attention` becomes a fused loop nest (flash-attention
    style): an `scf.forall` over heads, blocks of queries, and a loop over blocks of keys with
    an online softmax whose upper bound is the last key the query block may see, so blocks the
    causal mask removes entirely are never visited and no [Tq, Tk] score tensor exists. With the
    `tile_classes` of `--transformer-classify-attention-tiles` (static positions, or a constant
    `mask` operand), each query block instead loops over its full key blocks (unmasked) and then
    its partial ones (masked), both read from constant tables: empty tiles cost nothing. Its
    scores are a matmul by each key block transposed once, or for a single query (decode) a dot
    product per key. `split_heads` and `merge_heads` are a reshape and a transpose, or only the
    reshape when `token_major`; attention reads each operand and writes its result in the layout
    its `*_token_major` flags give (`--transformer-attention-layout` chooses them), so every
    pattern rewrites its own op alone. The patterns are split by op family (elementwise, matmul,
    normalization, shape, attention), each with its own `populate*LoweringPatterns`.
    Needs static shapes: run `--transformer-shape-inference` first.

    Before:
    ```mlir
    %y = transformer.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    ```
    After:
    ```mlir
    %e = tensor.empty() : tensor<4x8xf32>
    %y = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                          affine_map<(d0, d1) -> (d1)>,
                                          affine_map<(d0, d1) -> (d0, d1)>],
                         iterator_types = ["parallel", "parallel"]}
        ins(%x, %b : tensor<4x8xf32>, tensor<8xf32>) outs(%e : tensor<4x8xf32>) {
      ^bb0(%in: f32, %in_0: f32, %out: f32):
        %s = arith.addf %in, %in_0 : f32
        linalg.yield %s : f32
    } -> tensor<4x8xf32>
    ```
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect",
  ];
}

#endif // GPT_CC_CONVERSION_PASSES_TD
