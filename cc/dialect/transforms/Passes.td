// Transformations of the `transformer` dialect that stay within it.
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

#endif // GPT_CC_DIALECT_TRANSFORMS_PASSES_TD
