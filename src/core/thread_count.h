// The one rule for "how many threads": a positive request is taken as is, 0 (or less) means
// every core the host reports, and at least one. Training, evaluation, generation, profiling and
// the planner's candidate evaluation all resolve their thread counts by it. Pure; thread-safe.
#pragma once

#include <algorithm>
#include <thread>

namespace motley {

inline int ThreadsOrAllCores(int requested) {
  if (requested > 0) return requested;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace motley
