// The target parameters every layer agrees on: register tile, panel width, thread pieces, the
// smallest sequence bucket and the vocabulary padding, all computed by tileParameters() from the
// target's vector register file. The builder packs weights and pads the vocabulary with the
// parameters of the target it builds for; the passes read those of the module's `gpt.target`, or
// kDefaultTileParameters (AVX-512's) when the module has none.
#ifndef GPT_CC_TARGETPARAMETERS_H
#define GPT_CC_TARGETPARAMETERS_H

#include <algorithm>
#include <array>
#include <cstdint>

namespace gpt::target {

/// The most rows a register tile has on any target. The smallest sequence bucket is this many
/// rows, so that prefill and forward programs never have a partial row tile, whatever the target.
constexpr int64_t kMaxTileRows = 8;

/// The cache line the prefetching passes count in: 64 bytes on every x86 and AArch64 target the
/// project compiles for.
constexpr int64_t kCacheLineBytes = 64;

/// The fewest loop iterations (multiply-adds, for a matmul) an op needs before it is split across
/// threads: an OpenMP fork and join costs microseconds, which only pays off on more work than
/// this. Small models' ops (a decode step of the embedded model) stay on one thread. A cost of the
/// threading runtime, not of the register file: the same on every target.
constexpr int64_t kMinParallelWork = int64_t(1) << 18;

/// The sizes code generation and the builder take for one register file.
struct TileParameters {
  /// f32 lanes of one vector register (AVX-512: 16, AVX2: 8, NEON: 4).
  int64_t vectorLanes = 0;
  /// Registers a register tile may fill with accumulators: half of them, the rest holding the
  /// weight lanes and the broadcast rows of the activations.
  int64_t accumulatorRegisters = 0;
  /// The width of the column panels matmul weights are packed into at load: one register tile's
  /// columns, so each K step of a tile reads the weight from consecutive addresses.
  int64_t panelWidth = 0;
  /// Rows of a packed matmul's register tile: rowsFor(panelWidth).
  int64_t tileRows = 0;
  /// The vocabulary is padded to a multiple of this, so that the LM head (an [n_embd, V'] packed
  /// matmul) tiles into whole panels and splits into the most thread chunks in whole pieces.
  int64_t vocabMultiple = 0;
  /// The smallest sequence bucket (kMaxTileRows).
  int64_t smallestBucket = 0;
  /// The most contiguous pieces an op is split into for threads (one scf.forall iteration each),
  /// and the candidates tried, largest first. The schedule handles any of them.
  std::array<int64_t, 3> threadChunkCounts{};
  /// Vector widths (in f32 lanes) tried for elementwise ops and row reductions, widest first.
  std::array<int64_t, 3> elementwiseWidths{};
  /// Columns per step of a plain (unpacked) matmul's register tile, widest first: attention's
  /// blocks are as narrow as its head size or key block.
  std::array<int64_t, 3> matmulTileWidths{};

  constexpr int64_t maxThreadChunks() const { return threadChunkCounts[0]; }

  /// Rows of a `width`-column tile whose accumulators fit accumulatorRegisters: a power of two,
  /// at least 1 and at most kMaxTileRows.
  constexpr int64_t rowsFor(int64_t width) const {
    const int64_t registersPerRow = std::max<int64_t>(1, width / vectorLanes);
    int64_t rows = 1;
    while (2 * rows * registersPerRow <= accumulatorRegisters && 2 * rows <= kMaxTileRows) rows *= 2;
    return rows;
  }
};

/// The parameters of a register file of `vectorRegisters` registers of `vectorBits` bits (a
/// multiple of 32, at least 128).
///
/// The panel is 32 columns on every target: AVX-512's 32 zmm take 8 rows of it (2 registers a
/// row), AVX2's 16 ymm 2 rows (4 registers a row), NEON's 32 q registers 2 rows (8 a row). A
/// 16-wide panel for AVX2 (4 x 16 tiles, as BLIS's 6 x 16) was measured on haswell code and lost:
/// no faster in f32, 7-15% slower in q8_0 (docs/PERFORMANCE.md). The rows, and so the vocabulary
/// multiple, follow from the panel and the register file.
///
/// Elementwise widths, plain matmul widths and thread chunks depend on the shapes they must divide
/// (head sizes, key blocks, widths), not on the register file: the same on every target. A width
/// above one register is split into registers by LLVM.
constexpr TileParameters tileParameters(int64_t vectorBits, int64_t vectorRegisters) {
  TileParameters p;
  p.vectorLanes = vectorBits / 32;
  p.accumulatorRegisters = vectorRegisters / 2;
  p.panelWidth = 32;
  p.tileRows = p.rowsFor(p.panelWidth);
  p.threadChunkCounts = {8, 4, 2};
  p.vocabMultiple = p.maxThreadChunks() * p.panelWidth;
  p.smallestBucket = kMaxTileRows;
  p.elementwiseWidths = {32, 16, 8};
  p.matmulTileWidths = {32, 16, 8};
  return p;
}

/// AVX-512's parameters (32 registers of 512 bits): those of a module without `gpt.target`
/// (gpt-opt's passes), and of the GPU programs' weights.
constexpr TileParameters kDefaultTileParameters = tileParameters(512, 32);
static_assert(kDefaultTileParameters.panelWidth == 32 && kDefaultTileParameters.tileRows == 8,
              "AVX-512 tiles are 8 rows x 2 zmm");
static_assert(kDefaultTileParameters.vocabMultiple == 256, "the padded vocabulary is part of the disk-cache key's IR");
static_assert(kDefaultTileParameters.smallestBucket == 8, "gpt.frontend pads to this bucket too");

} // namespace gpt::target

#endif // GPT_CC_TARGETPARAMETERS_H
