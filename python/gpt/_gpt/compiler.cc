// Bindings that run pass pipelines over textual IR, reporting MLIR diagnostics as Python exceptions.
#include "python/gpt/_gpt/bindings.h"

#include "cc/ParseInput.h"
#include "cc/Registration.h"
#include "cc/runtime/CompiledModel.h"
#include "cc/runtime/DiagnosticCapture.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <cctype>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace gpt::python {
namespace {

/// Raised in Python as gpt.CompilerError (registered in module.cc).
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

/// Parses `ir`, runs the textual pass `pipeline` (e.g. "canonicalize,transformer-shape-inference";
/// function passes nest implicitly) and returns the printed module.
std::string runPipeline(const std::string &ir, const std::string &pipeline, bool verifyEach) {
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

} // namespace

void initCompiler(py::module_ &m) {
  m.def("run_pipeline", &runPipeline, py::arg("ir"), py::arg("pipeline"), py::arg("verify_each") = true,
        py::call_guard<py::gil_scoped_release>(),
        "Parse MLIR text, run a textual pass pipeline over it and return the printed result.");
  m.def(
      "tile_parameters",
      [](const std::string &targetCpu) {
        const target::TileParameters tiles = JitTarget::named(targetCpu).tileParameters();
        py::dict parameters;
        parameters["vector_lanes"] = tiles.vectorLanes;
        parameters["panel_width"] = tiles.panelWidth;
        parameters["tile_rows"] = tiles.tileRows;
        parameters["vocab_multiple"] = tiles.vocabMultiple;
        parameters["smallest_bucket"] = tiles.smallestBucket;
        return parameters;
      },
      py::arg("target_cpu") = "host",
      "The tile parameters code for a target CPU (CompileOptions.target_cpu) is built with: vector_lanes, "
      "panel_width, tile_rows, vocab_multiple, smallest_bucket.");
}

} // namespace gpt::python
