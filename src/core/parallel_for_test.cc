// ParallelFor (core/parallel_for.h): every index runs exactly once, for any thread count, none
// at all for n = 0, and the bodies do run on more than one thread when asked to.
#include "core/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace motley {
namespace {

TEST(ParallelForTest, RunsEveryIndexOnceOnAnyThreadCount) {
  for (int threads : {0, 1, 3, 64}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}}) {
      std::vector<std::atomic<int>> runs(n);
      ParallelFor(n, threads, [&](size_t i) { ++runs[i]; });
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(runs[i].load(), 1) << "index " << i << " of " << n << ", threads " << threads;
      }
    }
  }
}

TEST(ParallelForTest, UsesSeveralThreadsWhenAsked) {
  // Each body waits until both bodies have started: only two threads at once can finish (one
  // thread alone would wait forever, and ctest's timeout would fail the test).
  std::mutex mutex;
  std::set<std::thread::id> seen;
  std::atomic<int> arrived{0};
  ParallelFor(2, 2, [&](size_t) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      seen.insert(std::this_thread::get_id());
    }
    ++arrived;
    while (arrived.load() < 2) std::this_thread::yield();
  });
  EXPECT_EQ(seen.size(), 2u);
}

}  // namespace
}  // namespace motley
