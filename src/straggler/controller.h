// Re-plan controller (docs/architecture.md §9, issue 6): turns the monitor's committed straggler
// rates (per device, and per link: perf::LinkRates, which the predictor applies to the link's
// transfers, so a re-plan can move data-parallel or pipeline traffic off a slowed link) into plan
// changes. When the rates change at a step boundary it starts a re-plan on a BACKGROUND
// std::thread while training goes on; at a later step boundary it takes the result and adopts the
// new plan only when the predicted gain over the horizon exceeds the predicted migration cost:
//   gain = horizon_steps * (current plan's iteration - new plan's iteration), both predicted under
//   the new rates;  adopt iff gain > migration_s + min_gain_fraction * horizon * current iteration.
// Candidates: plan::Replan's (the current plan, the current layout re-split, the planner's fresh
// plans), plus "drop": the current layout without the TP group of a device whose rate is at least
// drop_min_rate (the device leaves the plan while it is very slow; the monitor then hears from its
// probe op), plus "rejoin": the initial plan's layout re-split for the current rates when devices
// of the initial plan are out of the current one and no longer that slow. Every candidate is
// scored as plan::Replan scores (horizon * predicted iteration + migration time, plan::MovedState).
//
// Determinism: with wait_for_result (the default) the decision is taken exactly at the boundary
// `started + adopt_after_steps`, waiting there for the thread if it is not done, so runs on the
// virtual clock adopt at the same step whatever the host's speed. Without it, the decision is
// taken at the first boundary (at or after that one) where the thread has finished. Rates that
// change again while a re-plan runs make its result stale: it is dropped and a new re-plan starts.
//
// Ownership: keeps a reference to the predictor (and its cluster, model, train spec), which must
// outlive the controller; the background thread reads it (Predictor's const methods are
// thread-safe). Thread safety: the controller itself is driven by one coordinator thread; the
// destructor waits for a running re-plan.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "perf/predictor.h"
#include "plan/planner.h"
#include "spec/plan.h"

namespace motley::straggler {

struct ControllerOptions {
  int64_t horizon_steps = 200;      // steps a new plan is expected to run (plan::ReplanOptions)
  plan::PlannerOptions planner;     // for the fresh plans; `rates` is filled by the controller
  double min_gain_fraction = 0.02;  // of horizon * current iteration, on top of the migration
  bool allow_drop = true;
  double drop_min_rate = 2.0;     // slowdown from which a device is tried out of the plan
  int64_t adopt_after_steps = 1;  // the earliest decision boundary after the start
  bool wait_for_result = true;    // see the top of this file
  // What the runtime can run (e.g. train::CheckPlanForRun); a chosen plan it rejects is not
  // adopted and the decision's `candidate` says why. Empty: every valid plan. Called on the
  // background thread.
  std::function<Status(const spec::Plan&)> accept;
};

struct ReplanDecision {
  int64_t started_step = 0;  // boundary (after this step) at which the re-plan started
  int64_t decided_step = 0;  // boundary at which it was decided; the new plan runs from +1
  bool adopted = false;
  std::string candidate;            // which candidate won ("current plan", "without device 3", ...)
  perf::StragglerRates rates;       // the committed rates it planned for
  perf::LinkRates link_rates;       // the committed link rates it planned for
  Seconds current_iteration_s = 0;  // predicted, the running plan under `rates`
  Seconds new_iteration_s = 0;      // predicted, the chosen plan under `rates`
  Seconds gain_s = 0;               // horizon * (current - new)
  Seconds migration_s = 0;          // predicted time to move state (slowest receiver)
  Bytes moved_bytes = 0;
  std::vector<int> devices_out;  // devices of the initial plan the chosen plan leaves out
  double replan_wall_s = 0;      // wall time the re-plan took (background thread)
  spec::Plan plan;               // the chosen plan (the running one when not adopted)
};

// The re-plan itself (what the background thread runs): scores every candidate and decides.
// `initial` is the plan training started with (for "rejoin"), `current` the running plan.
Result<ReplanDecision> DecideReplan(const perf::Predictor& predictor, const spec::Plan& initial,
                                    const spec::Plan& current, const perf::StragglerRates& rates,
                                    const perf::LinkRates& link_rates,
                                    const ControllerOptions& options);

// Same blocks, devices, TP degrees, micro-batches and settings (comments ignored).
bool SamePlan(const spec::Plan& a, const spec::Plan& b);

class ReplanController {
 public:
  ReplanController(const perf::Predictor& predictor, spec::Plan initial,
                   ControllerOptions options = {});
  ~ReplanController();
  ReplanController(const ReplanController&) = delete;
  ReplanController& operator=(const ReplanController&) = delete;

  // At the boundary after step `step`, on the coordinator: `rates` and `link_rates` are the
  // monitor's committed rates and `rates_changed` says whether either changed since the previous
  // call. Returns the
  // decision taken at this boundary, if any; when it is adopted, plan() is the new plan from step
  // + 1 on. Errors: the re-plan failed (the running plan stays).
  Result<std::optional<ReplanDecision>> AtStepBoundary(int64_t step,
                                                       const perf::StragglerRates& rates,
                                                       const perf::LinkRates& link_rates,
                                                       bool rates_changed);

  const spec::Plan& plan() const { return current_; }
  const spec::Plan& initial_plan() const { return initial_; }
  bool in_flight() const { return worker_.joinable(); }
  const std::vector<ReplanDecision>& decisions() const { return decisions_; }
  int adopted_count() const;
  int stale_results() const { return stale_; }

 private:
  void Start(int64_t step, const perf::StragglerRates& rates, const perf::LinkRates& link_rates);
  Result<ReplanDecision> Join();

  const perf::Predictor& predictor_;
  spec::Plan initial_;
  spec::Plan current_;
  ControllerOptions options_;
  std::thread worker_;
  std::future<Result<ReplanDecision>> result_;
  int64_t started_step_ = 0;
  perf::StragglerRates job_rates_;     // rates of the running re-plan
  perf::StragglerRates latest_rates_;  // the newest committed rates
  perf::LinkRates job_link_rates_;
  perf::LinkRates latest_link_rates_;
  std::vector<ReplanDecision> decisions_;
  int stale_ = 0;
};

}  // namespace motley::straggler
