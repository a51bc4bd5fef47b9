// The `transform.gpt.*` Transform-dialect extension ops (TransformOps.td) and their registration.
#ifndef GPT_CC_CODEGEN_COMMON_TRANSFORMOPS_H
#define GPT_CC_CODEGEN_COMMON_TRANSFORMOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Transform/IR/TransformDialect.h"
#include "mlir/Dialect/Transform/IR/TransformTypes.h"
#include "mlir/Dialect/Transform/Interfaces/TransformInterfaces.h"
#include "mlir/IR/OpDefinition.h"

namespace mlir {
class DialectRegistry;
} // namespace mlir

#define GET_OP_CLASSES
#include "cc/codegen/common/TransformOps.h.inc"

namespace gpt::codegen {

/// Adds the `transform.gpt.*` ops to the transform dialect when it is loaded.
void registerTransformExtension(mlir::DialectRegistry &registry);

} // namespace gpt::codegen

#endif // GPT_CC_CODEGEN_COMMON_TRANSFORMOPS_H
