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

/// The small integer arguments a runtime writes itself (the GPU target into its input buffer, in
/// this order): their names in a CUDA artifact manifest's `inputs`, and whether they hold an i64
/// per token (else one i64). Every other kind is a batch-step table, a cache, a weight or the logits.
struct EntryInput {
  ArgumentKind kind;
  const char *name;
  bool perToken;
};
inline constexpr EntryInput kEntryInputs[] = {
    {ArgumentKind::TokenIds, "token_ids", true},
    {ArgumentKind::Positions, "positions", true},
    {ArgumentKind::LastRow, "last_row", false},
    {ArgumentKind::CacheOffset, "cache_offset", false},
};

/// `kind`'s row of kEntryInputs, or null.
inline const EntryInput *entryInput(ArgumentKind kind) {
  for (const EntryInput &input : kEntryInputs)
    if (input.kind == kind) return &input;
  return nullptr;
}

/// One T per argument of an entry point, by what it is: the one place that maps an argument list
/// to named slots. The builder binds its function's arguments into it; the runtime fills it and
/// reads the arguments back in order.
template <typename T> struct EntrySlots {
  T ids{}, positions{}, last{}, offset{}, sequences{}, slots{}, tables{}, logits{};
  std::vector<T> keys, values; ///< by layer
  std::vector<T> weights;      ///< by parameter index

  /// The slot of `argument`; a layer's cache or a weight past the end grows its vector.
  T &operator[](const EntryArgument &argument) {
    switch (argument.kind) {
    case ArgumentKind::TokenIds:
      return ids;
    case ArgumentKind::Positions:
      return positions;
    case ArgumentKind::LastRow:
      return last;
    case ArgumentKind::CacheOffset:
      return offset;
    case ArgumentKind::Sequences:
      return sequences;
    case ArgumentKind::CacheSlots:
      return slots;
    case ArgumentKind::BlockTables:
      return tables;
    case ArgumentKind::KeyCache:
      return grown(keys, argument.index);
    case ArgumentKind::ValueCache:
      return grown(values, argument.index);
    case ArgumentKind::Weight:
      return grown(weights, argument.index);
    case ArgumentKind::Logits:
      break;
    }
    return logits;
  }

  /// Binds `values[i]` to `arguments[i]`; a range shorter than the arguments (a function whose
  /// logits are its result) leaves the rest unbound.
  template <typename Arguments, typename Range> void bind(const Arguments &arguments, Range &&values) {
    auto argument = arguments.begin();
    for (auto &&value : values) {
      if (argument == arguments.end()) break;
      (*this)[*argument++] = value;
    }
  }

  /// The slots of `arguments`, in their order.
  template <typename Arguments> std::vector<T> inOrder(const Arguments &arguments) {
    std::vector<T> result;
    result.reserve(arguments.size());
    for (const EntryArgument &argument : arguments) result.push_back((*this)[argument]);
    return result;
  }

private:
  static T &grown(std::vector<T> &slots, int64_t index) {
    if (static_cast<int64_t>(slots.size()) <= index) slots.resize(index + 1);
    return slots[index];
  }
};

} // namespace gpt

#endif // GPT_CC_BUILDER_ENTRYPOINTS_H
