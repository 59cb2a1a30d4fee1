// The straggler loop as the runtime's coordinator (rank 0) runs it (issue 6): after every step it
// gets each rank's measured compute time, turns it into monitor reports every `report_every`
// steps, and drives the re-plan controller; a returned plan is to be adopted before the next step.
// It knows nothing of the runtime's types: the caller (the cli's plan-switch callback around
// train::ParallelTrainerOptions::plan_switch) converts its per-step report into RankCompute.
//
// Expected times ("its profile"): the predictor's compute time of the rank's work under the
// running plan (micro-batches x (forward + backward) of its stage, perf::Predictor::StageCostOf at
// nominal speed) times a per-device calibration factor, the ratio measured / predicted over the
// first `calibration_steps` steps (assumed healthy). The factor absorbs the difference between the
// predictor's compute model and the device's real (or emulated) speed; it stays when the plan
// changes, so the expected time follows the new work. A device slow from the start is therefore
// taken as its own normal (a known limit; a measured profile removes it).
//
// Ownership: keeps a reference to the predictor. Thread safety: one coordinator thread; the
// controller's re-plan runs on its own background thread (controller.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "perf/predictor.h"
#include "spec/plan.h"
#include "straggler/controller.h"
#include "straggler/monitor.h"

namespace motley::straggler {

// One rank's step as measured by the runtime.
struct RankCompute {
  int device = 0;
  bool idle = false;      // left out of the running plan (no work this step)
  Seconds compute_s = 0;  // its forward + backward compute (TP all-reduce waits excluded)
  // An idle rank's probe op (a small matmul): measured and expected-at-profile time; 0: no probe.
  // Without probes a device dropped from the plan is never seen to recover.
  Seconds probe_s = 0;
  Seconds probe_expected_s = 0;
};

struct CoordinatorOptions {
  int64_t report_every = 2;       // K
  int64_t calibration_steps = 2;  // healthy steps that set each device's calibration factor
  MonitorOptions monitor;
  ControllerOptions controller;
  std::FILE* progress = nullptr;  // changes and decisions as lines (report.h); not owned
};

class StragglerCoordinator {
 public:
  StragglerCoordinator(const perf::Predictor& predictor, const spec::Plan& initial,
                       CoordinatorOptions options);

  // After step `step` (ranks: every world rank, any order). Returns the plan to run from step + 1
  // when the controller adopted one (the coordinator then expects work under it), else nullopt.
  Result<std::optional<spec::Plan>> AfterStep(int64_t step, const std::vector<RankCompute>& ranks);

  // The `straggler` metrics record of the last step (null when it neither reported nor decided).
  const nlohmann::ordered_json& last_record() const { return last_record_; }
  const RateMonitor& monitor() const { return monitor_; }
  const ReplanController& controller() const { return controller_; }
  const spec::Plan& plan() const { return controller_.plan(); }
  // Calibration factor of a device (measured / predicted; 0 before calibration).
  double calibration(int device) const { return factor_.at(static_cast<size_t>(device)); }

 private:
  void SetPlanWork(const spec::Plan& plan);

  const perf::Predictor& predictor_;
  CoordinatorOptions options_;
  RateMonitor monitor_;
  ReplanController controller_;
  std::vector<Seconds> predicted_;  // per device: predicted compute per step under the plan
  std::vector<double> factor_;      // per device: calibration (0 = not yet)
  std::vector<Seconds> cal_measured_, cal_predicted_;
  std::vector<Seconds> measured_, expected_;  // the current report window
  std::vector<Seconds> probe_measured_, probe_expected_;
  int64_t steps_seen_ = 0;
  nlohmann::ordered_json last_record_;
};

}  // namespace motley::straggler
