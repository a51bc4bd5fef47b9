// Work that runs once per model (weight layout, dequantization) split over the model's threads.
#ifndef GPT_CC_KERNELS_PARALLELFOR_H
#define GPT_CC_KERNELS_PARALLELFOR_H

#include <cstdint>
#include <functional>

namespace gpt::kernels {

/// Calls `body(begin, end)` over [0, count) split into at most `threads` contiguous ranges of
/// similar size, each on a thread of its own (the calling thread runs the first), and returns
/// when all are done. Ranges hold at least `minimum` items, so that a small job does not pay for
/// starting threads. The first exception a range throws is rethrown here, after every range has
/// finished. `threads` < 1 means 1. Bodies must write disjoint memory.
void parallelFor(int64_t count, int64_t threads, const std::function<void(int64_t, int64_t)> &body,
                 int64_t minimum = 1);

/// The threads a load uses for `requested` (a CompileOptions.threads value): itself when
/// positive, else every core the process may run on.
int64_t loadThreads(int64_t requested);

} // namespace gpt::kernels

#endif // GPT_CC_KERNELS_PARALLELFOR_H
