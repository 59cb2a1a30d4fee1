// The straggler loop as the runtime's coordinator (rank 0) runs it (issue 6, issue 14): after every
// step it gets each rank's measured compute time (and probe op, and link traffic), turns them
// into monitor reports every `report_every` steps, and drives the re-plan controller; a returned
// plan is to be adopted before the next step. It knows nothing of the runtime's types: the caller
// (elastic/elastic_run.h, around train::ParallelTrainerOptions::plan_switch) converts its
// per-step report into RankCompute and LinkUse.
//
// Rates against expectation: a device's rate is its measured time against the expected time of
// the same work (measured / expected; 3 = three times slower):
//  - a device type the predictor's compute model MEASURES (CoordinatorOptions::measured_types: a
//    measured profile, or the exact op costs of an emulated type) expects the predicted time: the
//    predictor's compute time of the rank's work under the running plan (micro-batches x (forward
//    + backward) of its stage, perf::Predictor::StageCostOfShape without the TP all-reduces, at
//    nominal speed). A device slow from the start is then a straggler from the start, and a
//    device that joins later is judged from its first step;
//  - any other type is judged against its peers: the expected time is the predicted time times
//    the median, over the type's devices reporting that step, of measured / predicted (a model
//    alone is too far off on real hardware to judge by; the median of its peers is not, as long
//    as fewer than half of them are slow);
//  - a type with fewer than `min_peers` devices reporting falls back to each device's own first
//    `calibration_steps` steps (the factor measured / predicted, assumed healthy): a device
//    alone of its type and without a profile that is slow from the start counts as normal.
// An idle rank's probe op (a small matmul) is measured against the time its emulated profile
// gives it (probe_expected_s), else against the median probe time of the type's devices (ranks on
// real devices all run it while the loop listens), else against its own first probes.
// Links: each rank's bytes, transfers and wire time per peer (LinkUse), summed over the window
// per device pair, go to the monitor, whose committed link rates go to the controller beside the
// device rates (perf::LinkRates).
//
// Ownership: keeps a reference to the predictor. Thread safety: one coordinator thread; the
// controller's re-plan runs on its own background thread (controller.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <utility>
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
  // Its probe op (a small matmul; 0: none ran) and the probe's time at the device's emulated
  // profile (0: no profile gives it; judged against the type's peers).
  Seconds probe_s = 0;
  Seconds probe_expected_s = 0;
};

// What one rank sent to one peer during the step (emulated links).
struct LinkUse {
  int from_device = 0;
  int to_device = 0;
  Bytes bytes = 0;
  int64_t transfers = 0;
  Seconds wire_s = 0;  // on the wire, not waiting for the peer
};

struct CoordinatorOptions {
  int64_t report_every = 2;  // K
  // Per device type index: the predictor's compute model measures it (see the top of this file).
  // Empty or false: judged against its peers.
  std::vector<bool> measured_types;
  int min_peers = 3;              // reporting devices of a type for the peer median
  int64_t calibration_steps = 2;  // the fallback's own first steps
  MonitorOptions monitor;
  ControllerOptions controller;
  std::FILE* progress = nullptr;  // changes and decisions as lines (report.h); not owned
};

class StragglerCoordinator {
 public:
  StragglerCoordinator(const perf::Predictor& predictor, const spec::Plan& initial,
                       CoordinatorOptions options);

  // After step `step` (ranks: every world rank, any order; links: every rank's traffic of the
  // step, may be empty). Returns the plan to run from step + 1 when the controller adopted one
  // (the coordinator then expects work under it), else nullopt.
  Result<std::optional<spec::Plan>> AfterStep(int64_t step, const std::vector<RankCompute>& ranks,
                                              const std::vector<LinkUse>& links = {});

  // The `straggler` metrics record of the last step (null when it neither reported nor decided).
  const nlohmann::ordered_json& last_record() const { return last_record_; }
  const RateMonitor& monitor() const { return monitor_; }
  const ReplanController& controller() const { return controller_; }
  const spec::Plan& plan() const { return controller_.plan(); }
  // How a device's expected time is known at the last step: "profile", "peers", "own"
  // (calibrated on its own first steps) or "" (not yet).
  const char* expectation(int device) const;

 private:
  enum class Basis : uint8_t { kNone, kProfile, kPeers, kOwn };
  struct Own {  // the fallback: a device's first steps (or probes), assumed healthy
    int64_t steps = 0;
    Seconds measured = 0, predicted = 0;
    double factor() const { return predicted > 0 ? measured / predicted : 0.0; }
  };
  void SetPlanWork(const spec::Plan& plan);
  bool Measured(int device) const;

  const perf::Predictor& predictor_;
  CoordinatorOptions options_;
  RateMonitor monitor_;
  ReplanController controller_;
  std::vector<Seconds> predicted_;  // per device: predicted compute per step under the plan
  std::vector<Own> own_, own_probe_;
  std::vector<Basis> basis_;
  std::vector<Seconds> measured_, expected_;  // the current report window
  std::vector<bool> probed_;
  struct LinkAcc {
    Bytes bytes = 0;
    int64_t transfers = 0;
    Seconds wire_s = 0;
  };
  std::map<std::pair<int, int>, LinkAcc> links_;  // the window, by device pair (a < b)
  nlohmann::ordered_json last_record_;
};

}  // namespace motley::straggler
