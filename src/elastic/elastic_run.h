// Elastic training: the glue between the parallel trainer (train/parallel_trainer.h) and the
// straggler loop (straggler/coordinator.h), the one place besides cli that links both halves of
// the layering (docs/architecture.md §3). It turns
//  - a scenario file (straggler/scenario.h) into the trainer's injected device and link rates;
//  - the trainer's per-step report into the coordinator's RankCompute (compute = forward +
//    backward - TP waits; the probe op) and LinkUse (each rank's traffic per peer), and the
//    coordinator's adopted plan into the trainer's plan switch;
//  - the coordinator's record of each step into the metrics line (`straggler`).
// The predictor behind the coordinator is the caller's (cli: the run's, as `motley plan` builds
// it: the emulated op costs on an emulated cluster, a measured profile when given, else the
// roofline); ElasticOptions::measured_types says which device types it measures, the others are
// judged against their peers (coordinator.h). Plans are adopted only when the runtime can run
// them: CheckPlanForRun, and every device inside the trainer's world.
// Under mpiexec the loop lives on rank 0 only: the trainer asks it there and broadcasts the
// decision; every process injects the same scenario into its own rank.
//
// Ownership: an ElasticLoop owns its coordinator and keeps a reference to the predictor (which
// must outlive it); it must outlive the training call whose options it filled. Thread safety:
// the trainer calls the hooks from rank 0 only.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"
#include "perf/compute_model.h"
#include "perf/predictor.h"
#include "spec/plan.h"
#include "spec/run_file.h"
#include "straggler/coordinator.h"
#include "straggler/scenario.h"
#include "train/parallel_trainer.h"

namespace motley::elastic {

// Sets options->device_rates and ->link_rates from the scenario (a copy is kept by the link hook).
void InjectScenario(const straggler::Scenario& scenario, const spec::ClusterSpec& cluster,
                    train::ParallelTrainerOptions* options);

struct ElasticOptions {
  // The trainer's world (ParallelTrainerOptions::world_devices; empty: the initial plan's
  // devices): adopted plans stay inside it.
  std::vector<int> world_devices;
  // straggler::CoordinatorOptions::measured_types: per device type, whether the predictor's
  // compute model measures it (MeasuredTypes).
  std::vector<bool> measured_types;
  std::FILE* progress = nullptr;  // the coordinator's lines (may be nullptr)
  // May adjust the coordinator's options (thresholds, horizon) before it is built.
  std::function<void(straggler::CoordinatorOptions&)> tune;
};

// Per device type of `cluster`: true when `compute` measures it: an emulated type under the
// emulated op-cost model (exact by construction), a type a measured profile covers.
std::vector<bool> MeasuredTypes(const spec::ClusterSpec& cluster,
                                const perf::ComputeModel& compute);

class ElasticLoop {
 public:
  ElasticLoop(const spec::RunFile& run, const perf::Predictor& predictor, const spec::Plan& initial,
              ElasticOptions options = {});
  ElasticLoop(const ElasticLoop&) = delete;  // the hooks point at this object
  ElasticLoop& operator=(const ElasticLoop&) = delete;

  // Sets options->plan_switch and ->annotate_metrics to this loop, and ->straggler_reports
  // (which every rank must set alike: under a launcher set it on the other ranks too).
  void Attach(train::ParallelTrainerOptions* options);

  const straggler::StragglerCoordinator& coordinator() const { return *coordinator_; }
  // The plans adopted so far, in order (each named "replan after step N").
  const std::vector<spec::Plan>& adopted() const { return adopted_; }
  // Steps after which a plan was adopted (the next step ran under it), in order.
  const std::vector<int64_t>& adopted_after() const { return adopted_after_; }

 private:
  std::optional<spec::Plan> AfterStep(int64_t step, const train::StepReport& report);

  spec::RunFile run_;
  std::vector<int> world_;
  std::FILE* progress_;
  std::unique_ptr<straggler::StragglerCoordinator> coordinator_;
  std::vector<spec::Plan> adopted_;
  std::vector<int64_t> adopted_after_;
};

}  // namespace motley::elastic
