// Registration of dialects and passes (see Registration.h). This is the one translation unit
// that includes MLIR's InitAll* headers: they are slow to compile, so nothing else should.
#include "cc/Registration.h"

#include "cc/codegen/common/Passes.h"
#include "cc/codegen/common/TransformOps.h"
#include "cc/codegen/cpu/Passes.h"
#include "cc/codegen/cpu/Pipelines.h"
#include "cc/conversion/Passes.h"
#include "cc/dialect/TransformerDialect.h"
#include "cc/dialect/transforms/Passes.h"

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
  codegen::registerTransformExtension(registry);
}

void registerAllPasses() {
  static std::once_flag once;
  std::call_once(once, [] {
    mlir::registerAllPasses();
    mlir::transformer::registerTransformerTransformsPasses();
    conversion::registerConversionPasses();
    codegen::registerCodegenCommonPasses();
    codegen::registerCodegenCpuPasses();
    gpt::registerPipelines();
  });
}

const mlir::DialectRegistry &processRegistry() {
  static const mlir::DialectRegistry *instance = [] {
    auto *registry = new mlir::DialectRegistry();
    gpt::registerAllDialects(*registry);
    gpt::registerAllPasses();
    return registry;
  }();
  return *instance;
}

} // namespace gpt
