// gpt-opt: mlir-opt with the transformer dialect and the gpt passes, so every pass runs on text IR.
#include "cc/Registration.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  gpt::registerAllPasses();
  mlir::DialectRegistry registry;
  gpt::registerAllDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "gpt optimizer: the transformer dialect and its passes\n", registry));
}
