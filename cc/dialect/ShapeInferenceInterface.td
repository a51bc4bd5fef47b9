// The ShapeInference op interface: ops that can compute their result shape from their operands.
#ifndef GPT_SHAPE_INFERENCE_INTERFACE_TD
#define GPT_SHAPE_INFERENCE_INTERFACE_TD

include "mlir/IR/OpBase.td"

def ShapeInferenceOpInterface : OpInterface<"ShapeInference"> {
  let cppNamespace = "::mlir::transformer";
  let description = [{
    Implemented by ops whose result type follows from their operand types. The
    `--transformer-shape-inference` pass calls `inferShapes` on every op whose results are
    unranked once all its operands are ranked.
  }];
  let methods = [
    InterfaceMethod<[{
        Refines the result types from the current operand types. Emits an error and returns
        failure when the operand shapes conflict with each other or with a ranked result type.
      }],
      "::llvm::LogicalResult", "inferShapes">,
  ];
}

#endif // GPT_SHAPE_INFERENCE_INTERFACE_TD
