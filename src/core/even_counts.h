// The one rule for splitting `total` elements over `n` parts as evenly as possible: the first
// total % n parts get one element more. The ring collectives chunk their buffers by it
// (comm/ring_collectives.cc), ZeRO-1 shards a layer's optimizer state by it (parallel/zero1.cc),
// and the step program (sched/step_program.h) states every reduce-scatter's and all-gather's
// chunks by it. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "core/check.h"

namespace motley {

inline std::vector<int64_t> EvenCounts(int64_t total, int n) {
  MOTLEY_CHECK(n > 0 && total >= 0, "EvenCounts needs n > 0 and total >= 0");
  std::vector<int64_t> counts(static_cast<size_t>(n), total / n);
  for (int64_t i = 0; i < total % n; ++i) ++counts[static_cast<size_t>(i)];
  return counts;
}

}  // namespace motley
