// What the offline commands (`motley plan`, `predict`, `simulate`) and `motley train --auto-plan`
// share: a run's predictor as perf/run_predictor.h builds it, with the stragglers of the command
// line, and the planner call that `motley plan` makes, so that `train --auto-plan` trains exactly
// the plan `plan` writes.
//
// Ownership: an Offline owns the run and every model the predictor references; keep it alive
// while the predictor is used. Thread safety: none needed (one command at a time).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "perf/predictor.h"
#include "perf/run_predictor.h"
#include "plan/planner.h"
#include "spec/run_file.h"

namespace motley::cli {

// The run's predictor (perf/run_predictor.h) and the stragglers the command line names.
struct Offline : perf::RunPredictor {
  perf::StragglerRates rates;  // empty: no stragglers
  perf::LinkRates link_rates;  // empty: no slow links
};

// One --straggler value: "ID=RATE" (device ID runs RATE times slower) or "A-B=RATE" (the link
// between devices A and B, both directions, runs RATE times slower). Ids are whole numbers of
// [0, num_devices), A != B; RATE a finite number in [1, spec::kMaxSlowdown]. Errors
// (kInvalidArgument) name the option and the value.
struct Straggler {
  int device = -1;  // the device, or one end of the link
  int other = -1;   // the link's other end; -1: a device straggler
  double rate = 1;  // times slower
  bool is_link() const { return other >= 0; }
};
Result<Straggler> ParseStraggler(std::string_view text, int num_devices);

// Builds the predictor of `run`. profile_path: a measured profile (docs/formats/profile.md) or
// empty; stragglers: "ID=SLOWDOWN" entries (device ID runs SLOWDOWN times slower, >= 1) or
// "A-B=SLOWDOWN" entries (the link between devices A and B runs SLOWDOWN times slower).
Result<std::unique_ptr<Offline>> LoadOffline(spec::RunFile run, const std::string& profile_path,
                                             const std::vector<std::string>& stragglers);

// The planner as `motley plan` runs it, with the command's `options` (baselines only when asked:
// they do not change the choice; threads, interleaving degrees, shardings) and the offline run's
// straggler and link rates; rank_top is raised to confirm_top. Progress lines go to stderr unless
// quiet. The chosen plan passes spec::ValidatePlan, the rule `validate`, `predict`, `simulate`
// and `train` apply too (an error otherwise).
Result<plan::PlanReport> PlanOffline(const Offline& offline, plan::PlannerOptions options,
                                     bool quiet);

}  // namespace motley::cli
