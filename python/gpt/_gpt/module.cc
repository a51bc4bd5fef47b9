// Entry of the pybind11 extension gpt._gpt: only wires the submodules, one .cc per area.
#include "python/gpt/_gpt/bindings.h"

#include "cc/runtime/CompiledModel.h"

#include <pybind11/pybind11.h>

PYBIND11_MODULE(_gpt, m) {
  m.doc() = "C++ core of the gpt compiler (MLIR 19).";
  // Every MLIR or JIT failure, with MLIR's diagnostics; std::invalid_argument becomes ValueError.
  pybind11::register_exception<gpt::CompileError>(m, "CompilerError", PyExc_RuntimeError);
  gpt::python::initCompiler(m);
  gpt::python::initModel(m);
  gpt::python::initFunction(m);
  gpt::python::initKernels(m);
  gpt::python::initDiskCache(m);
  gpt::python::initGpu(m);
}
