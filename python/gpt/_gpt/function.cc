// Bindings of CompiledFunction: an imported graph's function, called with numpy arrays in place.
#include "python/gpt/_gpt/bindings.h"

#include "cc/runtime/CompiledFunction.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <stdexcept>

namespace py = pybind11;

namespace gpt::python {
namespace {

/// The numpy dtype that holds elements of an MLIR element type.
py::dtype dtypeOf(const std::string &elementType) {
  if (elementType == "f32") return py::dtype::of<float>();
  if (elementType == "i64") return py::dtype::of<int64_t>();
  if (elementType == "i32") return py::dtype::of<int32_t>();
  throw std::invalid_argument("unsupported element type " + elementType);
}

py::list signatures(const std::vector<TensorSignature> &list) {
  py::list out;
  for (const TensorSignature &s : list) out.append(py::make_tuple(py::tuple(py::cast(s.shape)), s.elementType));
  return out;
}

/// The data pointer of `array`, checked against `signature`: no implicit conversion, which
/// would silently copy a weight on every call.
void *checkedData(const py::array &array, const TensorSignature &signature, const std::string &what, bool written) {
  if (!array.dtype().is(dtypeOf(signature.elementType)))
    throw std::invalid_argument(what + " must have element type " + signature.elementType + ", got " +
                                py::str(array.dtype()).cast<std::string>());
  if (!(array.flags() & py::array::c_style)) throw std::invalid_argument(what + " must be C-contiguous");
  if (written && !array.writeable()) throw std::invalid_argument(what + " must be writable");
  std::vector<int64_t> shape(array.shape(), array.shape() + array.ndim());
  if (shape != signature.shape) {
    std::string want, got;
    for (int64_t d : signature.shape) want += std::to_string(d) + ",";
    for (int64_t d : shape) got += std::to_string(d) + ",";
    throw std::invalid_argument(what + " has shape (" + got + ") but the function takes (" + want + ")");
  }
  return const_cast<void *>(array.data());
}

} // namespace

void initFunction(py::module_ &m) {
  py::class_<CompiledFunction>(m, "CompiledFunction")
      .def(py::init([](const std::string &ir, const std::string &name, const std::string &pipeline, int threads,
                       const std::string &cacheDir, uint64_t cacheMaxBytes, const std::string &targetCpu) {
             CompileOptions options = compileOptions(pipeline, threads, cacheDir, cacheMaxBytes, targetCpu);
             return std::make_unique<CompiledFunction>(ir, name, options);
           }),
           py::arg("ir"), py::arg("name"), py::arg("pipeline"), py::arg("threads"), py::arg("cache_dir"),
           py::arg("cache_max_bytes"), py::arg("target_cpu"), py::call_guard<py::gil_scoped_release>())
      .def(
          "arguments", [](const CompiledFunction &f) { return signatures(f.arguments()); },
          "[(shape, element type)] of the function's arguments.")
      .def(
          "results", [](const CompiledFunction &f) { return signatures(f.results()); },
          "[(shape, element type)] of the function's results.")
      .def(
          "ir",
          [](CompiledFunction &f, const std::string &stageName) {
            std::optional<Stage> stage = parseStage(stageName);
            if (!stage) throw std::invalid_argument("unknown stage '" + stageName + "'");
            py::gil_scoped_release release;
            return f.ir(*stage);
          },
          py::arg("stage"), "The module after a named stage of the pipeline.")
      .def("compile", &CompiledFunction::compile, py::call_guard<py::gil_scoped_release>())
      .def("is_compiled", &CompiledFunction::isCompiled)
      .def("compile_seconds", &CompiledFunction::compileSeconds)
      .def("loaded_from_disk_cache", &CompiledFunction::loadedFromDiskCache)
      .def(
          "call",
          [](CompiledFunction &f, const py::list &arguments, const py::list &results) {
            if (arguments.size() != f.arguments().size())
              throw std::invalid_argument("expected " + std::to_string(f.arguments().size()) + " arguments, got " +
                                          std::to_string(arguments.size()));
            if (results.size() != f.results().size())
              throw std::invalid_argument("expected " + std::to_string(f.results().size()) + " result buffers, got " +
                                          std::to_string(results.size()));
            std::vector<void *> buffers;
            for (size_t i = 0; i < arguments.size(); ++i)
              buffers.push_back(checkedData(arguments[i].cast<py::array>(), f.arguments()[i],
                                            "argument " + std::to_string(i), false));
            for (size_t i = 0; i < results.size(); ++i)
              buffers.push_back(
                  checkedData(results[i].cast<py::array>(), f.results()[i], "result " + std::to_string(i), true));
            py::gil_scoped_release release;
            f.call(buffers);
          },
          py::arg("arguments"), py::arg("results"),
          "Runs the function on numpy arrays (read in place), writing its results into `results`.");
}

} // namespace gpt::python
