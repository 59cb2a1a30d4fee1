// Builders of the per-stage action lists (1F1B, GPipe), in-flight counts and printing.
#include "sched/schedule.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

namespace motley::sched {

std::string_view ActionKindName(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward: return "F";
    case ActionKind::kBackward: return "B";
    case ActionKind::kSendForward: return "SF";
    case ActionKind::kRecvForward: return "RF";
    case ActionKind::kSendBackward: return "SB";
    case ActionKind::kRecvBackward: return "RB";
    case ActionKind::kDpSync: return "DP";
    case ActionKind::kOptimizerStep: return "OPT";
  }
  return "?";
}

bool IsCommunication(ActionKind kind) {
  return kind == ActionKind::kSendForward || kind == ActionKind::kRecvForward ||
         kind == ActionKind::kSendBackward || kind == ActionKind::kRecvBackward;
}

std::string ActionToString(const Action& action) {
  if (action.micro_batch < 0) return std::string(ActionKindName(action.kind));
  return fmt::format("{}{}", ActionKindName(action.kind), action.micro_batch);
}

namespace {

// Appends the actions of one stage; the helpers drop the transfers across the pipeline's ends.
class StageBuilder {
 public:
  StageBuilder(int stage, int num_stages, std::vector<Action>* out)
      : first_(stage == 0), last_(stage == num_stages - 1), out_(out) {}

  void ForwardStep(int64_t mb) {
    if (!first_) Push(ActionKind::kRecvForward, mb);
    Push(ActionKind::kForward, mb);
    if (!last_) Push(ActionKind::kSendForward, mb);
  }
  void BackwardStep(int64_t mb) {
    if (!last_) Push(ActionKind::kRecvBackward, mb);
    Push(ActionKind::kBackward, mb);
    if (!first_) Push(ActionKind::kSendBackward, mb);
  }
  void Push(ActionKind kind, int64_t mb) { out_->push_back(Action{kind, mb}); }

 private:
  bool first_;
  bool last_;
  std::vector<Action>* out_;
};

}  // namespace

Result<Schedule> BuildSchedule(spec::PipelineSchedule kind, int num_stages,
                               int64_t num_micro_batches, const ScheduleOptions& options) {
  if (num_stages < 1) return Err("schedule: number of stages must be positive, got {}", num_stages);
  if (num_micro_batches < 1) {
    return Err("schedule: number of micro-batches must be positive, got {}", num_micro_batches);
  }
  Schedule schedule;
  schedule.kind = kind;
  schedule.num_stages = num_stages;
  schedule.num_micro_batches = num_micro_batches;
  schedule.stages.resize(static_cast<size_t>(num_stages));
  const int64_t m = num_micro_batches;
  for (int i = 0; i < num_stages; ++i) {
    std::vector<Action>& actions = schedule.stages[static_cast<size_t>(i)];
    StageBuilder b(i, num_stages, &actions);
    if (kind == spec::PipelineSchedule::kGPipe) {
      for (int64_t k = 0; k < m; ++k) b.ForwardStep(k);
      for (int64_t k = 0; k < m; ++k) b.BackwardStep(k);
    } else {
      // PipeDream-flush / Megatron non-interleaved 1F1B (Narayanan et al. SC'21, Fig. 4).
      const int64_t warmup = std::min<int64_t>(num_stages - i - 1, m);
      const int64_t steady = m - warmup;
      for (int64_t k = 0; k < warmup; ++k) b.ForwardStep(k);
      for (int64_t j = 0; j < steady; ++j) {
        b.ForwardStep(warmup + j);
        b.BackwardStep(j);
      }
      for (int64_t k = steady; k < m; ++k) b.BackwardStep(k);
    }
    if (options.with_step_actions) {
      b.Push(ActionKind::kDpSync, -1);
      b.Push(ActionKind::kOptimizerStep, -1);
    }
  }
  return schedule;
}

int64_t InFlightMicroBatches(const Schedule& schedule, int stage) {
  MOTLEY_CHECK(stage >= 0 && stage < static_cast<int>(schedule.stages.size()), "bad stage");
  int64_t current = 0;
  int64_t peak = 0;
  for (const Action& a : schedule.stages[static_cast<size_t>(stage)]) {
    if (a.kind == ActionKind::kForward) peak = std::max(peak, ++current);
    if (a.kind == ActionKind::kBackward) --current;
  }
  return peak;
}

int64_t PipelineBuffersHeld(const Schedule& schedule, int stage) {
  MOTLEY_CHECK(stage >= 0 && stage < static_cast<int>(schedule.stages.size()), "bad stage");
  const std::vector<Action>& actions = schedule.stages[static_cast<size_t>(stage)];
  const bool first = stage == 0;
  const bool last = stage + 1 == static_cast<int>(schedule.stages.size());
  int64_t held = 0;
  int64_t peak = 0;
  for (size_t i = 0; i < actions.size();) {
    if (IsCommunication(actions[i].kind)) {  // one batch: receives take, sends of it release
      size_t end = i;
      while (end < actions.size() && IsCommunication(actions[end].kind)) ++end;
      for (size_t j = i; j < end; ++j) {
        const ActionKind k = actions[j].kind;
        if (k == ActionKind::kRecvForward || k == ActionKind::kRecvBackward) {
          peak = std::max(peak, ++held);
        }
      }
      for (size_t j = i; j < end; ++j) held -= actions[j].kind == ActionKind::kSendBackward;
      i = end;
      continue;
    }
    if (actions[i].kind == ActionKind::kForward && !first) --held;
    if (actions[i].kind == ActionKind::kBackward) {
      if (!last) --held;
      if (!first) peak = std::max(peak, ++held);
    }
    ++i;
  }
  return peak;
}

int64_t OneFOneBInFlight(int num_stages, int stage, int64_t num_micro_batches) {
  return std::min<int64_t>(num_stages - stage, num_micro_batches);
}

std::string ScheduleToString(const Schedule& schedule) {
  std::string out;
  for (size_t i = 0; i < schedule.stages.size(); ++i) {
    out += fmt::format("stage {}:", i);
    for (const Action& a : schedule.stages[i]) {
      out += ' ';  // not `" " + str`: g++ 12 at -O3 warns (-Wrestrict) on that, a known false positive
      out += ActionToString(a);
    }
    out += "\n";
  }
  return out;
}

}  // namespace motley::sched
