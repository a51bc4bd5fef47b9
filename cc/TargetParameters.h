// The target parameters every layer agrees on: register tile, panel width, thread pieces, the
// smallest sequence bucket and the vocabulary padding. One place, tied together by static_asserts,
// so that deriving them from the host's vector width later is an edit of this file.
#ifndef GPT_CC_TARGETPARAMETERS_H
#define GPT_CC_TARGETPARAMETERS_H

#include <cstdint>

namespace gpt::target {

/// f32 lanes of one vector register (AVX-512: 16).
constexpr int64_t kVectorLanes = 16;

/// The matmul register tile: kTileRows rows x kPanelWidth columns of f32 accumulators, 16 zmm
/// registers with AVX-512 (8 x 32 / 16), leaving the rest for the broadcast rows of A and the
/// loads of B.
constexpr int64_t kTileRows = 8;
constexpr int64_t kPanelWidth = 2 * kVectorLanes;

/// The width of the column panels matmul weights are packed into at load: one register tile's
/// columns, so each K step of a tile reads the weight from consecutive addresses.
static_assert(kPanelWidth % kVectorLanes == 0, "a panel is a whole number of vector registers");

/// The most contiguous pieces an op is split into for threads (one scf.forall iteration each),
/// and the candidates tried, largest first. The schedule handles any of them.
constexpr int64_t kMaxThreadChunks = 8;
constexpr int64_t kThreadChunkCounts[] = {8, 4, 2};
static_assert(kThreadChunkCounts[0] == kMaxThreadChunks, "the largest split is tried first");

/// The fewest loop iterations (multiply-adds, for a matmul) an op needs before it is split across
/// threads: an OpenMP fork and join costs microseconds, which only pays off on more work than
/// this. Small models' ops (a decode step of the embedded model) stay on one thread.
constexpr int64_t kMinParallelWork = int64_t(1) << 18;

/// The vocabulary is padded to a multiple of this, so that the LM head (an [n_embd, V'] packed
/// matmul) tiles into whole panels and splits into kMaxThreadChunks whole pieces.
constexpr int64_t kVocabMultiple = kMaxThreadChunks * kPanelWidth;
static_assert(kVocabMultiple == 256, "the padded vocabulary is part of the disk-cache key's IR");

/// The smallest sequence bucket: one register tile of rows, so prefill and forward programs
/// never have a partial row tile.
constexpr int64_t kSmallestBucket = kTileRows;

/// Vector widths (in f32 lanes) tried for elementwise ops and row reductions, widest first: two,
/// one or half a vector register of the innermost dimension per step.
constexpr int64_t kElementwiseWidths[] = {2 * kVectorLanes, kVectorLanes, kVectorLanes / 2};

/// Columns per step of a plain (unpacked) matmul's register tile, widest first: attention's
/// blocks are as narrow as its head size or key block.
constexpr int64_t kMatmulTileWidths[] = {kPanelWidth, kPanelWidth / 2, kPanelWidth / 4};

} // namespace gpt::target

#endif // GPT_CC_TARGETPARAMETERS_H
