// Shared set-up of the straggler-loop runtime tests (issue 6, issue 14): emulated clusters, the
// run's predictor as `motley train --replan` builds it (the emulated op-cost model, which measures
// every emulated type), the planner's plan as `motley plan` writes it, scenarios, and the loop's
// options over a world of every cluster device (one rank per device, as `motley train` launches).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/core.h>
#include <gtest/gtest.h>

#include "elastic/elastic_run.h"
#include "perf/emulated_compute_model.h"
#include "perf/predictor.h"
#include "perf/settings.h"
#include "plan/planner.h"
#include "spec/run_file.h"
#include "straggler/scenario.h"
#include "train/parallel_trainer.h"

namespace motley::testing {

// A run on two nodes of four identical emulated devices of `flops` and `memory_bandwidth` (the
// cluster of examples/clusters/emulated-8.yaml at other rates) training `model` with 8 blocks.
inline std::string EightDeviceRun(std::string_view cluster_name, std::string_view flops,
                                  std::string_view memory_bandwidth, std::string_view model,
                                  int steps) {
  return fmt::format(R"(
cluster:
  name: {0}
  device_types:
    - {{name: emu, vendor: cpu, peak_flops: {1}, memory: 64 MiB, memory_bandwidth: {2},
       emulated: {{flops: {1}, memory_bandwidth: {2}}}}}
  link_classes:
    - {{name: shm, latency: 5 us, bandwidth: 2 GB/s, efficiency: 1.0}}
    - {{name: net, latency: 20 us, bandwidth: 1 GB/s, efficiency: 1.0}}
  nodes:
    - {{name: node-a, device_type: emu, device_count: 4, intra_link: shm}}
    - {{name: node-b, device_type: emu, device_count: 4, intra_link: shm}}
  islands:
    - {{name: rack, nodes: [node-a, node-b], link: net}}
model: {{preset: {3}, name: {3}-8, num_blocks: 8}}
train:
  global_batch: 16
  seq_len: 64
  steps: {4}
  optimizer: {{lr: 1.0e-3, min_lr: 1.0e-4, warmup_steps: 5}}
  val_every: 0
)",
                     cluster_name, flops, memory_bandwidth, model, steps);
}

// examples/clusters/emulated-8.yaml itself, the 8-block small model.
inline const std::string kEight = EightDeviceRun("emulated-8", "2 GFLOPS", "2 GB/s", "small", 70);
// Devices ten times slower in compute (four in memory bandwidth) and the tiny model: compute still
// dominates the links, and a step costs the host about 50 times less (the 8-process mpiexec test).
inline const std::string kEightTiny =
    EightDeviceRun("emulated-8-slow", "0.2 GFLOPS", "0.5 GB/s", "tiny", 50);

// Six emulated devices of three speeds (two of each, a node per type; examples/clusters/
// emulated-6-three-speed.yaml): the planner leaves the two slowest idle.
inline const std::string kSix = R"(
cluster:
  name: emulated-6-three-speed
  device_types:
    - {name: fast, vendor: cpu, peak_flops: 8 GFLOPS, memory: 64 MiB, memory_bandwidth: 8 GB/s,
       emulated: {flops: 8 GFLOPS, memory_bandwidth: 8 GB/s}}
    - {name: mid, vendor: cpu, peak_flops: 4 GFLOPS, memory: 64 MiB, memory_bandwidth: 4 GB/s,
       emulated: {flops: 4 GFLOPS, memory_bandwidth: 4 GB/s}}
    - {name: slow, vendor: cpu, peak_flops: 1 GFLOPS, memory: 64 MiB, memory_bandwidth: 1 GB/s,
       emulated: {flops: 1 GFLOPS, memory_bandwidth: 1 GB/s}}
  link_classes:
    - {name: shm, latency: 5 us, bandwidth: 2 GB/s, efficiency: 1.0}
    - {name: net, latency: 20 us, bandwidth: 1 GB/s, efficiency: 1.0}
  nodes:
    - {name: node-fast, device_type: fast, device_count: 2, intra_link: shm}
    - {name: node-mid, device_type: mid, device_count: 2, intra_link: shm}
    - {name: node-slow, device_type: slow, device_count: 2, intra_link: shm}
  islands:
    - {name: rack, nodes: [node-fast, node-mid, node-slow], link: net}
