// Bindings that run pass pipelines over textual IR and describe target CPUs, through the compiler
// library (cc/runtime/ProgramCompiler.h), reporting MLIR diagnostics as Python exceptions.
#include "python/gpt/_gpt/bindings.h"

#include "cc/runtime/ProgramCompiler.h"

#include <pybind11/stl.h>

#include <string>
#include <vector>

namespace py = pybind11;

namespace gpt::python {

void initCompiler(py::module_ &m) {
  m.def("compiler_loaded", &programCompilerLoaded,
        "Whether this process has loaded the compiler library (_gpt_compiler.so): a process whose programs all "
        "came from the disk cache never does.");
  m.def(
      "prepare_compiler", [] { programCompiler().prepare(); }, py::call_guard<py::gil_scoped_release>(),
      "Loads the compiler library and does what a process's first compile does once (LLVM's targets, MLIR's "
      "passes), so that a load that will compile can have it done beside itself. Raises CompilerError where the "
      "library cannot be loaded.");
  m.def(
      "run_pipeline",
      [](const std::string &ir, const std::string &pipeline, bool verifyEach) {
        return programCompiler().runPipeline(ir, pipeline, verifyEach);
      },
      py::arg("ir"), py::arg("pipeline"), py::arg("verify_each") = true, py::call_guard<py::gil_scoped_release>(),
      "Parse MLIR text, run a textual pass pipeline over it and return the printed result.");
  m.def(
      "target_description",
      [](const std::string &targetCpu) {
        const JitTarget target = resolveTarget(targetCpu);
        const codegen::TargetDescription &description = target.codegenTarget();
        py::dict out;
        out["cpu"] = description.cpu;
        out["triple"] = description.triple;
        out["vector_bits"] = description.vectorBits;
        out["vector_registers"] = description.vectorRegisters;
        out["features"] = py::cast(std::vector<std::string>(description.features.begin(), description.features.end()));
        out["runs_here"] = target.runsOnHost();
        return out;
      },
      py::arg("target_cpu") = "host",
      "The CPU code for a target (CompileOptions.target_cpu) is generated for, as code generation sees it: cpu, "
      "triple, vector_bits, vector_registers, the features that choose instructions (LLVM's names: avx512bf16, "
      "avxvnni, amx-int8, ...) and whether this machine runs it. 'host' is GPT_TARGET_CPU where that is set.");
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
