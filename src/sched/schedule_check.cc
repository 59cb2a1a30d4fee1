// CheckSchedule: static completeness checks, then a replay of the execution contract of
// schedule.h (batched rendezvous sends and receives) that must finish on every stage.
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sched/schedule.h"

namespace motley::sched {
namespace {

std::string At(int stage, size_t index, const Action& a) {
  return fmt::format("stage {} action {} ({})", stage, index, ActionToString(a));
}

// Per device, chunk and micro-batch: the index of each kind of action, or -1.
struct Seen {
  std::vector<int64_t> index[8];
  int64_t m;
  Seen(int64_t micro_batches, int chunks) : m(micro_batches) {
    for (auto& v : index) v.assign(static_cast<size_t>(micro_batches * chunks), -1);
  }
  int64_t& at(ActionKind kind, int64_t mb, int chunk) {
    return index[static_cast<int>(kind)][static_cast<size_t>(chunk * m + mb)];
  }
};

// Device i's chunk c is virtual stage c * p + i (schedule.h); its neighbours along the pipeline.
struct Peer {
  size_t device;
  int chunk;
};
Peer Next(const Schedule& s, size_t i, int chunk) {
  const auto p = static_cast<size_t>(s.num_stages);
  return i + 1 < p ? Peer{i + 1, chunk} : Peer{0, chunk + 1};
}
Peer Previous(const Schedule& s, size_t i, int chunk) {
  const auto p = static_cast<size_t>(s.num_stages);
  return i > 0 ? Peer{i - 1, chunk} : Peer{p - 1, chunk - 1};
}

Status CheckStage(const Schedule& s, int i, std::vector<Seen>* seen) {
  const auto& actions = s.stages[static_cast<size_t>(i)];
  auto first_of = [&](int chunk) { return i == 0 && chunk == 0; };
  auto last_of = [&](int chunk) { return i == s.num_stages - 1 && chunk == s.num_chunks - 1; };
  Seen& mine = (*seen)[static_cast<size_t>(i)];
  int64_t dp_sync = -1;
  int64_t opt_step = -1;
  int64_t last_backward = -1;
  for (size_t k = 0; k < actions.size(); ++k) {
    const Action& a = actions[k];
    const auto index = static_cast<int64_t>(k);
    if (a.kind == ActionKind::kDpSync || a.kind == ActionKind::kOptimizerStep) {
      if (a.micro_batch != -1) return Err("{}: step actions carry micro-batch -1", At(i, k, a));
      int64_t& slot = a.kind == ActionKind::kDpSync ? dp_sync : opt_step;
      if (slot >= 0) return Err("{}: given twice", At(i, k, a));
      slot = index;
      continue;
    }
    if (a.micro_batch < 0 || a.micro_batch >= s.num_micro_batches) {
      return Err("{}: micro-batch out of range [0, {})", At(i, k, a), s.num_micro_batches);
    }
    if (a.chunk < 0 || a.chunk >= s.num_chunks) {
      return Err("{}: chunk out of range [0, {})", At(i, k, a), s.num_chunks);
    }
    const bool first = first_of(a.chunk);
    const bool last = last_of(a.chunk);
    if (first && (a.kind == ActionKind::kRecvForward || a.kind == ActionKind::kSendBackward)) {
      return Err("{}: the first stage has no previous stage", At(i, k, a));
    }
    if (last && (a.kind == ActionKind::kSendForward || a.kind == ActionKind::kRecvBackward)) {
      return Err("{}: the last stage has no next stage", At(i, k, a));
    }
    int64_t& slot = mine.at(a.kind, a.micro_batch, a.chunk);
    if (slot >= 0) return Err("{}: given twice (first at action {})", At(i, k, a), slot);
    slot = index;
    const int64_t fwd = mine.at(ActionKind::kForward, a.micro_batch, a.chunk);
    const int64_t bwd = mine.at(ActionKind::kBackward, a.micro_batch, a.chunk);
    switch (a.kind) {
      case ActionKind::kForward:
        if (!first && mine.at(ActionKind::kRecvForward, a.micro_batch, a.chunk) < 0) {
          return Err("{}: forward before its activation is received", At(i, k, a));
        }
        break;
      case ActionKind::kBackward:
        if (fwd < 0) return Err("{}: backward before forward", At(i, k, a));
        if (!last && mine.at(ActionKind::kRecvBackward, a.micro_batch, a.chunk) < 0) {
          return Err("{}: backward before its gradient is received", At(i, k, a));
        }
        last_backward = index;
        break;
      case ActionKind::kSendForward:
        if (fwd < 0) return Err("{}: sends an activation not yet computed", At(i, k, a));
        break;
      case ActionKind::kSendBackward:
        if (bwd < 0) return Err("{}: sends a gradient not yet computed", At(i, k, a));
        break;
      default: break;
    }
  }
  for (int c = 0; c < s.num_chunks; ++c) {
    const bool first = first_of(c);
    const bool last = last_of(c);
    for (int64_t mb = 0; mb < s.num_micro_batches; ++mb) {
      auto need = [&](ActionKind kind, bool required) -> Status {
        if (required && mine.at(kind, mb, c) < 0) {
          return Err("stage {}: {} of micro-batch {}{} is missing", i, ActionKindName(kind), mb,
                     c > 0 ? fmt::format(" chunk {}", c) : "");
        }
        return Status::Ok();
      };
      MOTLEY_RETURN_IF_ERROR(need(ActionKind::kForward, true));
      MOTLEY_RETURN_IF_ERROR(need(ActionKind::kBackward, true));
      MOTLEY_RETURN_IF_ERROR(need(ActionKind::kRecvForward, !first));
      MOTLEY_RETURN_IF_ERROR(need(ActionKind::kSendBackward, !first));
      MOTLEY_RETURN_IF_ERROR(need(ActionKind::kSendForward, !last));
      MOTLEY_RETURN_IF_ERROR(need(ActionKind::kRecvBackward, !last));
    }
  }
  if ((dp_sync >= 0) != (opt_step >= 0)) {
    return Err("stage {}: DP sync and optimizer step come together", i);
  }
  if (dp_sync >= 0 && !(last_backward < dp_sync && dp_sync < opt_step)) {
    return Err("stage {}: DP sync must follow the last backward and precede the optimizer step", i);
  }
  return Status::Ok();
}

// Replays the lists: compute actions run at once; a maximal run of communication actions is
// posted as one batch, each send completing when the neighbour has posted the matching receive.
Status Simulate(const Schedule& s) {
  const auto p = static_cast<size_t>(s.num_stages);
  std::vector<size_t> pc(p, 0);         // first action not yet completed
  std::vector<size_t> group_end(p, 0);  // end of the posted batch (valid when > pc)
  std::vector<std::vector<bool>> done(p);
  for (size_t i = 0; i < p; ++i) done[i].assign(s.stages[i].size(), false);

  auto advance = [&](size_t i) {
    const auto& actions = s.stages[i];
    bool progressed = false;
    while (true) {
      if (group_end[i] > pc[i]) {  // a batch is posted: complete it when all ops matched
        for (size_t k = pc[i]; k < group_end[i]; ++k) {
          if (!done[i][k]) return progressed;
        }
        pc[i] = group_end[i];
        progressed = true;
        continue;
      }
      if (pc[i] >= actions.size()) return progressed;
      if (!IsCommunication(actions[pc[i]].kind)) {
        done[i][pc[i]] = true;
        ++pc[i];
        progressed = true;
        continue;
      }
      size_t end = pc[i];
      while (end < actions.size() && IsCommunication(actions[end].kind)) ++end;
      group_end[i] = end;
      progressed = true;
    }
  };
  auto posted = [&](Peer at, ActionKind kind, int64_t mb) -> size_t {
    const size_t i = at.device;
    for (size_t k = pc[i]; k < group_end[i]; ++k) {
      const Action& a = s.stages[i][k];
      if (!done[i][k] && a.kind == kind && a.micro_batch == mb && a.chunk == at.chunk) return k;
    }
    return SIZE_MAX;
  };

  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t i = 0; i < p; ++i) progress = advance(i) || progress;
    for (size_t i = 0; i < p; ++i) {
      for (size_t k = pc[i]; k < group_end[i]; ++k) {
        const Action& a = s.stages[i][k];
        if (done[i][k]) continue;
        Peer peer{0, 0};
        ActionKind want = ActionKind::kRecvForward;
        if (a.kind == ActionKind::kSendForward) {
          peer = Next(s, i, a.chunk);
        } else if (a.kind == ActionKind::kSendBackward) {
          peer = Previous(s, i, a.chunk);
          want = ActionKind::kRecvBackward;
        } else {
          continue;
        }
        const size_t match = posted(peer, want, a.micro_batch);
        if (match == SIZE_MAX) continue;
        done[i][k] = true;
        done[peer.device][match] = true;
        progress = true;
      }
    }
  }
  std::vector<std::string> stuck;
  for (size_t i = 0; i < p; ++i) {
    if (pc[i] < s.stages[i].size()) {
      std::vector<std::string> waiting;
      for (size_t k = pc[i]; k < group_end[i]; ++k) {
        if (!done[i][k]) waiting.push_back(ActionToString(s.stages[i][k]));
      }
      stuck.push_back(
          fmt::format("stage {} at action {} waits on {}", i, pc[i], fmt::join(waiting, " ")));
    }
  }
  if (!stuck.empty()) return Err("schedule deadlocks: {}", fmt::join(stuck, "; "));
  return Status::Ok();
}

}  // namespace

Status CheckSchedule(const Schedule& schedule) {
  if (schedule.num_stages < 1 ||
      schedule.stages.size() != static_cast<size_t>(schedule.num_stages)) {
    return Err("schedule: {} stage lists for {} stages", schedule.stages.size(),
               schedule.num_stages);
  }
  if (schedule.num_micro_batches < 1) {
    return Err("schedule: number of micro-batches must be positive, got {}",
               schedule.num_micro_batches);
  }
  if (schedule.num_chunks < 1) {
    return Err("schedule: number of model chunks must be positive, got {}", schedule.num_chunks);
  }
  std::vector<Seen> seen(static_cast<size_t>(schedule.num_stages),
                         Seen(schedule.num_micro_batches, schedule.num_chunks));
  for (int i = 0; i < schedule.num_stages; ++i) {
    MOTLEY_RETURN_IF_ERROR(CheckStage(schedule, i, &seen));
  }
  // Each stage now sends and receives every micro-batch exactly once across each inner boundary
  // of virtual stages (SF on s and RF on s+1, SB on s+1 and RB on s), so sends and receives pair
  // one-to-one; the replay checks that they can meet.
  return Simulate(schedule);
}

}  // namespace motley::sched
