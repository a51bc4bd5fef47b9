// The names a user picks a pipeline by: its optimization level and the stages a model goes
// through. Plain C++, shared by the pass pipelines (Pipelines.h) and the runtime, which names them
// without linking MLIR.
#ifndef GPT_CC_CODEGEN_CPU_PIPELINELEVELS_H
#define GPT_CC_CODEGEN_CPU_PIPELINELEVELS_H

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpt {

/// How much optimization the pipeline applies; each level adds to the one before it.
enum class PipelineLevel {
  Baseline,   ///< transformer -> linalg -> scalar loops: the unoptimized reference point
  Fused,      ///< + elementwise fusion, canonicalize/CSE, loop-invariant code motion
  Vectorized, ///< + Transform-dialect tile-and-vectorize schedules
};

/// The level a name selects: "baseline", "fused", "vectorized", or "default", the fastest correct
/// level (currently "vectorized").
std::optional<PipelineLevel> parsePipelineLevel(std::string_view name);
/// The level's own name ("baseline", "fused" or "vectorized").
const char *pipelineLevelName(PipelineLevel level);
/// Whether programs of this level take their matmul weights packed in column panels (the
/// layout the vectorizing schedule's register tiles read); lower levels take them as given.
bool packsWeights(PipelineLevel level);

/// The stages a model goes through, in order. `model.ir(stage)` prints the IR after one of them.
enum class Stage { Transformer, Linalg, Vectorized, Bufferized, LLVM };
std::optional<Stage> parseStage(std::string_view name);
std::vector<std::string> stageNames();

} // namespace gpt

#endif // GPT_CC_CODEGEN_CPU_PIPELINELEVELS_H
