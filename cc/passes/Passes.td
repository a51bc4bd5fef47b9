// Passes of the gpt compiler over the `transformer` dialect.
#ifndef GPT_CC_PASSES_PASSES_TD
#define GPT_CC_PASSES_PASSES_TD

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

def TransformerToLinalg : Pass<"transformer-to-linalg", "::mlir::ModuleOp"> {
  let summary = "Lower the transformer dialect to linalg on tensors";
  let description = [{
    Rewrites every `transformer` op into linalg, tensor, arith and math ops on tensors with the
    same meaning: `matmul` becomes `linalg.matmul` or `linalg.batch_matmul` (with reshapes when
    the weight is shared across a batch), `transpose` becomes `linalg.transpose`, elementwise ops
    become `linalg.generic` with broadcasting indexing maps, and `layer_norm` / `softmax` become
    row reductions followed by an elementwise `linalg.generic`. Needs static shapes: run
    `--transformer-shape-inference` first.

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
    "::mlir::tensor::TensorDialect",
  ];
}

#endif // GPT_CC_PASSES_PASSES_TD