model: {preset: small, name: small-6, num_blocks: 6}
train:
  global_batch: 12
  seq_len: 64
  steps: 24
  optimizer: {lr: 1.0e-3, min_lr: 1.0e-4, warmup_steps: 5}
  val_every: 0
)";

inline spec::RunFile RunOf(const std::string& yaml, int64_t steps) {
  auto run = spec::ParseRunFile(yaml, "elastic_test", "");
  EXPECT_TRUE(run.ok()) << run.status().message();
  spec::RunFile out = run.ok() ? *run : spec::RunFile{};
  out.train.steps = steps;
  return out;
}

// The run's predictor as `motley plan` and `motley train --replan` build it on an all-emulated
// cluster (cli/offline.h): the emulated op-cost model. Keeps the run it references.
struct Models {
  explicit Models(const spec::RunFile& r)
      : run(r),
        settings(perf::DefaultSettings(run.cluster)),
        compute(run.cluster, run.model),
        predictor(run.cluster, run.model, run.train, compute, settings) {}
  spec::RunFile run;
  perf::PerfSettings settings;
  perf::EmulatedComputeModel compute;
  perf::Predictor predictor;
};

// The plan `motley plan RUN.yaml` writes for the healthy cluster (cli/offline.cc PlanOffline).
inline spec::Plan PlannedPlan(const Models& m, const perf::StragglerRates& rates = {},
                              const perf::LinkRates& link_rates = {}) {
  plan::PlannerOptions options;
  options.baselines = false;
  options.rates = rates;
  options.link_rates = link_rates;
  auto report = plan::PlanCluster(m.predictor, options);
  EXPECT_TRUE(report.ok()) << report.status().message();
  spec::Plan plan = report.ok() ? report->best.plan : spec::Plan{};
  plan.source = "planned";
  return plan;
}

// Quiet trainer options over a world of every cluster device (`motley train`'s launch).
inline train::ParallelTrainerOptions Quiet(const spec::RunFile& run) {
  train::ParallelTrainerOptions o;
  o.out = nullptr;
  o.world_devices = train::ClusterWorld(run.cluster);
  return o;
}

// The loop's options as `motley train --replan` fills them.
inline elastic::ElasticOptions LoopOptions(const Models& m) {
  elastic::ElasticOptions o;
  o.world_devices = train::ClusterWorld(m.run.cluster);
  o.measured_types = elastic::MeasuredTypes(m.run.cluster, m.compute);
  return o;
}

// Device `device` at speed `rate` (a fraction) from step `from`, back to 1 at `until` (0: never).
inline straggler::Scenario SlowDevice(int device, double rate, int64_t from, int64_t until = 0) {
  straggler::Scenario s;
  straggler::ScenarioEvent slow;
  slow.step = from;
  slow.device = device;
  slow.rate = rate;
  s.events.push_back(slow);
  if (until > 0) {
    straggler::ScenarioEvent back = slow;
    back.step = until;
    back.rate = 1.0;
    s.events.push_back(back);
  }
  return s;
}

inline double StepTime(const train::ParallelTrainSummary& s, int64_t step) {
  return s.step_times_s.at(static_cast<size_t>(step - s.first_step));
}

inline void ExpectSameLosses(const std::vector<double>& got, const std::vector<double>& want,
                             const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0.0;
  for (size_t k = 0; k < got.size(); ++k) {
    const double rel = std::fabs(got[k] - want[k]) / std::fabs(want[k]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-5) << what << ": step " << k + 1 << " loss " << got[k] << " vs " << want[k];
  }
  std::printf("%s: %zu steps, worst relative loss difference %.3g\n", what, got.size(), worst);
}

}  // namespace motley::testing
