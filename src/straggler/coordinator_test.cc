// The coordinator as the runtime would drive it: per-rank compute times whose scale differs from
// the predictor's (the median of the same type's peers cancels it), jitter that never re-plans, a
// 3x straggler that re-plans once, and expected times that follow the new plan's work.
#include "straggler/coordinator.h"

#include <random>

#include <gtest/gtest.h>

#include "straggler/test_util.h"

namespace motley::straggler {
namespace {

// The compute time rank of `device` measures under `plan`: the predicted work at nominal speed
// times the device's true scale (0.37: the runtime is faster than the roofline says) and its
// slowdown. Devices out of the plan are idle and run a probe of 1 ms (nominal).
std::vector<RankCompute> Measure(const perf::Predictor& predictor, const spec::Plan& plan,
                                 const std::vector<double>& slowdown) {
  std::vector<RankCompute> out;
  for (int d = 0; d < 8; ++d) {
    RankCompute r{d, true, 0.0, 1e-3 * slowdown[static_cast<size_t>(d)], 1e-3};
    out.push_back(r);
  }
  for (const spec::PipelinePlan& pipe : plan.pipelines) {
    for (const spec::StagePlan& st : pipe.stages) {
      const perf::StageCost c =
          predictor.StageCostOf(st, pipe.micro_batch_size, plan.recompute, {});
      for (int d : st.devices) {
        RankCompute& r = out[static_cast<size_t>(d)];
        r.idle = false;
        r.compute_s = 0.37 * static_cast<double>(pipe.micro_batches) *
                      (c.forward_s + c.backward_s) * slowdown[static_cast<size_t>(d)];
      }
    }
  }
  return out;
}

TEST(CoordinatorTest, CalibratesJitterNeverReplansAndAThreeTimesSlowdownReplansOnce) {
  auto w = testing::LoadWorld();
  CoordinatorOptions o;
  o.controller.planner = w->planner;
  StragglerCoordinator c(*w->predictor, w->initial, o);
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  int switches = 0;
  int64_t switched_at = 0;
  for (int64_t step = 1; step <= 300; ++step) {
    std::vector<double> slowdown(8);
    for (double& s : slowdown) s = step <= 2 ? 1.0 : jitter(rng);  // calibration steps: clean
    if (step >= 150) slowdown[5] *= 3.0;
    auto next = c.AfterStep(step, Measure(*w->predictor, c.plan(), slowdown));
    ASSERT_TRUE(next.ok()) << next.status().message();
    if (next->has_value()) {
      ++switches;
      switched_at = step;
      EXPECT_FALSE(SamePlan(**next, w->initial));
    }
    if (step < 150) {
      EXPECT_EQ(switches, 0) << step;
    }
  }
  EXPECT_STREQ(c.expectation(0), "peers");  // eight devices of one type: the scale cancels
  EXPECT_EQ(switches, 1);
  EXPECT_GT(switched_at, 150);
  EXPECT_LE(switched_at, 165);
  EXPECT_NEAR(c.monitor().device_rates()[5], 3.0, 0.6);
  EXPECT_EQ(c.controller().adopted_count(), 1);
}

TEST(CoordinatorTest, ADroppedDeviceIsProbedAndRejoins) {
  auto w = testing::LoadWorld();
  CoordinatorOptions o;
  o.controller.planner = w->planner;
  StragglerCoordinator c(*w->predictor, w->initial, o);
  std::vector<int64_t> switches;
  for (int64_t step = 1; step <= 120; ++step) {
    std::vector<double> slowdown(8, 1.0);
    if (step >= 20 && step < 60) slowdown[5] = 10.0;
    auto next = c.AfterStep(step, Measure(*w->predictor, c.plan(), slowdown));
    ASSERT_TRUE(next.ok()) << next.status().message();
    if (next->has_value()) switches.push_back(step);
    if (step == 59) {
      ASSERT_EQ(c.controller().decisions().size(), 1u);
      EXPECT_EQ(c.controller().decisions()[0].devices_out, std::vector<int>{5});
    }
  }
  ASSERT_EQ(switches.size(), 2u);  // out while slow, back after its probe recovered
  EXPECT_TRUE(c.controller().decisions().back().devices_out.empty());
  EXPECT_TRUE(c.last_record().is_null() || c.last_record().contains("device_rates"));
}

}  // namespace
}  // namespace motley::straggler
