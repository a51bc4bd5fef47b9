// The `transformer` dialect definition and the base class of its ops.
#ifndef GPT_TRANSFORMER_DIALECT_TD
#define GPT_TRANSFORMER_DIALECT_TD

include "mlir/IR/OpBase.td"

def Transformer_Dialect : Dialect {
  let name = "transformer";
  let cppNamespace = "::mlir::transformer";
  let summary = "Tensor-level operations of a GPT-style transformer.";
  let description = [{
    The ops a GPT forward pass is written in, on `f32` tensors that may be ranked or unranked.
    Results of unranked type are refined by `--transformer-shape-inference`; the whole dialect is
    lowered to linalg on tensors by `--transformer-to-linalg`.
  }];
  // Folding may produce constants that must be turned back into `transformer.constant`.
  let hasConstantMaterializer = 1;
}

class Transformer_Op<string mnemonic, list<Trait> traits = []>
    : Op<Transformer_Dialect, mnemonic, traits>;

// Operands and results are `F32Tensor` (from CommonTypeConstraints.td): ranked or unranked f32 tensors.

#endif // GPT_TRANSFORMER_DIALECT_TD
