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
// With `real`, every rank probes (as ranks on real devices do while the loop listens) and no
// profile gives the probe's expected time (0): idle devices are judged against their peers.
std::vector<RankCompute> Measure(const perf::Predictor& predictor, const spec::Plan& plan,
                                 const std::vector<double>& slowdown, bool real = false) {
  std::vector<RankCompute> out;
  for (int d = 0; d < 8; ++d) {
    RankCompute r{d, true, 0.0, 1e-3 * slowdown[static_cast<size_t>(d)], real ? 0.0 : 1e-3};
    out.push_back(r);
  }
  for (const spec::PipelinePlan& pipe : plan.pipelines) {
    for (const spec::StagePlan& st : pipe.stages) {
      const perf::StageCost c = predictor.StageCostOf(st, pipe.micro_batch_size, st.recompute, {});
      for (int d : st.devices) {
        RankCompute& r = out[static_cast<size_t>(d)];
        r.idle = false;
        r.compute_s = 0.37 * static_cast<double>(pipe.micro_batches) *
                      (c.forward_s + c.backward_s) * slowdown[static_cast<size_t>(d)];
        if (!real) r.probe_s = 0.0;  // emulated ranks that train do not probe
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

// A device ten times slower during steps 20-59 is dropped and taken back once its probe
// recovers: on emulated devices (the probe judged against its expected time) and on real ones
// (no profile: every device judged against the median of its type's peers, the probes too).
TEST(CoordinatorTest, ADroppedDeviceIsProbedAndRejoins) {
  auto w = testing::LoadWorld();
  for (const bool real : {false, true}) {
    SCOPED_TRACE(real ? "real devices" : "emulated devices");
    CoordinatorOptions o;
    o.controller.planner = w->planner;
    StragglerCoordinator c(*w->predictor, w->initial, o);
    std::vector<int64_t> switches;
    for (int64_t step = 1; step <= 120; ++step) {
      std::vector<double> slowdown(8, 1.0);
      if (step >= 20 && step < 60) slowdown[5] = 10.0;
      auto next = c.AfterStep(step, Measure(*w->predictor, c.plan(), slowdown, real));
      ASSERT_TRUE(next.ok()) << next.status().message();
      if (next->has_value()) switches.push_back(step);
      if (step == 59) {
        ASSERT_EQ(c.controller().decisions().size(), 1U);
        EXPECT_EQ(c.controller().decisions()[0].devices_out, std::vector<int>{5});
        if (real) {
          EXPECT_STREQ(c.expectation(5), "peers");  // its probe against the others'
        }
      }
    }
    ASSERT_EQ(switches.size(), 2U);  // out while slow, back after its probe recovered
    EXPECT_GT(switches[0], 20);
    EXPECT_LE(switches[0], 30);
    EXPECT_GT(switches[1], 60);
    EXPECT_TRUE(c.controller().decisions().back().devices_out.empty());
    EXPECT_TRUE(c.last_record().is_null() || c.last_record().contains("device_rates"));
  }
}

// With a profile (measured_types), a device slow from step 1 is a straggler from step 1: its
// first reports commit its rate, where calibrating on the first steps would have taken it as its
// own normal. A device alone of its type and without a profile falls back to its own first steps.
TEST(CoordinatorTest, ADeviceSlowFromTheStartIsAStragglerWithAProfile) {
  auto w = testing::LoadWorld();
  for (const bool profiled : {true, false}) {
    CoordinatorOptions o;
    o.controller.planner = w->planner;
    if (profiled) o.measured_types.assign(w->run.cluster.device_types.size(), true);
    o.min_peers = 9;  // more than the cluster has: without a profile, no peer median either
    StragglerCoordinator c(*w->predictor, w->initial, o);
    std::vector<double> slowdown(8, 1.0);
    slowdown[5] = 3.0;
    for (int64_t step = 1; step <= 12; ++step) {
      std::vector<RankCompute> ranks = Measure(*w->predictor, c.plan(), slowdown);
      for (RankCompute& r : ranks) r.compute_s /= 0.37;  // a profile predicts the time exactly
      ASSERT_TRUE(c.AfterStep(step, ranks).ok());
    }
    if (profiled) {
      EXPECT_STREQ(c.expectation(5), "profile");
      ASSERT_FALSE(c.monitor().history().empty());
      EXPECT_EQ(c.monitor().history().front().device, 5);
      EXPECT_NEAR(c.monitor().history().front().to, 3.0, 1e-6);
      EXPECT_LE(c.monitor().history().front().step, 6);
    } else {
      EXPECT_STREQ(c.expectation(5), "own");
      EXPECT_TRUE(c.monitor().history().empty());  // the known limit without a profile
    }
  }
}

}  // namespace
}  // namespace motley::straggler
