// Builders of the per-stage action lists (1F1B, interleaved 1F1B, GPipe), in-flight counts and
// printing.
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
  if (action.chunk > 0) {
    return fmt::format("{}{}c{}", ActionKindName(action.kind), action.micro_batch, action.chunk);
  }
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

// Micro-batch groups of interleaved 1F1B: groups of p, or one group of m when m < 2p
// (spec::InterleavedMicroBatchesOk holds for every m the builder accepts).
int64_t GroupSize(int p, int64_t m) {
  return m < 2 * static_cast<int64_t>(p) ? m : p;
}

// The j-th forward (or backward) of a device under interleaved 1F1B: each group through every
// chunk in turn (chunks reversed for backwards).
struct ChunkPass {
  int64_t micro_batch;
  int chunk;
};
ChunkPass InterleavedPass(int64_t j, int p, int64_t m, int v, bool backward) {
  const int64_t size = GroupSize(p, m);
  const int64_t group = j / (size * v);
  const int64_t in_group = j - group * size * v;
  const auto chunk = static_cast<int>(in_group / size);
  return {group * size + in_group % size, backward ? v - 1 - chunk : chunk};
}

// Device i's list under interleaved 1F1B. As in Megatron-LM, each compute action is followed by
// one batch that sends its result and receives the inputs of the next forward and the next
// backward, so that every transfer's receive is posted while its sender waits (posting a
// receive only just before its compute, as the plain builder does, deadlocks once the pipeline
// wraps from the last device to the first).
void InterleavedStage(int i, int p, int64_t m, int v, std::vector<Action>* out) {
  const int64_t total = m * v;
  const int64_t warmup = InterleavedWarmup(p, i, m, v);
  auto first = [&](int chunk) { return i == 0 && chunk == 0; };
  auto last = [&](int chunk) { return i == p - 1 && chunk == v - 1; };
  auto fwd = [&](int64_t j) { return InterleavedPass(j, p, m, v, false); };
  auto bwd = [&](int64_t j) { return InterleavedPass(j, p, m, v, true); };
  auto push = [&](ActionKind kind, ChunkPass pass) {
    out->push_back(Action{kind, pass.micro_batch, pass.chunk});
  };
  // The receives of the batch after a compute action: the next forward's input (forward index
  // nf) and the next backward's gradient (backward index nb), where those exist.
  auto receive_next = [&](int64_t nf, int64_t nb) {
    if (nf < total && !first(fwd(nf).chunk)) push(ActionKind::kRecvForward, fwd(nf));
    if (nb < total && !last(bwd(nb).chunk)) push(ActionKind::kRecvBackward, bwd(nb));
  };
  receive_next(0, total);
  for (int64_t j = 0; j < warmup; ++j) {
    push(ActionKind::kForward, fwd(j));
    if (!last(fwd(j).chunk)) push(ActionKind::kSendForward, fwd(j));
    receive_next(j + 1, j + 1 == warmup ? 0 : total);  // the last warm-up also fetches B's input
  }
  for (int64_t j = 0; j < total - warmup; ++j) {
    push(ActionKind::kForward, fwd(warmup + j));
    push(ActionKind::kBackward, bwd(j));
    if (!last(fwd(warmup + j).chunk)) push(ActionKind::kSendForward, fwd(warmup + j));
    if (!first(bwd(j).chunk)) push(ActionKind::kSendBackward, bwd(j));
    receive_next(warmup + j + 1, j + 1);
  }
  for (int64_t j = total - warmup; j < total; ++j) {
    push(ActionKind::kBackward, bwd(j));
    if (!first(bwd(j).chunk)) push(ActionKind::kSendBackward, bwd(j));
    receive_next(total, j + 1);
  }
}

}  // namespace

int64_t InterleavedWarmup(int num_stages, int stage, int64_t num_micro_batches, int chunks) {
  const int64_t total = num_micro_batches * chunks;
  if (num_micro_batches <= num_stages) return total;
  return std::min<int64_t>(
      total, 2 * static_cast<int64_t>(num_stages - stage - 1) +
                 static_cast<int64_t>(chunks - 1) * GroupSize(num_stages, num_micro_batches));
}

