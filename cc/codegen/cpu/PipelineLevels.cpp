// Pipeline levels and stages by name (see PipelineLevels.h).
#include "cc/codegen/cpu/PipelineLevels.h"

#include <utility>

namespace gpt {

namespace {
constexpr std::pair<PipelineLevel, std::string_view> kLevelNames[] = {
    {PipelineLevel::Baseline, "baseline"},
    {PipelineLevel::Fused, "fused"},
    {PipelineLevel::Vectorized, "vectorized"},
    {PipelineLevel::Vectorized, "default"}, // the fastest correct level
};
constexpr std::pair<Stage, std::string_view> kStageNames[] = {
    {Stage::Transformer, "transformer"}, {Stage::Linalg, "linalg"}, {Stage::Vectorized, "vectorized"},
    {Stage::Bufferized, "bufferized"},   {Stage::LLVM, "llvm"},
};
} // namespace

std::optional<PipelineLevel> parsePipelineLevel(std::string_view name) {
  for (auto [level, levelName] : kLevelNames)
    if (name == levelName) return level;
  return std::nullopt;
}

const char *pipelineLevelName(PipelineLevel level) {
  for (auto [candidate, name] : kLevelNames)
    if (candidate == level) return name.data(); // the first name of a level is its own
  return "unknown";
}

bool packsWeights(PipelineLevel level) { return level == PipelineLevel::Vectorized; }

std::optional<Stage> parseStage(std::string_view name) {
  for (auto [stage, stageName] : kStageNames)
    if (name == stageName) return stage;
  return std::nullopt;
}

std::vector<std::string> stageNames() {
  std::vector<std::string> names;
  for (auto [stage, name] : kStageNames) names.emplace_back(name);
  return names;
}

} // namespace gpt
