// Registration of dialects and passes (see Registration.h). This is the one translation unit
// that includes MLIR's InitAll* headers: they are slow to compile, so nothing else should.
#include "cc/Registration.h"

#include "cc/dialect/TransformerDialect.h"
#include "cc/passes/Passes.h"
#include "cc/passes/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"

#include <mutex>

namespace gpt {

void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<mlir::transformer::TransformerDialect>();
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
}

void registerAllPasses() {
  static std::once_flag once;
  std::call_once(once, [] {
    mlir::registerAllPasses();
    mlir::transformer::registerTransformerPasses();
    gpt::registerPipelines();
  });
}

} // namespace gpt
