// The `transformer` dialect: its ops and the ShapeInference op interface.
#ifndef GPT_CC_DIALECT_TRANSFORMERDIALECT_H
#define GPT_CC_DIALECT_TRANSFORMERDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "cc/dialect/TransformerDialect.h.inc"

#include "cc/dialect/ShapeInferenceInterface.h.inc"

namespace mlir::transformer {
/// How `transformer.packed_matmul` stores its weight (see the op's description).
enum class PackedWeightFormat { F32, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K };
} // namespace mlir::transformer

#define GET_OP_CLASSES
#include "cc/dialect/TransformerOps.h.inc"

#endif // GPT_CC_DIALECT_TRANSFORMERDIALECT_H
