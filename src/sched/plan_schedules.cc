// PlanSchedules: one BuildSchedule per distinct (kind, stage count, micro-batch count, model
// chunks) in the process, kept in a locked store of at most kMaxStoredBytes of action lists and
// walk orders: when a new schedule would pass it, the least recently used entries holding half of
// it are dropped, so a long search over many micro-batch counts stays within that (a plan in use
// keeps its own schedules alive through shared pointers).
#include "sched/plan_schedules.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

namespace motley::sched {
namespace {

constexpr size_t kMaxStoredBytes = size_t{96} << 20;

using Key = std::tuple<int, int, int64_t, int>;  // (kind, stages, micro-batches, chunks)

}  // namespace

Result<std::shared_ptr<const BuiltSchedule>> StoredSchedule(spec::PipelineSchedule kind, int stages,
                                                            int64_t micro_batches, int chunks) {
  struct Entry {
    std::shared_ptr<const BuiltSchedule> built;
    size_t bytes = 0;
    uint64_t last_use = 0;
  };
  static std::mutex mutex;
  static std::map<Key, Entry> store;
  static size_t stored_bytes = 0;
  static uint64_t clock = 0;
  const Key key(static_cast<int>(kind), stages, micro_batches, chunks);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = store.find(key);
    if (it != store.end()) {
      it->second.last_use = ++clock;
      return it->second.built;
    }
  }
  ScheduleOptions options;
  options.chunks = chunks;
  MOTLEY_ASSIGN_OR_RETURN(Schedule s, BuildSchedule(kind, stages, micro_batches, options));
  auto built = std::make_shared<BuiltSchedule>();
  built->schedule = std::move(s);
  size_t bytes = 0;
  built->in_flight.resize(static_cast<size_t>(stages * chunks));
  for (int i = 0; i < stages; ++i) {
    for (int c = 0; c < chunks; ++c) {
      built->in_flight[static_cast<size_t>(c * stages + i)] =
          InFlightMicroBatches(built->schedule, i, chunks > 1 ? c : -1);
    }
    built->buffers_held.push_back(PipelineBuffersHeld(built->schedule, i));
    bytes += built->schedule.stages[static_cast<size_t>(i)].size() * sizeof(Action);
  }
  built->walk_order = RecordWalkOrder(built->schedule);
  bytes += built->walk_order.size() * sizeof(WalkStep);
  const std::lock_guard<std::mutex> lock(mutex);
  if (stored_bytes + bytes > kMaxStoredBytes) {
    std::vector<std::pair<uint64_t, Key>> by_age;
    for (const auto& [k, e] : store) by_age.emplace_back(e.last_use, k);
    std::sort(by_age.begin(), by_age.end());
    for (const auto& [use, k] : by_age) {
      if (stored_bytes + bytes <= kMaxStoredBytes / 2) break;
      stored_bytes -= store.at(k).bytes;
      store.erase(k);
    }
  }
  auto [it, inserted] = store.emplace(key, Entry{std::move(built), bytes, ++clock});
  if (inserted) stored_bytes += bytes;
  return it->second.built;
}

Result<PlanSchedules> PlanSchedules::Build(const spec::Plan& plan) {
  PlanSchedules out;
  out.per_pipeline_.reserve(plan.pipelines.size());
  const spec::PipelinePlan* previous = nullptr;
  for (const spec::PipelinePlan& pipe : plan.pipelines) {
    if (previous != nullptr && previous->num_stages() == pipe.num_stages() &&
        previous->micro_batches == pipe.micro_batches && previous->chunks == pipe.chunks) {
      out.per_pipeline_.push_back(out.per_pipeline_.back());  // replicas come in runs
    } else {
      MOTLEY_ASSIGN_OR_RETURN(
          std::shared_ptr<const BuiltSchedule> s,
          StoredSchedule(plan.schedule, pipe.num_stages(), pipe.micro_batches, pipe.chunks));
      out.per_pipeline_.push_back(std::move(s));
    }
    previous = &pipe;
  }
  return out;
}

}  // namespace motley::sched
