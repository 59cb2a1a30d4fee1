// The straggler loop on the parallel runtime (issue 6 acceptance, virtual clock): an emulated
// 8-device cluster trains under the planner's plan; `--inject`-style rates slow device 5 three
// times from step 10 and restore it at step 40; the re-plan controller (elastic_run.h) adopts
// exactly one plan while the device is slow and one after it recovers. Asserted on the runtime's
// exact virtual step times:
//  - by step N + 20 (N = 10) the step time is within 10% of the optimum under the slowdown, the
//    optimum being the adopted plan trained statically with the device slowed the whole run;
//  - 20 steps after the slowdown clears it is within 5% of the original step time;
//  - the static plan under the slowdown is much slower than the re-planned run;
//  - every step's loss equals the run without stragglers or re-planning (plan invariance).
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "elastic/elastic_run.h"
#include "perf/compute_model.h"
#include "perf/predictor.h"
#include "perf/settings.h"
#include "plan/planner.h"
#include "spec/run_file.h"
#include "straggler/scenario.h"
#include "train/parallel_trainer.h"

namespace motley::elastic {
namespace {

constexpr int64_t kSteps = 70;
constexpr int64_t kSlowFrom = 10;
constexpr int64_t kSlowUntil = 40;  // first step at full speed again

// Two nodes of four identical emulated devices (speeds chosen so that compute dominates).
const char* kRunYaml = R"(
cluster:
  name: emulated-8
  device_types:
    - {name: emu, vendor: cpu, peak_flops: 2 GFLOPS, memory: 64 MiB, memory_bandwidth: 2 GB/s,
       emulated: {flops: 2 GFLOPS, memory_bandwidth: 2 GB/s}}
  link_classes:
    - {name: shm, latency: 5 us, bandwidth: 2 GB/s, efficiency: 1.0}
    - {name: net, latency: 20 us, bandwidth: 1 GB/s, efficiency: 1.0}
  nodes:
    - {name: node-a, device_type: emu, device_count: 4, intra_link: shm}
    - {name: node-b, device_type: emu, device_count: 4, intra_link: shm}
  islands:
    - {name: rack, nodes: [node-a, node-b], link: net}
model: {preset: small, name: small-8, num_blocks: 8}
train:
  global_batch: 16
  seq_len: 64
  steps: 70
  optimizer: {lr: 1.0e-3, min_lr: 1.0e-4, warmup_steps: 5}
  val_every: 0
)";

spec::RunFile TestRun() {
  auto run = spec::ParseRunFile(kRunYaml, "elastic_runtime_test", "");
  EXPECT_TRUE(run.ok()) << run.status().message();
  return *run;
}

// The planner's plan for the healthy cluster (no ZeRO-1, no recompute: what the loop re-plans to).
spec::Plan InitialPlan(const spec::RunFile& run) {
  perf::PerfSettings settings = perf::DefaultSettings(run.cluster);
  perf::RooflineComputeModel compute(run.cluster, run.model, settings);
  perf::Predictor predictor(run.cluster, run.model, run.train, compute, settings);
  plan::PlannerOptions options;
  options.zero1 = false;
  options.recompute = {spec::Recompute::kNone};
  options.exhaustive_max_units = 0;
  auto report = plan::PlanCluster(predictor, options);
  EXPECT_TRUE(report.ok()) << report.status().message();
  spec::Plan plan = report->best.plan;
  plan.source = "initial";
  return plan;
}

train::ParallelTrainerOptions Quiet() {
  train::ParallelTrainerOptions o;
  o.out = nullptr;
  return o;
}

straggler::Scenario SlowDevice5(int64_t until) {
  straggler::Scenario s;
  straggler::ScenarioEvent slow;
  slow.step = kSlowFrom;
  slow.device = 5;
  slow.rate = 1.0 / 3.0;
  s.events.push_back(slow);
  if (until > 0) {
    straggler::ScenarioEvent back = slow;
    back.step = until;
    back.rate = 1.0;
    s.events.push_back(back);
  }
  return s;
}

TEST(ElasticRuntimeTest, ReplansAroundASlowDeviceAndBack) {
  const spec::RunFile run = TestRun();
  const spec::Plan initial = InitialPlan(run);

  // The reference trajectory: no stragglers, no re-planning.
  auto healthy = train::TrainParallel(run, initial, Quiet());
  ASSERT_TRUE(healthy.ok()) << healthy.status().message();

  // The static plan under the straggler (never recovers, for the comparison at N + 20).
  train::ParallelTrainerOptions static_options = Quiet();
  InjectScenario(SlowDevice5(kSlowUntil), run.cluster, &static_options);
  spec::RunFile until_n20 = run;
  until_n20.train.steps = kSlowFrom + 20;
  auto stuck = train::TrainParallel(until_n20, initial, static_options);
  ASSERT_TRUE(stuck.ok()) << stuck.status().message();

  // The elastic run.
  train::ParallelTrainerOptions options = Quiet();
  InjectScenario(SlowDevice5(kSlowUntil), run.cluster, &options);
  ElasticLoop loop(run, initial, nullptr);
  loop.Attach(&options);
  auto elastic = train::TrainParallel(run, initial, options);
  ASSERT_TRUE(elastic.ok()) << elastic.status().message();
  ASSERT_EQ(elastic->losses.size(), static_cast<size_t>(kSteps));

  // Plan invariance through the switches.
  for (size_t k = 0; k < elastic->losses.size(); ++k) {
    EXPECT_NEAR(elastic->losses[k], healthy->losses[k], 1e-5 * std::fabs(healthy->losses[k]))
        << "step " << k + 1;
  }
  // One plan adopted while slow, one after recovery.
  ASSERT_EQ(elastic->migrations.size(), 2U);
  EXPECT_GT(elastic->migrations[0].step, kSlowFrom);
  EXPECT_LT(elastic->migrations[0].step, kSlowFrom + 20);
  EXPECT_GT(elastic->migrations[1].step, kSlowUntil);
  EXPECT_LT(elastic->migrations[1].step, kSlowUntil + 20);
  ASSERT_EQ(loop.adopted().size(), 2U);

  // The optimum under the slowdown: the plan adopted, trained statically with device 5 slowed.
  const spec::Plan adopted = loop.adopted().front();
  train::ParallelTrainerOptions optimum_options = Quiet();
  InjectScenario(SlowDevice5(0), run.cluster, &optimum_options);
  spec::RunFile short_run = run;
  short_run.train.steps = kSlowFrom + 1;
  auto optimum = train::TrainParallel(short_run, adopted, optimum_options);
  ASSERT_TRUE(optimum.ok()) << optimum.status().message();

  auto at = [](const train::ParallelTrainSummary& s, int64_t step) {
    return s.step_times_s[static_cast<size_t>(step - 1)];
  };
  const double original = at(*healthy, kSlowFrom - 1);
  const double best_slow = at(*optimum, kSlowFrom + 1);
  const double static_slow = at(*stuck, kSlowFrom + 20);
  const double replanned = at(*elastic, kSlowFrom + 20);
  const double recovered = at(*elastic, kSlowUntil + 20);
  std::printf("step time (virtual s): original %.4f, static under 3x %.4f, re-planned %.4f "
              "(optimum %.4f), 20 steps after recovery %.4f\n",
              original, static_slow, replanned, best_slow, recovered);
  EXPECT_LE(replanned, 1.10 * best_slow);
  EXPECT_LE(std::fabs(recovered - original), 0.05 * original);
  EXPECT_LT(replanned, 0.8 * static_slow);
}

}  // namespace
}  // namespace motley::elastic
