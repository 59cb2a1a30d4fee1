// Every pipeline's schedule of one plan, built once per distinct (kind, stage count, micro-batch
// count, model chunks) for the whole process: a plan of many identical replicas builds one action
// list, not one per replica, and the planner's thousands of candidates share the few shapes they
// have. The step program (step_program.cc), the predictor's memory fill (perf/predictor.cc;
// its memory check reads the in-flight counts in closed form), the exact pipeline walk
// (perf/step_model.cc) and the simulator's pipeline phase (sim/simulator.cc) all take their
// schedules from here, with each stage's in-flight and transfer-buffer counts and the walk order
// (walk_order.h) computed once.
// Thread-safe: the process-wide store is locked, and a built schedule is immutable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "sched/schedule.h"
#include "sched/walk_order.h"
#include "spec/plan.h"

namespace motley::sched {

// One schedule with the per-stage counts its readers ask for.
struct BuiltSchedule {
  Schedule schedule;
  // InFlightMicroBatches per virtual stage (chunk c of device group i at c * p + i: that chunk's
  // micro-batches; the stage's, without interleaving).
  std::vector<int64_t> in_flight;
  std::vector<int64_t> buffers_held;  // PipelineBuffersHeld per device group
  std::vector<WalkStep> walk_order;   // RecordWalkOrder: the timed pipeline walk replays it
};

// The process-wide store's schedule of one pipeline shape (`stages` device groups, `chunks` model
// chunks each: interleaved 1F1B when > 1), built on first use; BuildSchedule's error when it
// refuses the shape (errors are not stored).
Result<std::shared_ptr<const BuiltSchedule>> StoredSchedule(spec::PipelineSchedule kind, int stages,
                                                            int64_t micro_batches, int chunks = 1);

class PlanSchedules {
 public:
  // Builds (or finds) plan.schedule for every pipeline of `plan` (with its chunks);
  // BuildSchedule's error for the first (stages, micro-batches, chunks) it refuses.
  static Result<PlanSchedules> Build(const spec::Plan& plan);

  // Pipeline k's schedule (k < the plan's pipeline count); valid while this object lives.
  const Schedule& of(size_t pipeline) const { return per_pipeline_[pipeline]->schedule; }
  // Pipeline k: activations held at once by the model chunk of virtual stage s (the index into
  // its stages), and the executor's transfer buffers on device group i.
  int64_t in_flight(size_t pipeline, size_t virtual_stage) const {
    return per_pipeline_[pipeline]->in_flight.at(virtual_stage);
  }
  int64_t buffers_held(size_t pipeline, size_t group) const {
    return per_pipeline_[pipeline]->buffers_held.at(group);
  }

 private:
  std::vector<std::shared_ptr<const BuiltSchedule>> per_pipeline_;
};

}  // namespace motley::sched
