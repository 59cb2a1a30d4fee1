// Closed straggler loop on the simulator (issue 6): the discrete-event simulator (sim/simulator.h)
// stands in for the runtime, so that the monitor and the controller can be tested and studied on
// the virtual clock at any scale. Each step replays the running plan with every device's true
// slowdown (the scenario's speed, inverted, times an optional per-step jitter); the step time is
// the simulated iteration. Every `report_every` steps the monitor gets, per device, the simulated
// busy time (compute + optimizer) against the busy time of the same plan at nominal speed, for a
// device outside the plan a probe (nominal probe time times its slowdown), and per pipeline
// boundary link the activation and gradient transfers (bytes from the predictor, time at the
// link class's nominal speed divided by the scenario's link speed, times jitter). The controller
// runs at every step boundary; an adopted plan runs from the next step, whose time also carries
// the predicted migration time.
//
// Limits: the simulator's step time does not see link slowdowns (its network model has no link
// rates); links only feed the monitor here. Probe and link times are synthetic.
//
// Ownership: the predictor (and the output files, when given) must outlive the call. Thread safety:
// reentrant (the controller's background thread is joined before returning).
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/status.h"
#include "perf/predictor.h"
#include "spec/plan.h"
#include "straggler/controller.h"
#include "straggler/monitor.h"
#include "straggler/scenario.h"

namespace motley::straggler {

struct LoopOptions {
  int64_t steps = 100;
  int64_t report_every = 2;  // K: steps per monitor report
  double jitter = 0.0;       // per step and device (and link), slowdown x uniform [1-j, 1+j]
  uint64_t seed = 1;
  bool replan = true;  // false: the static plan (the baseline)
  MonitorOptions monitor;
  ControllerOptions controller;
  // Optional outputs (not owned): a line per committed change and per decision (report.h), and a
  // JSONL line per step {"step", "step_time_s", "plan_version", "straggler": {...}} whose
  // `straggler` record (report.h) is present on report steps and decision steps.
  std::FILE* progress = nullptr;
  std::FILE* metrics = nullptr;
};

struct LoopResult {
  std::vector<Seconds> step_times_s;      // [step - 1], migration included
  std::vector<int> plan_version;          // [step - 1]: 0 = the initial plan, +1 per adoption
  std::vector<ReplanDecision> decisions;  // every decision (adopted or not)
  std::vector<RateChangeRecord> changes;  // every committed rate change
  std::vector<std::pair<std::pair<int, int>, double>> slow_links;  // at the end
  perf::StragglerRates final_rates;  // the monitor's committed device rates at the end
  spec::Plan final_plan;
  int adopted = 0;
  double tokens_per_s = 0;  // over all steps (global batch * seq / step time)
};

Result<LoopResult> RunSimulatedLoop(const perf::Predictor& predictor, const spec::Plan& initial,
                                    const Scenario& scenario, const LoopOptions& options);

}  // namespace motley::straggler
