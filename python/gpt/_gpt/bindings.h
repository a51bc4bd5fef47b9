// Declarations of the init functions that add each area's bindings to the gpt._gpt module.
#ifndef GPT_PYTHON_GPT__GPT_BINDINGS_H
#define GPT_PYTHON_GPT__GPT_BINDINGS_H

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace gpt {
struct CompileOptions;
struct GPTConfig;
} // namespace gpt

namespace gpt::python {

/// The compile options both compiled-program bindings take from Python (defined in model.cc);
/// an unknown pipeline name is a std::invalid_argument (ValueError) naming it.
CompileOptions compileOptions(const std::string &pipeline, int threads, const std::string &cacheDir,
                              uint64_t cacheMaxBytes, const std::string &targetCpu);

/// Text-IR entry points: parse transformer-dialect IR, run a named pass pipeline, print the result.
/// A gpt.GPTConfig (python/gpt/config.py) read into the compiler's config.
GPTConfig gptConfig(const pybind11::handle &config);

void initCompiler(pybind11::module_ &m);

/// CompiledModel: a GPT's compiled entry points, called with numpy arrays (zero-copy).
void initModel(pybind11::module_ &m);

/// CompiledFunction: an imported graph's function (gpt.frontend), called with numpy arrays in place.
void initFunction(pybind11::module_ &m);

/// The on-disk compile cache: list, clear and evict its entries.
void initDiskCache(pybind11::module_ &m);

/// The hand-written kernels of cc/kernels the loaders call (llama.cpp blocks dequantized, panels
/// packed) and the weight-format table (gpt.config and gpt.kept_formats read it).
void initKernels(pybind11::module_ &m);

void initGpu(pybind11::module_ &m);

} // namespace gpt::python

#endif // GPT_PYTHON_GPT__GPT_BINDINGS_H
