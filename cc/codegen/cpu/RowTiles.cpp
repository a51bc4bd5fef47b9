// The row tiles of a packed matmul's loop nest (see RowTiles.h).
#include "cc/codegen/cpu/RowTiles.h"

#include "mlir/Dialect/Utils/StaticValueUtils.h"

namespace gpt::codegen {

RowTiles rowTilesAround(mlir::scf::ForOp kLoop, mlir::Value panel) {
  auto tileLoop = llvm::dyn_cast_or_null<mlir::scf::ForOp>(kLoop->getParentOp());
  if (!tileLoop || !tileLoop.isDefinedOutsideOfLoop(panel) || mlir::getConstantIntValue(tileLoop.getLowerBound()) != 0)
    return {};
  std::optional<int64_t> step = mlir::getConstantIntValue(tileLoop.getStep()),
                         end = mlir::getConstantIntValue(tileLoop.getUpperBound());
  if (!step || !end || *step <= 0 || *end % *step != 0) return {};
  return {tileLoop, *end / *step, *step};
}

} // namespace gpt::codegen
