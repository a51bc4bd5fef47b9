// See ParallelFor.h.
#include "cc/kernels/ParallelFor.h"

#include <sched.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace gpt::kernels {

void parallelFor(int64_t count, int64_t threads, const std::function<void(int64_t, int64_t)> &body, int64_t minimum) {
  if (count <= 0) return;
  const int64_t ranges = std::max<int64_t>(1, std::min(threads, count / std::max<int64_t>(minimum, 1)));
  if (ranges == 1) {
    body(0, count);
    return;
  }
  std::exception_ptr failure;
  std::mutex failureMutex;
  // Range r is [r * count / ranges, (r + 1) * count / ranges): sizes differ by at most one.
  auto run = [&](int64_t r) {
    try {
      body(r * count / ranges, (r + 1) * count / ranges);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failureMutex);
      if (!failure) failure = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(ranges - 1);
  try {
    for (int64_t r = 1; r < ranges; ++r) workers.emplace_back(run, r);
  } catch (...) {
    // No thread could be started (resource limits): the ranges not started run here.
    for (int64_t r = static_cast<int64_t>(workers.size()) + 1; r < ranges; ++r) run(r);
  }
  run(0);
  for (std::thread &worker : workers) worker.join();
  if (failure) std::rethrow_exception(failure);
}

int64_t loadThreads(int64_t requested) {
  if (requested > 0) return requested;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0) return CPU_COUNT(&allowed);
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 ? cores : 1;
}

} // namespace gpt::kernels
