// What the builder's module of an entry point is a function of, written out as text: the disk
// cache keys a program by it (with this build of the compiler and the target), so that a process
// whose programs are all cached builds no module at all (cc/runtime/CachedJit.h).
#ifndef GPT_CC_BUILDER_BUILDFINGERPRINT_H
#define GPT_CC_BUILDER_BUILDFINGERPRINT_H

#include "cc/builder/GPTConfig.h"
#include "cc/builder/Parameters.h"

#include <cstdint>
#include <string>

namespace gpt {

struct BatchShape;

/// Every input of buildForward, buildStep and buildBatchStep as `name=value` lines, floats by
/// their bits: equal text for equal modules, different text for any input the builder reads.
/// `batch` set: the batched step of that shape; else `cacheLen` > 0: the cached step; else forward.
std::string buildFingerprint(const GPTConfig &config, const WeightStorage &storage, int64_t seqLen, int64_t cacheLen,
                             const BatchShape *batch);

} // namespace gpt

#endif // GPT_CC_BUILDER_BUILDFINGERPRINT_H
