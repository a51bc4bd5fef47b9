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

def TransformerClassifyAttentionTiles : Pass<"transformer-classify-attention-tiles", "::mlir::func::FuncOp"> {
  let summary = "Classify each (query block, key block) tile of causal_attention as empty, full or partial";
  let description = [{
    The attention lowering works on tiles of Bq queries by Bk keys (`attentionBlockSize`, the one
    place both read). This pass evaluates each `causal_attention`'s mask on every tile and records
    the result: `tile_sizes = array<i64: Bq, Bk>` and `tile_classes`, one string per query block
    with one letter per key block: `E` (no visible pair: the lowering never visits the tile), `F`
    (every pair visible: visited, the mask not evaluated) or `P` (visited, masked key by key).

    * No mask operand, no offset: the causal rule `j <= i`, with `window = W` also `i - W < j`,
      is a band around the diagonal; each tile is decided by its corners (closed form).
    * A constant `mask` operand (`arith.constant dense<...> : tensor<TqxTkxi1>`): every element is
      read and counted per tile; all visible: `F`, none: `E`, else `P`. A row that sees no key is
      an error (its softmax has no value), and nothing is compiled.
    * A mask expression (the `visible` region: arith ops of the query and key positions), no
      offset: evaluated at every (query, key) pair, compiled once into straight-line code
      (MaskExpression.h), and counted per tile as a constant mask is. A query that sees no key
      is an error. An op the evaluator does not know, a division by zero, or more than 2^28
      pairs leave the tiles unclassified (visited and masked: slower, never wrong). Ops with the
      same expression and shapes (the layers of a model) are evaluated once.
    * A query `offset` (prefill, decode) is known only at run time: nothing is recorded, and the
      lowering bounds its key loop by the band relative to the diagonal at run time (the first and
      last key block the block's queries may see; with a mask expression, every key block up to
      the last new token's, and for one query (decode) only those in which the expression shows
      it a key, checked key by key at run time) and masks every tile it visits.
    * A mask operand that is not a constant is an error: the lowering reads the mask's data.

    Masks written as data flow (an additive bias, a 0/1 multiplier) are followed too: every op
    whose static [M, N] result follows from a float constant gets `transformer.tile_values`, per
    tile of the same blocks a letter: `Z` (all 0), `N` (all -inf), `D` (all finite; values from
    no constant count as finite) or `A` (anything), and `transformer.tile_value_sizes`. The rules
    (TileValues.cpp; each has its own test):
    * add: `Z + Z = Z`; `N + x = N` for x in {Z, D, N}; `Z + D = D + D = D` (an add of a dense
      operand makes the tile dense); anything `+ A = A`;
    * mul: `Z * x = Z` for x in {Z, D} (a multiply by zero stays zero); `D * D = D`; else `A`
      (`0 * -inf` is NaN);
    * neg: `N -> A` (+inf), others kept; relu: `N -> Z`, others kept;
    * softmax (rows): in a row of tiles holding a `Z` or `D` tile, `N -> Z` (exp of -inf is zero)
      and the rest `D`; otherwise all `A`;
    * transpose: the grid transposed; matmul: tile (i, j) is `Z` when every product of A(i, k)
      and B(k, j) is `Z`, `D` when each is `Z` or `D`, else `A`.

    Before:
    ```mlir
    %a = transformer.causal_attention %q, %k, %v {scale = 0.5 : f32}
        : (tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>) -> tensor<2x64x4xf32>
    ```
    After (blocks of 32: the diagonal tiles are partial, the one below it full, the one above empty):
    ```mlir
    %a = transformer.causal_attention %q, %k, %v
        {scale = 0.5 : f32, tile_classes = ["PE", "FP"], tile_sizes = array<i64: 32, 32>}
        : (tensor<2x64x4xf32>, tensor<2x64x4xf32>, tensor<2x64x4xf32>) -> tensor<2x64x4xf32>
    ```
    A prefix-LM expression (keys 0-39 seen from every query) over the same shape gets
    `tile_classes = ["FP", "FP"]`: key block 0 full for both query blocks.
  }];
}

#endif // GPT_CC_DIALECT_TRANSFORMS_PASSES_TD
