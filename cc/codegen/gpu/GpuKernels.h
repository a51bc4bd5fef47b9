// The GPU kernels of the CUDA target, written as `gpu.func` source with every shape baked in.
//
// Each generator specializes one kernel family (a row gather, a row normalization, the two
// matmul shapes, attention, the KV-cache write) to static sizes and strides, so that the NVVM
// backend sees constant trip counts and addresses; the dispatch formation (GpuPrograms.h) picks
// the family and the sizes from the transformer-dialect op it lowers. Arguments are bare device
// pointers (the runtime passes buffer + offset), the launch geometry comes with the source.
// The generators are defined by family: GpuKernelsRows.cpp (gather, norms, SwiGLU),
// GpuKernelsMatmul.cpp and GpuKernelsAttention.cpp (attention, rope, the cache write).
#ifndef GPT_CC_CODEGEN_GPU_GPUKERNELS_H
#define GPT_CC_CODEGEN_GPU_GPUKERNELS_H

#include "llvm/Support/JSON.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gpt::gpu {

/// The element type a kernel reads a weight in: f32, or bf16 held as its 16 raw bits (widened
/// exactly to f32 in registers, so no backend bf16 support is needed).
enum class ElementType { F32, BF16 };

/// A kernel's `gpu.func` source, named `@KERNEL` (the caller renames it once it is unique), and
/// how it is launched.
struct KernelSource {
  std::string text;
  std::array<int64_t, 3> grid{1, 1, 1}, block{1, 1, 1};
  /// What the kernel computes: its family and parameters, for the manifest (a reader can check
  /// or emulate a launch without reading PTX).
  llvm::json::Object op;
};

/// A strided operand: element (i0, i1, i2) of a rank-<=3 view sits at sum(i_k * strides[k]) from
/// the pointer the kernel receives.
struct Strides {
  std::vector<int64_t> sizes, strides;
  /// One past the largest element offset the view reaches.
  int64_t span() const;
};

/// out[t, :] = table[ids[t], :] (+ table2[ids2[t], :]): token and position embeddings, and the
/// step's last-row selection. Tables are [rows, width] with row stride `rowStride`.
struct GatherRows {
  int64_t tokens, width;
  int64_t rows, rowStride;
  ElementType element = ElementType::F32;
  bool second = false; ///< add a second gathered table (f32)
  int64_t rows2 = 0, rowStride2 = 0;
};
KernelSource gatherRows(const GatherRows &k);

/// LayerNorm (with weight and bias) or RMSNorm (weight only) of each row of a [rows, width] input
/// with row stride `inputStride`, written contiguous. One block per row.
struct NormRows {
  int64_t rows, width, inputStride;
  float epsilon;
  bool rms = false;
};
KernelSource normRows(const NormRows &k);

/// What follows a matmul in the same kernel: + bias[n], then GELU (tanh), then + residual[m, n].
struct Epilogue {
  bool bias = false, gelu = false, residual = false;
  int64_t residualStride = 0;
};

/// out[m, n] = sum_k a[m, k] * b[n, k] for m < rows, n < columns: a weight stored [N, K] (torch's
/// Linear layout) whose rows past `validColumns` do not exist (the padded vocabulary: those
/// columns are 0). `a` has row stride `aStride`, `out` row stride `columns`. K % 4 == 0.
struct Matmul {
  int64_t rows, columns, validColumns, depth;
  int64_t aStride;
  ElementType element = ElementType::F32;
  Epilogue epilogue;
};
/// One warp per output column, every row at once: the decode step and short prefills (rows <= 8),
/// where the weight is read once and bandwidth is all that matters.
KernelSource matvec(const Matmul &k);
/// 64x64 output tiles through shared memory, 4x4 per thread: prefill and forward.
KernelSource tiledMatmul(const Matmul &k);
/// The largest `rows` matvec() takes.
constexpr int64_t kMatvecMaxRows = 8;

/// Causal attention, one warp per (query row, head), online softmax over the keys
/// j <= offset + i, where `offset` is 0 or read from an i64 in device memory (the cache offset).
/// q, k, v, out: [T, H, d] / [keys, Hkv, d] views given as strides (token, head, element).
struct Attention {
  int64_t tokens, heads, kvHeads, headSize, keys;
  float scale;
  bool offsetFromMemory = false;
  std::array<int64_t, 2> q, k, v, out; ///< (token stride, head stride); the element stride is 1
  /// Warps per (query row, head): each takes every warps-th key, and the warps' softmax states are
  /// merged through shared memory at the end (long contexts: the decode step's keys).
  int64_t warps = 1;
};
KernelSource attention(const Attention &k);

/// Rotary position embedding of a [H, T, d] view (strides (token, head), element stride 1) into a
/// contiguous [H, T, d] output: pairs (j, j + d/2), or (2i, 2i + 1) when `interleaved`, rotate by
/// positions[t] * theta_i, the angle and its cosine and sine in f64 as on the CPU. `theta` holds
/// the d / 2 frequencies (RopeOp::getFrequencies: Llama 3's scaling applied), baked in.
struct Rope {
  int64_t heads, tokens, headSize;
  bool interleaved = false;
  std::array<int64_t, 2> input; ///< (token stride, head stride)
  std::vector<double> theta;
};
KernelSource rope(const Rope &k);

/// out[t, j] = silu(gate[t, j]) * up[t, j] over [tokens, width] views with row strides, out
/// contiguous: Llama's MLP between its two matmuls.
struct Swiglu {
  int64_t tokens, width, gateStride, upStride;
};
KernelSource swiglu(const Swiglu &k);

/// cache[h, offset + t, :] = update(t, h, :) for t < tokens while offset + t < cacheLength, the
/// offset an i64 in device memory: the step's new keys or values, in place.
struct CacheWrite {
  int64_t tokens, kvHeads, headSize, cacheLength;
  std::array<int64_t, 2> update; ///< (token stride, head stride) of the update
};
KernelSource cacheWrite(const CacheWrite &k);

} // namespace gpt::gpu

#endif // GPT_CC_CODEGEN_GPU_GPUKERNELS_H