Result<Schedule> BuildSchedule(spec::PipelineSchedule kind, int num_stages,
                               int64_t num_micro_batches, const ScheduleOptions& options) {
  if (num_stages < 1)
    return Err(StatusCode::kInvalidArgument, "schedule: number of stages must be positive, got {}",
               num_stages);
  if (num_micro_batches < 1) {
    return Err(StatusCode::kInvalidArgument,
               "schedule: number of micro-batches must be positive, got {}", num_micro_batches);
  }
  const int v = options.chunks;
  if (v < 1)
    return Err(StatusCode::kInvalidArgument,
               "schedule: number of model chunks must be positive, got {}", v);
  if (v > 1 && kind != spec::PipelineSchedule::k1F1B) {
    return Err(StatusCode::kInvalidArgument,
               "schedule: model chunks ({}) need the 1F1B schedule (interleaved 1F1B), not {}", v,
               spec::PipelineScheduleName(kind));
  }
  if (v > 1 && num_stages < 2) {
    return Err(StatusCode::kInvalidArgument,
               "schedule: interleaving {} model chunks needs at least 2 stages, got {}", v,
               num_stages);
  }
  if (v > 1 && !spec::InterleavedMicroBatchesOk(num_stages, num_micro_batches)) {
    return Err(StatusCode::kInvalidArgument,
               "schedule: interleaved 1F1B over {} stages runs a multiple of {} micro-batches, or "
               "fewer than {}; got {} (the nearest: {} or {})",
               num_stages, num_stages, 2 * num_stages, num_micro_batches,
               num_micro_batches / num_stages * num_stages,
               (num_micro_batches / num_stages + 1) * num_stages);
  }
  Schedule schedule;
  schedule.kind = kind;
  schedule.num_stages = num_stages;
  schedule.num_micro_batches = num_micro_batches;
  schedule.num_chunks = v;
  schedule.stages.resize(static_cast<size_t>(num_stages));
  const int64_t m = num_micro_batches;
  for (int i = 0; i < num_stages; ++i) {
    std::vector<Action>& actions = schedule.stages[static_cast<size_t>(i)];
    // At most a receive, a compute and a send per pass of a micro-batch through a chunk, and the
    // two step actions.
    actions.reserve(static_cast<size_t>(6 * m * v + 2));
    StageBuilder b(i, num_stages, &actions);
    if (v > 1) {
      InterleavedStage(i, num_stages, m, v, &actions);
    } else if (kind == spec::PipelineSchedule::kGPipe) {
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

int64_t InFlightMicroBatches(const Schedule& schedule, int stage, int chunk) {
  MOTLEY_CHECK(stage >= 0 && stage < static_cast<int>(schedule.stages.size()), "bad stage");
  int64_t current = 0;
  int64_t peak = 0;
  for (const Action& a : schedule.stages[static_cast<size_t>(stage)]) {
    if (chunk >= 0 && a.chunk != chunk) continue;
    if (a.kind == ActionKind::kForward) peak = std::max(peak, ++current);
    if (a.kind == ActionKind::kBackward) --current;
  }
  return peak;
}

int64_t PipelineBuffersHeld(const Schedule& schedule, int stage) {
  MOTLEY_CHECK(stage >= 0 && stage < static_cast<int>(schedule.stages.size()), "bad stage");
  const std::vector<Action>& actions = schedule.stages[static_cast<size_t>(stage)];
  // Virtual stage 0 has no received input, p * v - 1 no received gradient (schedule.h).
  auto first = [&](const Action& a) { return stage == 0 && a.chunk == 0; };
  auto last = [&](const Action& a) {
    return stage + 1 == schedule.num_stages && a.chunk + 1 == schedule.num_chunks;
  };
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
    if (actions[i].kind == ActionKind::kForward && !first(actions[i])) --held;
    if (actions[i].kind == ActionKind::kBackward) {
      if (!last(actions[i])) --held;
      if (!first(actions[i])) peak = std::max(peak, ++held);
    }
    ++i;
  }
  return peak;
}

int64_t OneFOneBInFlight(int num_stages, int stage, int64_t num_micro_batches) {
  return std::min<int64_t>(num_stages - stage, num_micro_batches);
}

int64_t InFlightWithoutInterleaving(spec::PipelineSchedule kind, int num_stages, int stage,
                                    int64_t num_micro_batches) {
  return kind == spec::PipelineSchedule::kGPipe
             ? num_micro_batches
             : OneFOneBInFlight(num_stages, stage, num_micro_batches);
}

std::string ScheduleToString(const Schedule& schedule) {
  std::string out;
  for (size_t i = 0; i < schedule.stages.size(); ++i) {
    out += schedule.num_chunks > 1 ? fmt::format("device {}:", i) : fmt::format("stage {}:", i);
    for (const Action& a : schedule.stages[i]) {
      out += ' ';  // not `" " + str`: g++ 12 at -O3 warns (-Wrestrict) on that, a known false positive
      out += ActionToString(a);
    }
    out += "\n";
  }
  return out;
}

}  // namespace motley::sched
