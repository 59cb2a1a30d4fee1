// See step_model.h.
#include "perf/step_model.h"

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "sched/plan_schedules.h"
#include "sched/schedule.h"

namespace motley::perf {

std::vector<Seconds> RingCollectiveExits(const std::vector<Seconds>& entries,
                                         const std::vector<Hop>& hops, int steps,
                                         const RingChunkBytes& chunk_bytes, int exact_max_ranks,
                                         std::vector<Seconds>* hop_free) {
  const size_t n = entries.size();
  MOTLEY_CHECK(hops.size() == n, "a ring needs one hop per member");
  if (n < 2 || steps <= 0) return entries;
  if (static_cast<int>(n) > exact_max_ranks) {
    Seconds worst = 0;
    Bytes largest = 0;
    for (int r = 0; r < static_cast<int>(n); ++r) largest = std::max(largest, chunk_bytes(0, r));
    for (const Hop& h : hops) worst = std::max(worst, h.Time(largest));
    const Seconds exit = *std::max_element(entries.begin(), entries.end()) + steps * worst;
    return std::vector<Seconds>(n, exit);
  }
  std::vector<Seconds> t = entries;
  std::vector<Seconds> link_free(n, -std::numeric_limits<Seconds>::infinity());
  if (hop_free != nullptr && hop_free->size() == n) link_free = *hop_free;
  std::vector<Seconds> arrival(n);
  for (int s = 0; s < steps; ++s) {
    for (size_t r = 0; r < n; ++r) {  // member r sends to r + 1
      const Seconds start = std::max(t[r], link_free[r]);
      link_free[r] = start + hops[r].Time(chunk_bytes(s, static_cast<int>(r)));
      arrival[(r + 1) % n] = link_free[r];
    }
    for (size_t r = 0; r < n; ++r) t[r] = std::max(t[r], arrival[r]);
  }
  if (hop_free != nullptr) *hop_free = link_free;
  return t;
}

std::vector<Seconds> ChainBroadcastExits(const std::vector<Seconds>& entries,
                                         const std::vector<Hop>& hops, Bytes bytes,
                                         std::vector<Seconds>* hop_free) {
  MOTLEY_CHECK(hops.size() == entries.size(), "a chain needs one hop per member");
  std::vector<Seconds> t = entries;
  const bool queued = hop_free != nullptr && hop_free->size() == t.size();
  for (size_t r = 1; r < t.size(); ++r) {
    const Seconds start = queued ? std::max(t[r - 1], (*hop_free)[r - 1]) : t[r - 1];
    const Seconds arrival = start + hops[r - 1].Time(bytes);
    if (queued) (*hop_free)[r - 1] = arrival;
    t[r] = std::max(t[r], arrival);
  }
  return t;
}

RingChunkBytes AllReduceChunks(int64_t numel, double element_bytes, int n) {
  return [numel, element_bytes, n](int step, int rank) -> Bytes {
    const int chunk = step < n - 1 ? ((rank - step - 1) % n + n) % n
                                   : ((rank - (step - (n - 1))) % n + n) % n;
    const int64_t count = numel / n + (chunk < numel % n ? 1 : 0);
    return static_cast<double>(count) * element_bytes;
  };
}

RingSteps RingStepsOf(const sched::Collective& col, double element_bytes) {
  const int size = static_cast<int>(col.members.size());
  RingSteps ring;
  switch (col.kind) {
    case sched::StepOpKind::kLayerAllReduce:
    case sched::StepOpKind::kLossNormAllReduce:
      ring.steps = 2 * (size - 1);
      ring.chunk_bytes = AllReduceChunks(col.elements, element_bytes, size);
      return ring;
    case sched::StepOpKind::kLayerReduceScatter:
    case sched::StepOpKind::kLayerAllGather:
    case sched::StepOpKind::kMetricsAllGather: {
      const bool gather = col.kind != sched::StepOpKind::kLayerReduceScatter;
      const std::vector<int64_t>* chunks = &col.chunks;
      ring.steps = size - 1;
      ring.chunk_bytes = [chunks, size, element_bytes, gather](int step, int q) -> Bytes {
        const int idx = (((q - step - (gather ? 0 : 1)) % size) + size) % size;
        return static_cast<double>((*chunks)[static_cast<size_t>(idx)]) * element_bytes;
      };
      return ring;
    }
    default: break;
  }
  MOTLEY_CHECK(false, "RingStepsOf: not a ring collective");
  return ring;
}

namespace {

using sched::Action;
using sched::ActionKind;

// The exact walk of the action lists for m micro-batches (see step_model.h).
std::vector<Seconds> WalkPipeline(const std::vector<Seconds>& forward_s,
                                  const std::vector<Seconds>& backward_s,
                                  const std::vector<Seconds>& ready_s,
                                  const std::vector<Seconds>& fwd_link_s,
                                  const std::vector<Seconds>& bwd_link_s, int64_t m,
                                  spec::PipelineSchedule schedule,
                                  std::vector<TransferSpan>* transfers) {
  const int p = static_cast<int>(forward_s.size());
  auto built = sched::StoredSchedule(schedule, p, m);
  MOTLEY_CHECK(built.ok(), built.status().message());
  const sched::Schedule& sch = (*built)->schedule;
  constexpr Seconds kUnknown = -1;
  const auto pm = static_cast<size_t>(p > 1 ? p - 1 : 0);
  // arrive_fwd[i][k]: activation k at stage i + 1; arrive_bwd[i][k]: gradient k at stage i.
  std::vector<std::vector<Seconds>> arrive_fwd(pm, std::vector<Seconds>(static_cast<size_t>(m), kUnknown));
  std::vector<std::vector<Seconds>> arrive_bwd = arrive_fwd;
  std::vector<Seconds> free_fwd(pm, 0.0);
  std::vector<Seconds> free_bwd(pm, 0.0);
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  std::vector<bool> posted(static_cast<size_t>(p), false);
  std::vector<Seconds> t = ready_s;
  std::vector<int> work;
  for (int i = p - 1; i >= 0; --i) work.push_back(i);
  while (!work.empty()) {
    const int i = work.back();
    work.pop_back();
    const auto iu = static_cast<size_t>(i);
    const std::vector<Action>& list = sch.stages[iu];
    while (pc[iu] < list.size()) {
      const Action& a = list[pc[iu]];
      if (a.kind == ActionKind::kForward) {
        t[iu] += forward_s[iu];
        ++pc[iu];
        continue;
      }
      if (a.kind == ActionKind::kBackward) {
        t[iu] += backward_s[iu];
        ++pc[iu];
        continue;
      }
      size_t end = pc[iu];
      while (end < list.size() && sched::IsCommunication(list[end].kind)) ++end;
      if (!posted[iu]) {
        for (size_t j = pc[iu]; j < end; ++j) {
          const Action& x = list[j];
          const auto xk = static_cast<size_t>(x.micro_batch);
          if (x.kind == ActionKind::kSendForward) {
            const Seconds from = std::max(t[iu], free_fwd[iu]);
            const Seconds at = from + fwd_link_s[iu];
            free_fwd[iu] = at;
            arrive_fwd[iu][xk] = at;
            work.push_back(i + 1);
            if (transfers != nullptr) transfers->push_back(TransferSpan{i, 0, from, at});
          } else if (x.kind == ActionKind::kSendBackward) {
            const Seconds from = std::max(t[iu], free_bwd[iu - 1]);
            const Seconds at = from + bwd_link_s[iu - 1];
            free_bwd[iu - 1] = at;
            arrive_bwd[iu - 1][xk] = at;
            work.push_back(i - 1);
            if (transfers != nullptr) transfers->push_back(TransferSpan{i - 1, 1, from, at});
          }
        }
        posted[iu] = true;
      }
      Seconds done = t[iu];
      bool blocked = false;
      for (size_t j = pc[iu]; j < end && !blocked; ++j) {
        const Action& x = list[j];
        const auto xk = static_cast<size_t>(x.micro_batch);
        Seconds at = -2;
        if (x.kind == ActionKind::kRecvForward) at = arrive_fwd[iu - 1][xk];
        if (x.kind == ActionKind::kRecvBackward) at = arrive_bwd[iu][xk];
        if (at == kUnknown) blocked = true;
        done = std::max(done, at);
      }
      if (blocked) break;
      t[iu] = done;
      pc[iu] = end;
      posted[iu] = false;
    }
  }
  for (int i = 0; i < p; ++i) {
    MOTLEY_CHECK(pc[static_cast<size_t>(i)] == sch.stages[static_cast<size_t>(i)].size(),
                 "pipeline walk deadlocked");
  }
  return t;
}

}  // namespace

std::vector<Seconds> PipelinePhaseEnds(const std::vector<Seconds>& forward_s,
                                       const std::vector<Seconds>& backward_s,
                                       const std::vector<Seconds>& ready_s,
                                       const std::vector<Seconds>& fwd_link_s,
                                       const std::vector<Seconds>& bwd_link_s,
                                       int64_t micro_batches, spec::PipelineSchedule schedule,
                                       std::vector<TransferSpan>* transfers) {
  const size_t p = forward_s.size();
  MOTLEY_CHECK(p >= 1 && backward_s.size() == p && ready_s.size() == p &&
                   fwd_link_s.size() + 1 >= p && bwd_link_s.size() + 1 >= p &&
                   micro_batches >= 1,
               "bad pipeline phase input");
  return WalkPipeline(forward_s, backward_s, ready_s, fwd_link_s, bwd_link_s, micro_batches,
                      schedule, transfers);
}

Seconds PipelinePhaseLowerBound(const std::vector<Seconds>& forward_s,
                                const std::vector<Seconds>& backward_s, int64_t micro_batches) {
  MOTLEY_CHECK(forward_s.size() == backward_s.size(), "bad pipeline bound input");
  Seconds before_f = 0;
  Seconds before_b = 0;
  Seconds bound = 0;
  const auto m = static_cast<double>(micro_batches);
  for (size_t i = 0; i < forward_s.size(); ++i) {
    bound = std::max(bound, before_f + m * (forward_s[i] + backward_s[i]) + before_b);
    before_f += forward_s[i];
    before_b += backward_s[i];
  }
  return bound;
}

}  // namespace motley::perf
