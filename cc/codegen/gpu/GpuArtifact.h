// Compiles a GPT for an NVIDIA GPU: its entry points formed into kernel launches (GpuPrograms.h),
// the kernels lowered through NVVM to PTX, and the manifest that ties them together
// (docs/GPU.md). Runs on the build machine; no CUDA toolkit or GPU is needed.
#ifndef GPT_CC_CODEGEN_GPU_GPUARTIFACT_H
#define GPT_CC_CODEGEN_GPU_GPUARTIFACT_H

#include "cc/builder/GPTConfig.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gpt::gpu {

struct GpuTargetOptions {
  std::string chip = "sm_90";  ///< sm_80 or newer: the PTX is JIT-compiled by the driver for it
  std::vector<int64_t> tokens; ///< the token counts programs are built for (forward and step each)
  int64_t cacheLength = 0;     ///< positions per KV cache; 0: block_size
  bool bf16 = false;           ///< matmul weights (and the tables sharing them) in bf16
  std::string libdevice;       ///< libdevice.10.bc, linked for the math functions
};

struct GpuArtifact {
  std::string manifest; ///< JSON: target, buffers, cache, programs (the caller adds the config)
  std::string ptx;      ///< the one PTX module, text
  std::string kernels;  ///< the `gpu.module` before lowering ("gpu" stage)
  std::string nvvm;     ///< after the conversion to NVVM ("nvvm" stage)
};

/// The PTX ISA version the artifact's PTX declares (".version").
constexpr const char *kPtxVersion = "8.0";

/// Throws std::invalid_argument for a configuration or target this backend does not handle, and
/// std::runtime_error (with MLIR's diagnostics) when lowering fails.
GpuArtifact compileGpuArtifact(const GPTConfig &config, const GpuTargetOptions &options);

} // namespace gpt::gpu

#endif // GPT_CC_CODEGEN_GPU_GPUARTIFACT_H
