// Plan switches of the parallel trainer at a step boundary (parallel_trainer.h,
// docs/architecture.md §9): agreeing on rank 0's decision, and one rank's switch -- snapshot of its
// state, rebuild of its ParallelRank under the new plan, direct migration of parameters and AdamW
// moments (parallel/migration.h) -- with the record of the switch gathered from every rank.
//
// Ownership: functions borrow their arguments for the call; SwitchPlan replaces the rank and
// layout held by `state` and hands the old layout back. Thread safety: one rank's thread; both
// functions are collective over the world (every rank calls them at the same step).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "comm/communicator.h"
#include "core/status.h"
#include "parallel/parallel_rank.h"
#include "parallel/world_layout.h"
#include "spec/plan.h"
#include "spec/run_file.h"
#include "tensor/backend.h"
#include "train/parallel_trainer.h"

namespace motley::train {

// Rank 0 passes its decision (a plan it has checked, or std::nullopt), the other ranks anything;
// every rank returns rank 0's decision. The plan travels as its JSON (spec::PlanToJson) plus its
// name (Plan::source).
Result<std::optional<spec::Plan>> AgreeOnPlan(comm::Communicator& world,
                                              const std::optional<spec::Plan>& decision);

// What one rank runs under the current plan. The layout is over the running world
// (WorldLayout::Build(plan, world devices)); `rank` references it.
struct RankUnderPlan {
  std::unique_ptr<parallel::WorldLayout> layout;
  std::unique_ptr<parallel::ParallelRank> rank;
};

struct SwitchOptions {
  parallel::ParallelRankOptions rank_options;  // for the new ParallelRank (its clock times all)
  bool check = false;       // checksum every replica before and after; a difference is an error
  bool on_virtual = false;  // the run's clock is virtual: time_s is the makespan over ranks
};

struct SwitchOutcome {
  MigrationRecord record;                      // the same on every rank
  std::unique_ptr<parallel::WorldLayout> old;  // the layout the last step ran under
};

// Switches rank r after step `step` from state's plan to `next` (which passed CheckPlanForRun);
// each piece of state comes from the old holder whose sends finish first over the cluster's
// links (LinkClass::TransferTime). `state` then holds the new layout and rank. Errors: `next`
// uses a device outside the world, a migration or rebuild failure, a checksum difference (check).
Result<SwitchOutcome> SwitchPlan(const spec::RunFile& run, int r, comm::Communicator& world,
                                 tensor::Backend& backend, const SwitchOptions& options,
                                 int64_t step, RankUnderPlan& state, const spec::Plan& next);

// The plan's name for records and messages: Plan::source, or "plan".
std::string PlanName(const spec::Plan& plan);

}  // namespace motley::train
