// Transformations of the `transformer` dialect that stay within it: shape inference, attention layout.
#ifndef GPT_CC_DIALECT_TRANSFORMS_PASSES_TD
#define GPT_CC_DIALECT_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def TransformerShapeInference : Pass<"transformer-shape-inference", "::mlir::func::FuncOp"> {
  let summary = "Refine unranked transformer results to ranked types";
  let description = [{
    Visits the ops of a function in program order (a worklist, as in the MLIR Toy tutorial,
    chapter 4) and, for every op implementing `ShapeInferenceOpInterface` whose operands are all
    ranked, computes its result type: unranked results are refined, ranked results are checked
    against the operands and an error is reported where they conflict. Ops that do not implement
    the interface are never touched. Function results declared unranked take the refined type of
    the value returned.

    Before:
    ```mlir
    func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<*xf32> {
      %0 = transformer.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<*xf32>
      %1 = transformer.transpose %0 : tensor<*xf32> -> tensor<*xf32>
      return %1 : tensor<*xf32>
    }
    ```
    After:
    ```mlir
    func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<16x4xf32> {
      %0 = transformer.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
      %1 = transformer.transpose %0 : tensor<4x16xf32> -> tensor<16x4xf32>
      return %1 : tensor<16x4xf32>
    }
    ```
  }];
}

def TransformerAttentionLayout : Pass<"transformer-attention-layout", "::mlir::func::FuncOp"> {
  let summary = "Lay out the heads around causal_attention token-major, [T, H, d]";
  let description = [{
    `split_heads` and `merge_heads` move the head dimension in front of the tokens and back: as
    written, each is a transpose. Attention reads and writes a head's rows as `d` contiguous
    floats in either layout, so where attention is the only reader of a `split_heads`, or the
    only writer of a `merge_heads`'s operand, the pass keeps the token-major [T, H, d] layout
    instead; the two ops then lower to a reshape (a view) and no transpose runs:

    * a `split_heads` whose every user reads it as the query, key or value of a
      `causal_attention` becomes `token_major`, and those attentions mark that operand
      (`query_token_major`, `key_token_major`, `value_token_major`);
    * a `merge_heads` whose operand is the result of a `causal_attention` with no other user
      becomes `token_major`, and the attention marks `result_token_major`.

    Types follow: the first two dimensions of each re-laid-out value are swapped. Values that
    reach attention through other ops (a `rope`, a `cache_update`) stay head-major. The meaning
    of the program does not change, and a second run changes nothing.

    Before:
    ```mlir
    %q = transformer.split_heads %x {num_heads = 2 : i64} : tensor<8x8xf32> -> tensor<2x8x4xf32>
    %a = transformer.causal_attention %q, %k, %v {scale = 0.5 : f32}
        : (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    %m = transformer.merge_heads %a : tensor<2x8x4xf32> -> tensor<8x8xf32>
    ```
    After (`%k` and `%v` come from other ops and keep their layout):
    ```mlir
    %q = transformer.split_heads %x {num_heads = 2 : i64, token_major} : tensor<8x8xf32> -> tensor<8x2x4xf32>
    %a = transformer.causal_attention %q, %k, %v {query_token_major, result_token_major, scale = 0.5 : f32}
        : (tensor<8x2x4xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<8x2x4xf32>
    %m = transformer.merge_heads %a {token_major} : tensor<8x2x4xf32> -> tensor<8x8xf32>
    ```
  }];
}

#endif // GPT_CC_DIALECT_TRANSFORMS_PASSES_TD
