// Bindings that run pass pipelines over textual IR and describe target CPUs, through the compiler
// library (cc/runtime/ProgramCompiler.h), reporting MLIR diagnostics as Python exceptions.
#include "python/gpt/_gpt/bindings.h"

#include "cc/runtime/ProgramCompiler.h"

#include <string>

namespace py = pybind11;

namespace gpt::python {

void initCompiler(py::module_ &m) {
  m.def("compiler_loaded", &programCompilerLoaded,
        "Whether this process has loaded the compiler library (_gpt_compiler.so): a process whose programs all "
        "came from the disk cache never does.");
  m.def(
      "run_pipeline",
      [](const std::string &ir, const std::string &pipeline, bool verifyEach) {
        return programCompiler().runPipeline(ir, pipeline, verifyEach);
      },
      py::arg("ir"), py::arg("pipeline"), py::arg("verify_each") = true, py::call_guard<py::gil_scoped_release>(),
      "Parse MLIR text, run a textual pass pipeline over it and return the printed result.");
  m.def(
      "tile_parameters",
      [](const std::string &targetCpu) {
        const target::TileParameters tiles = resolveTarget(targetCpu).tileParameters();
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
