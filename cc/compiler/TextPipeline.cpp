// Textual pass pipelines over textual IR (see Compilers.h): what `gpt.run_pipeline` and the tests
// of single passes run, with MLIR's diagnostics reported as CompileError.
#include "cc/compiler/Compilers.h"

#include "cc/DiagnosticCapture.h"
#include "cc/ParseInput.h"
#include "cc/Registration.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <cctype>
#include <string>
#include <vector>

namespace gpt {

namespace {

/// Raised in Python as gpt.CompilerError (registered in python/gpt/_gpt/module.cc).
[[noreturn]] void fail(const std::string &message) { throw CompileError(message); }

/// Splits a textual pipeline at the commas that are not inside `(...)` or `{...}`.
std::vector<std::string> splitTopLevel(const std::string &pipeline) {
  std::vector<std::string> elements(1);
  int depth = 0;
  for (char c : pipeline) {
    if (c == '(' || c == '{') ++depth;
    if (c == ')' || c == '}') --depth;
    if (c == ',' && depth == 0)
      elements.emplace_back();
    else if (!std::isspace(static_cast<unsigned char>(c)))
      elements.back() += c;
  }
  return elements;
}

/// Adds each element of a textual pipeline to the module pass manager. MLIR's parser does not
/// nest implicitly, so an element that cannot run on the module (a function pass such as
/// transformer-shape-inference) is retried nested under func.func.
void addPipeline(mlir::OpPassManager &pm, const std::string &pipeline) {
  if (pipeline.find_first_not_of(" \t\n") == std::string::npos) return; // no passes: print as parsed
  for (const std::string &element : splitTopLevel(pipeline)) {
    if (element.empty()) fail("invalid pass pipeline '" + pipeline + "': empty element");
    std::string moduleErrors, functionErrors;
    llvm::raw_string_ostream moduleStream(moduleErrors), functionStream(functionErrors);
    mlir::OpPassManager trial(mlir::ModuleOp::getOperationName());
    if (mlir::succeeded(mlir::parsePassPipeline(element, trial, moduleStream))) {
      (void)mlir::parsePassPipeline(element, pm, moduleStream);
      continue;
    }
    if (mlir::succeeded(mlir::parsePassPipeline(element, pm.nest<mlir::func::FuncOp>(), functionStream))) continue;
    fail("invalid pass pipeline '" + pipeline + "': " + moduleErrors);
  }
}

} // namespace

std::string runTextPipeline(const std::string &ir, const std::string &pipeline, bool verifyEach) {
  mlir::MLIRContext ctx(gpt::processRegistry());
  ctx.allowUnregisteredDialects(false);
  DiagnosticCapture diagnostics(ctx);

  mlir::OwningOpRef<mlir::ModuleOp> module = gpt::parseModuleText(ir, &ctx, "input");
  if (!module) fail(diagnostics.message("failed to parse the input IR"));

  mlir::PassManager pm(&ctx, mlir::ModuleOp::getOperationName());
  pm.enableVerifier(verifyEach);
  addPipeline(pm, pipeline);
  if (mlir::failed(pm.run(*module))) fail(diagnostics.message("pass pipeline '" + pipeline + "' failed"));

  std::string out;
  llvm::raw_string_ostream os(out);
  module->print(os);
  return out;
}

} // namespace gpt
