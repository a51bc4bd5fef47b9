// See BuildFingerprint.h. A field added to a struct below and not written here would let two
// different modules share a cache entry; the size checks make such an addition fail to compile
// until it is written out (and the sizes updated).
#include "cc/builder/BuildFingerprint.h"

#include "cc/builder/EntryPoints.h"

#include <cstring>
#include <sstream>

namespace gpt {
namespace {

static_assert(sizeof(void *) != 8 || sizeof(GPTConfig) == 744, "a GPTConfig field changed: write it out below");
static_assert(sizeof(ParameterNames) == 16 * sizeof(std::string), "a ParameterNames field changed: write it out below");
static_assert(sizeof(RopeScaling) == 24, "a RopeScaling field changed: write it out below");
static_assert(sizeof(target::TileParameters) == 120, "a TileParameters field changed: write it out below");
static_assert(sizeof(WeightStorage) == 184, "a WeightStorage field changed: write it out below");
static_assert(sizeof(BatchShape) == 40, "a BatchShape field changed: write it out below");

/// A float by its bits: two epsilons that print alike are still two keys.
uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

/// The parameter names, each with its length (no name can end another's field).
std::string names(const ParameterNames &n) {
  std::ostringstream out;
  for (const std::string *name :
       {&n.layerPrefix, &n.attnNorm, &n.qkv, &n.attnOut, &n.mlpNorm, &n.mlpUp, &n.mlpDown, &n.tokenEmbedding,
        &n.positionEmbedding, &n.finalNorm, &n.head, &n.qNorm, &n.kNorm, &n.postAttnNorm, &n.postMlpNorm, &n.vProj})
    out << name->size() << ':' << *name << ',';
  return out.str();
}

template <typename Array> void writeArray(std::ostringstream &out, const char *name, const Array &values) {
  out << name << '=';
  for (auto value : values) out << value << ',';
  out << '\n';
}

} // namespace

std::string buildFingerprint(const GPTConfig &config, const WeightStorage &storage, int64_t seqLen, int64_t cacheLen,
                             const BatchShape *batch) {
  std::ostringstream out;
  out << "n_layer=" << config.nLayer << "\nn_head=" << config.nHead << "\nn_embd=" << config.nEmbd
      << "\nvocab_size=" << config.vocabSize << "\nblock_size=" << config.blockSize << "\nrope=" << config.rope
      << "\nlayer_norm_eps=" << bitsOf(config.layerNormEps) << "\nattention_window=" << config.attentionWindow
      << "\nattention_mask=" << config.attentionMask.size() << ':';
  out.write(reinterpret_cast<const char *>(config.attentionMask.data()),
            static_cast<std::streamsize>(config.attentionMask.size()));
  out << "\nattention_mask_expression=" << config.attentionMaskExpression.size() << ':'
      << config.attentionMaskExpression << "\nattention_looks_ahead=" << config.attentionLooksAhead
      << "\nnames=" << names(config.names) << "\nnorm=" << static_cast<int>(config.norm)
      << "\nmlp=" << static_cast<int>(config.mlp) << "\nn_kv_head=" << config.nKvHead << "\nn_ff=" << config.nFf
      << "\nbias=" << config.bias << "\nqkv_bias=" << config.qkvBias << "\ntied_head=" << config.tiedHead
      << "\nrope_base=" << bitsOf(config.ropeBase) << "\nrope_layout=" << static_cast<int>(config.ropeLayout)
      << "\nrope_scaling=" << bitsOf(config.ropeScaling.factor) << ',' << bitsOf(config.ropeScaling.lowFreqFactor)
      << ',' << bitsOf(config.ropeScaling.highFreqFactor) << ',' << config.ropeScaling.originalMaxPositions
      << "\nhead_dim=" << config.headDim << "\nembedding_scale=" << config.embeddingScale
      << "\nattention_scale=" << bitsOf(config.attentionScale) << "\nlocal_rope_base=" << bitsOf(config.localRopeBase)
      << '\n';
  writeArray(out, "layer_windows", config.layerWindows);
  const target::TileParameters &tiles = storage.tiles;
  out << "packed=" << storage.packed << "\nformat=" << static_cast<int>(storage.format)
      << "\nvector_lanes=" << tiles.vectorLanes << "\naccumulator_registers=" << tiles.accumulatorRegisters
      << "\npanel_width=" << tiles.panelWidth << "\ntile_rows=" << tiles.tileRows
      << "\nvocab_multiple=" << tiles.vocabMultiple << "\nsmallest_bucket=" << tiles.smallestBucket
      << "\nkv_cache=" << kvCacheFormatName(storage.kvCache) << '\n';
  for (const auto &[name, format] : storage.formatOverrides)
    out << "format_of=" << name.size() << ':' << name << '=' << static_cast<int>(format) << '\n';
  writeArray(out, "thread_chunk_counts", tiles.threadChunkCounts);
  writeArray(out, "elementwise_widths", tiles.elementwiseWidths);
  writeArray(out, "matmul_tile_widths", tiles.matmulTileWidths);
  if (batch)
    out << "entry=batch_step\ntokens=" << batch->tokens << "\nbatch=" << batch->batch
        << "\ntable_width=" << batch->tableWidth << "\npool_blocks=" << batch->poolBlocks
        << "\nblock=" << batch->blockSize << '\n';
  else
    out << "entry=" << (cacheLen > 0 ? "step" : "forward") << "\nseq_len=" << seqLen << "\ncache_len=" << cacheLen
        << '\n';
  return out.str();
}

} // namespace gpt
