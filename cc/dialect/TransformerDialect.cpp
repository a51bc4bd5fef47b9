// Registration of the `transformer` dialect and its constant materializer.
#include "cc/dialect/TransformerDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace mlir::transformer;

#include "cc/dialect/TransformerDialect.cpp.inc"

void TransformerDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "cc/dialect/TransformerOps.cpp.inc"
      >();
}

Operation *TransformerDialect::materializeConstant(OpBuilder &builder, Attribute value, Type type, Location loc) {
  auto elements = dyn_cast<DenseFPElementsAttr>(value);
  if (!elements || elements.getType() != type || !elements.getElementType().isF32()) return nullptr;
  return builder.create<ConstantOp>(loc, elements);
}
