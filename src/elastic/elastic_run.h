// Elastic training: the glue between the parallel trainer (train/parallel_trainer.h) and the
// straggler loop (straggler/coordinator.h), the one place besides cli that links both halves of
// the layering (docs/architecture.md §3). It turns
//  - a scenario file (straggler/scenario.h) into the trainer's injected device and link rates;
//  - the trainer's per-step report into the coordinator's RankCompute (compute = forward +
//    backward - TP waits; idle ranks' probe ops), and the coordinator's adopted plan into the
//    trainer's plan switch;
//  - the coordinator's record of each step into the metrics line (`straggler`).
// The predictor behind the coordinator is the roofline of the run's cluster; the coordinator
// calibrates it per device on the first steps (coordinator.h).
//
// Ownership: an ElasticLoop owns its predictor and coordinator and must outlive the training
// call whose options it filled. Thread safety: the trainer calls the hooks from rank 0 only.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"
#include "perf/compute_model.h"
#include "perf/predictor.h"
#include "perf/settings.h"
#include "spec/plan.h"
#include "spec/run_file.h"
#include "straggler/coordinator.h"
#include "straggler/scenario.h"
#include "train/parallel_trainer.h"

namespace motley::elastic {

// Sets options->device_rates and ->link_rates from the scenario (a copy is kept by the link hook).
void InjectScenario(const straggler::Scenario& scenario, const spec::ClusterSpec& cluster,
                    train::ParallelTrainerOptions* options);

class ElasticLoop {
 public:
  // `progress`: the coordinator's lines (may be nullptr). `tune` may adjust the coordinator's
  // options (thresholds, horizon) before it is built.
  ElasticLoop(const spec::RunFile& run, const spec::Plan& initial, std::FILE* progress,
              const std::function<void(straggler::CoordinatorOptions&)>& tune = {});
  ElasticLoop(const ElasticLoop&) = delete;  // the hooks point at this object
  ElasticLoop& operator=(const ElasticLoop&) = delete;

  // Sets options->plan_switch and ->annotate_metrics to this loop.
  void Attach(train::ParallelTrainerOptions* options);

  const straggler::StragglerCoordinator& coordinator() const { return *coordinator_; }
  // The plans adopted so far, in order (each named "replan after step N").
  const std::vector<spec::Plan>& adopted() const { return adopted_; }

 private:
  std::optional<spec::Plan> AfterStep(int64_t step, const train::StepReport& report);

  spec::RunFile run_;
  std::FILE* progress_;
  perf::PerfSettings settings_;
  std::unique_ptr<perf::RooflineComputeModel> compute_;
  std::unique_ptr<perf::Predictor> predictor_;
  std::unique_ptr<straggler::StragglerCoordinator> coordinator_;
  std::vector<spec::Plan> adopted_;
};

}  // namespace motley::elastic
