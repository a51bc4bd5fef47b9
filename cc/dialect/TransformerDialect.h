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

// The formats `transformer.packed_matmul` names its weight's storage by (its `format`).
#include "cc/kernels/WeightFormats.h"

#define GET_OP_CLASSES
#include "cc/dialect/TransformerOps.h.inc"

#endif // GPT_CC_DIALECT_TRANSFORMERDIALECT_H
