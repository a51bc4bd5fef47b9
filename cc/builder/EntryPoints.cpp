// The entry points' argument lists (see EntryPoints.h).
#include "cc/builder/EntryPoints.h"

#include "cc/builder/GPTConfig.h"

namespace gpt {

std::vector<EntryArgument> entryArguments(EntryPoint entry, const GPTConfig &config, int64_t parameterCount) {
  std::vector<EntryArgument> arguments = {{ArgumentKind::TokenIds}, {ArgumentKind::Positions}};
  if (entry == EntryPoint::BatchStep)
    for (ArgumentKind kind : {ArgumentKind::Sequences, ArgumentKind::CacheSlots, ArgumentKind::BlockTables})
      arguments.push_back({kind});
  if (entry != EntryPoint::Forward) {
    arguments.push_back({ArgumentKind::LastRow});
    if (entry == EntryPoint::Step) arguments.push_back({ArgumentKind::CacheOffset});
    for (int64_t layer = 0; layer < config.nLayer; ++layer) {
      arguments.push_back({ArgumentKind::KeyCache, layer});
      arguments.push_back({ArgumentKind::ValueCache, layer});
    }
  }
  for (int64_t i = 0; i < parameterCount; ++i) arguments.push_back({ArgumentKind::Weight, i});
  arguments.push_back({ArgumentKind::Logits});
  return arguments;
}

} // namespace gpt
