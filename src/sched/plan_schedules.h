// Every pipeline's schedule of one plan, built once per distinct (stage count, micro-batch
// count): a plan of many identical replicas builds one action list, not one per replica. The
// step program (step_program.cc), the predictor's memory check and memory fill
// (perf/predictor.cc) and the simulator's pipeline phase (sim/simulator.cc) all take their
// schedules from here. Immutable after Build; thread-safe to read.
#pragma once

#include <cstddef>
#include <vector>

#include "core/status.h"
#include "sched/schedule.h"
#include "spec/plan.h"

namespace motley::sched {

class PlanSchedules {
 public:
  // Builds plan.schedule for every pipeline of `plan`; BuildSchedule's error for the first
  // (stages, micro-batches) it refuses.
  static Result<PlanSchedules> Build(const spec::Plan& plan);

  // Pipeline k's schedule (k < the plan's pipeline count); valid while this object lives.
  const Schedule& of(size_t pipeline) const { return schedules_[index_[pipeline]]; }
  // Distinct schedules built (one per distinct (stages, micro-batches)).
  size_t distinct() const { return schedules_.size(); }

 private:
  std::vector<Schedule> schedules_;
  std::vector<size_t> index_;  // pipeline -> schedules_
};

}  // namespace motley::sched
