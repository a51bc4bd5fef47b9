// The calling convention of the compiled entry points, written once: the builder declares each
// entry point's arguments from entryArguments(), and the runtime passes them in the same order.
#ifndef GPT_CC_BUILDER_ENTRYPOINTS_H
#define GPT_CC_BUILDER_ENTRYPOINTS_H

#include <cstdint>
#include <vector>

namespace gpt {

struct GPTConfig;

/// The shape a batched step is compiled for: `tokens` new tokens of `batch` sequences, block
/// tables `tableWidth` blocks wide, per-layer pools of `poolBlocks` blocks of `blockSize` positions.
struct BatchShape {
  int64_t tokens, batch, tableWidth, poolBlocks, blockSize;
};

enum class EntryPoint {
  Forward,   ///< `@forward`: logits of every position, no cache
  Step,      ///< `@step`: prefill or decode against per-layer KV caches
  BatchStep, ///< `@batch_step`: the new tokens of many sequences against per-layer paged KV pools
};

/// What one argument of an entry point is.
enum class ArgumentKind {
  TokenIds,    ///< [T] i64, padded to the bucket
  Positions,   ///< [T] i64, each token's position
  LastRow,     ///< [rows] i64 (step: 1, or every token's for speculative verification; batch step: one
               ///< per sequence): the rows whose logits are returned
  CacheOffset, ///< index, passed by value (step): the first token's position in the cache
  Sequences,   ///< [T] i64 (batch step): the sequence (block-table row) of each token
  CacheSlots,  ///< [T] i64 (batch step): where each token's key and value go, block * S + row; < 0: nowhere
  BlockTables, ///< [B, M] i64 (batch step): each sequence's blocks in the pool, in position order
  KeyCache,    ///< [H, cacheLen, head size] (step) of the KV cache format's elements (f32, f16, or
               ///< bf16 as 16 bits: WeightStorage::kvCache), updated in place; `index` is the layer.
               ///< Batch step: the layer's pool [blocks, H, S, head size]
  ValueCache,  ///< as KeyCache
  Weight,      ///< parameterSpecs()[index], read-only
  Logits,      ///< [rows, padded vocab] f32 written by the program: its result, an out-parameter
               ///< after bufferization (so always the last argument of the compiled function)
};

struct EntryArgument {
  ArgumentKind kind;
  int64_t index = 0; ///< the layer of a cache, the parameter of a weight
};

/// The arguments of `entry`, in order; the last one is the Logits result. `parameterCount` is
/// parameterSpecs(config, ...).size().
std::vector<EntryArgument> entryArguments(EntryPoint entry, const GPTConfig &config, int64_t parameterCount);

} // namespace gpt

#endif // GPT_CC_BUILDER_ENTRYPOINTS_H
