// The CUDA target: compiles a model's entry points into a GPU artifact's parts (cc/codegen/gpu, in
// the compiler library).
#include "bindings.h"

#include "cc/runtime/ProgramCompiler.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace gpt::python {

void initGpu(py::module_ &m) {
  m.def(
      "compile_gpu_artifact",
      [](const py::handle &configObject, const std::string &chip, const std::vector<int64_t> &tokens,
         int64_t cacheLength, bool bf16, const std::string &libdevice) {
        gpu::GpuTargetOptions options;
        options.chip = chip;
        options.tokens = tokens;
        options.cacheLength = cacheLength;
        options.bf16 = bf16;
        options.libdevice = libdevice;
        GPTConfig config = gptConfig(configObject);
        gpu::GpuArtifact artifact;
        {
          py::gil_scoped_release release;
          artifact = programCompiler().compileGpuArtifact(config, options);
        }
        py::dict parts;
        parts["manifest"] = artifact.manifest;
        parts["ptx"] = artifact.ptx;
        parts["gpu"] = artifact.kernels;
        parts["nvvm"] = artifact.nvvm;
        return parts;
      },
      py::arg("config"), py::arg("chip"), py::arg("tokens"), py::arg("cache_length"), py::arg("bf16"),
      py::arg("libdevice"),
      "A gpt.GPTConfig's entry points compiled for an NVIDIA GPU: {'manifest': JSON text (docs/GPU.md, without "
      "the config), 'ptx': the PTX module, 'gpu': the kernels before lowering, 'nvvm': after NVVM conversion}.");
}

} // namespace gpt::python
