// Entry of the pybind11 extension gpt._gpt: only wires the submodules, one .cc per area.
#include "python/gpt/_gpt/bindings.h"

#include <pybind11/pybind11.h>

PYBIND11_MODULE(_gpt, m) {
  m.doc() = "C++ core of the gpt compiler (MLIR 19).";
  gpt::python::initCompiler(m);
}
