// The memory model against the runtime's own tensors: each of the 19 plans of pvr_plans.h (two
// with activation recompute: full, selective and none per stage; GPipe with full) and its 5
// interleaved 1F1B plans (a device holds every chunk of its group: each chunk's parameters and
// activation slots, one transfer-buffer pool) trains two steps with one EmulatedBackend per rank
// (ranks as threads, ../parallel/emulated_ranks.h), and each rank's peak of live device bytes, as
// its backend counts every allocation, must be within 2% of the predictor's memory for that rank's
// stage (perf/memory_model.h RuntimeRankMemory, the per-stage figure `motley predict` prints).
// Bytes, not time: nothing here depends on the machine's speed.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "parallel/world_layout.h"
#include "perf/emulated_compute_model.h"
#include "perf/predictor.h"
#include "perf/settings.h"
#include "../parallel/emulated_ranks.h"
#include "pvr_plans.h"

namespace motley::testing {
namespace {

constexpr int64_t kSteps = 2;

TEST(MemoryVsRuntimeTest, EachRanksPeakIsWithinTwoPercentOfThePrediction) {
  const spec::RunFile run = TinyRunOn(kTwoSpeedYaml, kSteps);
  const perf::PerfSettings settings = perf::DefaultSettings(run.cluster);
  const perf::EmulatedComputeModel compute(run.cluster, run.model);
  const perf::Predictor predictor(run.cluster, run.model, run.train, compute, settings);
  std::printf("%-44s %4s %12s %12s %9s\n", "plan", "rank", "runtime B", "predicted B", "err");
  double worst = 0;
  std::vector<spec::Plan> plans = Plans();
  for (const spec::Plan& plan : InterleavedPlans()) plans.push_back(plan);
  for (const spec::Plan& plan : plans) {
    std::vector<int64_t> peaks;
    for (const RankCounts& c : RunEmulated(run, plan, kSteps)) peaks.push_back(c.peak_bytes);
    auto layout = parallel::WorldLayout::Build(plan);
    ASSERT_TRUE(layout.ok());
    ASSERT_EQ(peaks.size(), static_cast<size_t>(layout->size())) << plan.source;
    const perf::Prediction pred = predictor.Predict(plan);
    for (int r = 0; r < layout->size(); ++r) {
      const parallel::RankInfo& me = layout->rank(r);
      const double predicted = pred.stages[static_cast<size_t>(me.pipeline)]
                                   [static_cast<size_t>(me.stage)]
                                       .memory.total();
      const double measured = static_cast<double>(peaks[static_cast<size_t>(r)]);
      const double err = (predicted - measured) / measured;
      worst = std::max(worst, std::abs(err));
      std::printf("%-44s %4d %12.0f %12.0f %+8.2f%%\n", plan.source.c_str(), r, measured,
                  predicted, 100 * err);
      EXPECT_LE(std::abs(err), 0.02) << plan.source << " rank " << r;
    }
  }
  std::printf("worst |error| %.3f%%\n", 100 * worst);
}

}  // namespace
}  // namespace motley::testing
