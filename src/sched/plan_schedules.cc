// PlanSchedules: one BuildSchedule per distinct (stage count, micro-batch count) of a plan.
#include "sched/plan_schedules.h"

#include <map>
#include <utility>

namespace motley::sched {

Result<PlanSchedules> PlanSchedules::Build(const spec::Plan& plan) {
  PlanSchedules out;
  std::map<std::pair<int, int64_t>, size_t> built;
  out.index_.reserve(plan.pipelines.size());
  for (const spec::PipelinePlan& pipe : plan.pipelines) {
    const std::pair<int, int64_t> key(pipe.num_stages(), pipe.micro_batches);
    auto it = built.find(key);
    if (it == built.end()) {
      MOTLEY_ASSIGN_OR_RETURN(Schedule s,
                              BuildSchedule(plan.schedule, key.first, pipe.micro_batches));
      out.schedules_.push_back(std::move(s));
      it = built.emplace(key, out.schedules_.size() - 1).first;
    }
    out.index_.push_back(it->second);
  }
  return out;
}

}  // namespace motley::sched
