// gpt-opt: mlir-opt with the transformer dialect and the gpt passes, so every pass runs on text IR.
// The input is read here, not by MlirOptMain, to refuse nesting deeper than the parser's stack
// allows (cc/ParseInput.h) with an error instead of a crash.
#include "cc/ParseInput.h"
#include "cc/Registration.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <optional>
#include <string>

int main(int argc, char **argv) {
  gpt::registerAllPasses();
  mlir::DialectRegistry registry;
  gpt::registerAllDialects(registry);
  auto [inputFilename, outputFilename] =
      mlir::registerAndParseCLIOptions(argc, argv, "gpt optimizer: the transformer dialect and its passes\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  // --show-dialects reads no input.
  if (config.shouldShowDialects())
    return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, inputFilename, outputFilename, registry));

  llvm::InitLLVM initLLVM(argc, argv);
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input = mlir::openInputFile(inputFilename, &error);
  if (!input) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (std::optional<size_t> offset = gpt::findExcessiveNesting(input->getBuffer())) {
    llvm::SourceMgr sources;
    const char *at = input->getBufferStart() + *offset;
    sources.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
    sources.PrintMessage(llvm::SMLoc::getFromPointer(at), llvm::SourceMgr::DK_Error, gpt::nestingLimitMessage());
    return 1;
  }
  std::unique_ptr<llvm::ToolOutputFile> output = mlir::openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(output->os(), std::move(input), registry, config))) return 1;
  output->keep();
  return 0;
}
