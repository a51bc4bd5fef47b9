// Dispatch formation for the CUDA target: a transformer-dialect entry point becomes a fixed
// sequence of kernel launches over device buffers (docs/GPU.md, "programs").
//
// Each op of the (inlined) entry function is matched to a kernel family of GpuKernels.h, with
// the elementwise ops that follow a matmul fused into its epilogue (bias, GELU, residual) and
// the two embeddings of GPT-2 fused into one gather; slices and head splits/merges cost nothing,
// they become strided views of the buffer their input lives in. Shapes are static, so every
// intermediate gets a fixed place in one scratch buffer, and a program is data: the runtime
// replays it (as one CUDA graph) without the compiler.
#ifndef GPT_CC_CODEGEN_GPU_GPUPROGRAMS_H
#define GPT_CC_CODEGEN_GPU_GPUPROGRAMS_H

#include "cc/builder/EntryPoints.h"
#include "cc/builder/GPTConfig.h"
#include "cc/builder/Parameters.h"
#include "cc/codegen/gpu/GpuKernels.h"

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace gpt::gpu {

/// How the GPU programs take their weights: unpacked f32, the vocabulary padded to a multiple of
/// 256 as on AVX-512 (the artifact's buffers and weights file keep the layout they have always had).
inline WeightStorage gpuWeightStorage() {
  WeightStorage storage;
  storage.tiles = target::kDefaultTileParameters;
  return storage;
}

/// One device allocation of the artifact.
struct BufferSpec {
  std::string name;
  std::string role; ///< weight | input | cache | scratch | output
  int64_t bytes = 0;
  // Weights only: how the weights file stores it.
  std::string dtype;          ///< f32 | bf16
  std::vector<int64_t> shape; ///< as stored
  std::string layout;         ///< as_given | transposed (stored [N, K] for a [K, N] parameter)
};

/// A kernel argument: a device pointer, `offset` bytes into buffer `buffer`.
struct PointerArg {
  int64_t buffer = -1, offset = 0;
};

struct LaunchSpec {
  std::string kernel;
  std::array<int64_t, 3> grid, block;
  std::vector<PointerArg> args;
  llvm::json::Object op; ///< KernelSource::op
};

struct ProgramSpec {
  std::string entry; ///< forward | step
  int64_t tokens = 0;
  std::map<std::string, PointerArg> inputs;
  std::vector<LaunchSpec> launches;
  PointerArg logits;
  int64_t logitsRows = 0, logitsRowStride = 0;
};

/// Collects the programs of one artifact: the buffers they share (weights, caches, inputs,
/// scratch, logits) and the kernels they launch, each distinct source once.
class ArtifactBuilder {
public:
  /// `weights`: the element type of matmul weights (and of tables they share storage with);
  /// `maxTokens`: the largest program, which sizes the input buffer.
  ArtifactBuilder(const GPTConfig &config, ElementType weights, int64_t cacheLength, int64_t maxTokens);

  /// Forms the launches of `function` (built for `tokens` tokens, shape-inferred and inlined).
  /// Throws std::invalid_argument naming an op the CUDA target cannot lower.
  void addProgram(mlir::func::FuncOp function, EntryPoint entry, int64_t tokens);

  const std::vector<BufferSpec> &buffers() const { return buffers_; }
  const std::vector<ProgramSpec> &programs() const { return programs_; }
  /// The (key, value) buffer indices of each layer's cache.
  const std::vector<std::array<int64_t, 2>> &cacheBuffers() const { return cacheBuffers_; }
  /// Every kernel, as `gpu.func` text in order of first use.
  const std::vector<std::string> &kernelTexts() const { return kernelTexts_; }

private:
  struct View;
  class ProgramFormation;
  int64_t weightBuffer(const ParameterSpec &spec, bool matmulOperand);
  std::string kernelName(const std::string &family, const KernelSource &source);

  GPTConfig config;
  ElementType weightElement;
  int64_t cacheLength, maxTokens;
  std::vector<ParameterSpec> parameters;
  std::vector<BufferSpec> buffers_;
  std::map<std::string, int64_t> weightBuffers;
  std::set<std::string> matrixNames; ///< parameters some matmul reads (stored low precision)
  int64_t inputBuffer = -1, scratchBuffer = -1, logitsBuffer = -1;
  std::map<std::string, int64_t> inputOffsets;
  std::vector<std::array<int64_t, 2>> cacheBuffers_;
  std::vector<ProgramSpec> programs_;
  std::vector<std::string> kernelTexts_;
  std::map<std::string, std::string> kernelNames; ///< source text -> name
  std::map<std::string, int> familyCounts;
};

} // namespace gpt::gpu

#endif // GPT_CC_CODEGEN_GPU_GPUPROGRAMS_H
