// ParallelFor: runs body(i) once for every i in [0, n) on up to `threads` threads (the calling
// thread among them; ThreadsOrAllCores resolves the count) and returns when all have run. The
// indices are taken in no fixed order, so a caller that needs the same answer on any thread
// count writes into per-index slots and combines them in index order afterwards (the planner's
// candidate batches, uniform baseline and simulator confirmations do).
//
// Contract: `body` is safe to call concurrently for distinct indices. Plain std::thread over a
// shared counter: the work items are a few to a few dozen predictions or simulations, too few
// and too coarse to need a task library.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace motley {

template <typename Body>
void ParallelFor(size_t n, int threads, const Body& body) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) body(i);
  };
  const size_t count = std::min(n, static_cast<size_t>(std::max(threads, 1)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < count; ++t) pool.emplace_back(work);
  work();
  for (std::thread& th : pool) th.join();
}

}  // namespace motley
