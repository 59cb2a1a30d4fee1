// See step_model.h.
#include "perf/step_model.h"

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "sched/plan_schedules.h"
#include "sched/schedule.h"

namespace motley::perf {

std::vector<Seconds> RingCollectiveExits(const std::vector<Seconds>& entries,
                                         const std::vector<Hop>& hops, const RingSteps& ring,
                                         int exact_max_ranks, std::vector<Seconds>* hop_free) {
  const size_t n = entries.size();
  const int steps = ring.steps;
  MOTLEY_CHECK(hops.size() == n, "a ring needs one hop per member");
  if (n < 2 || steps <= 0) return entries;
  if (static_cast<int>(n) > exact_max_ranks) {
    const Seconds exit =
        *std::max_element(entries.begin(), entries.end()) + RingBoundTime(hops, ring);
    return std::vector<Seconds>(n, exit);
  }
  std::vector<Seconds> t = entries;
  std::vector<Seconds> link_free(n, -std::numeric_limits<Seconds>::infinity());
  if (hop_free != nullptr && hop_free->size() == n) link_free = *hop_free;
  std::vector<Seconds> arrival(n);
  for (int s = 0; s < steps; ++s) {
    for (size_t r = 0; r < n; ++r) {  // member r sends to r + 1
      const Seconds start = std::max(t[r], link_free[r]);
      link_free[r] = start + hops[r].Time(ring.chunk_bytes(s, static_cast<int>(r)));
      arrival[(r + 1) % n] = link_free[r];
    }
    for (size_t r = 0; r < n; ++r) t[r] = std::max(t[r], arrival[r]);
  }
  if (hop_free != nullptr) *hop_free = link_free;
  return t;
}

Seconds RingBoundTime(const std::vector<Hop>& hops, const RingSteps& ring) {
  if (hops.size() < 2 || ring.steps <= 0) return 0;
  Seconds worst = 0;
  for (const Hop& h : hops) worst = std::max(worst, h.Time(ring.largest_chunk));
  return ring.steps * worst;
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
    case sched::StepOpKind::kLossNormAllReduce: {
      ring.steps = 2 * (size - 1);
      ring.chunk_bytes = AllReduceChunks(col.elements, element_bytes, size);
      // AllReduceChunks: numel / n elements, one more on the first numel % n chunks.
      const int64_t smaller = size > 0 ? col.elements / size : 0;
      const bool uneven = size > 0 && col.elements % size != 0;
      ring.smallest_chunk = static_cast<double>(smaller) * element_bytes;
      ring.largest_chunk = static_cast<double>(smaller + (uneven ? 1 : 0)) * element_bytes;
      return ring;
    }
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
      if (size > 0) {  // chunks 0 .. size - 1, each sent in every step
        MOTLEY_CHECK(chunks->size() >= static_cast<size_t>(size),
                     "RingStepsOf: fewer chunks than members");
        const auto [lo, hi] = std::minmax_element(chunks->begin(), chunks->begin() + size);
        ring.smallest_chunk = static_cast<double>(*lo) * element_bytes;
        ring.largest_chunk = static_cast<double>(*hi) * element_bytes;
      }
      return ring;
    }
    default: break;
  }
  MOTLEY_CHECK(false, "RingStepsOf: not a ring collective");
  return ring;
}

namespace {

using sched::ActionKind;

// The exact walk of the action lists for m micro-batches (see step_model.h): a replay of the
// schedule's walk order (sched/walk_order.h), which says in what order the groups' actions run.
// Virtual stage s = chunk * p + i of device group i; boundary b joins virtual stages b and b + 1
// (device groups b mod p and (b + 1) mod p); a transfer queues on the directed pair of groups it
// crosses.
std::vector<Seconds> WalkPipeline(
    const std::vector<Seconds>& forward_s, const std::vector<Seconds>& backward_s,
    const std::vector<Seconds>& ready_s, const std::vector<Seconds>& fwd_link_s,
    const std::vector<Seconds>& bwd_link_s, int64_t m, spec::PipelineSchedule schedule, int chunks,
    std::span<TransferBusy> transfers, std::vector<Seconds>* group_links) {
  const int p = static_cast<int>(ready_s.size());
  const int num_virtual = static_cast<int>(forward_s.size());
  auto built = sched::StoredSchedule(schedule, p, m, chunks);
  MOTLEY_CHECK(built.ok(), built.status().message());
  const auto num_boundaries = static_cast<size_t>(num_virtual > 1 ? num_virtual - 1 : 0);
  const auto mu = static_cast<size_t>(m);
  // When message k crosses boundary b: activations [b * m + k] (at virtual stage b + 1) and
  // gradients [b * m + k] (at b). The walk order reads each only after writing it.
  std::vector<Seconds> arrive_fwd(num_boundaries * mu);
  std::vector<Seconds> arrive_bwd(num_boundaries * mu);
  // When each directed pair of device groups is free: [from * p + to].
  std::vector<Seconds> link_free(static_cast<size_t>(p * p), 0.0);
  if (group_links != nullptr) link_free = *group_links;
  std::vector<Seconds> t = ready_s;
  const auto pu = static_cast<size_t>(p);
  // The device group of virtual stage v (v mod p, without a division for v < p).
  auto group_of = [pu](size_t v) { return v < pu ? v : v % pu; };
  for (const sched::WalkStep& w : (*built)->walk_order) {
    const auto i = static_cast<size_t>(w.group);
    const auto s = static_cast<size_t>(w.virtual_stage);
    const auto k = static_cast<size_t>(w.micro_batch);
    switch (w.kind) {
      case ActionKind::kForward: t[i] += forward_s[s]; break;
      case ActionKind::kBackward: t[i] += backward_s[s]; break;
      case ActionKind::kSendForward: {
        Seconds& free = link_free[i * pu + group_of(s + 1)];
        const Seconds from = std::max(t[i], free);
        const Seconds at = from + fwd_link_s[s];
        free = at;
        arrive_fwd[s * mu + k] = at;
        if (!transfers.empty())
          transfers[TransferIndex(w.virtual_stage, 0, w.micro_batch, m)] = {from, at};
        break;
      }
      case ActionKind::kSendBackward: {
        Seconds& free = link_free[i * pu + group_of(s - 1)];
        const Seconds from = std::max(t[i], free);
        const Seconds at = from + bwd_link_s[s - 1];
        free = at;
        arrive_bwd[(s - 1) * mu + k] = at;
        if (!transfers.empty()) {
          transfers[TransferIndex(w.virtual_stage - 1, 1, w.micro_batch, m)] = {from, at};
        }
        break;
      }
      case ActionKind::kRecvForward: t[i] = std::max(t[i], arrive_fwd[(s - 1) * mu + k]); break;
      case ActionKind::kRecvBackward: t[i] = std::max(t[i], arrive_bwd[s * mu + k]); break;
      default: MOTLEY_CHECK(false, "pipeline walk: a step action in the walk order");
    }
  }
  if (group_links != nullptr) *group_links = link_free;
  return t;
}

}  // namespace

std::vector<Seconds> PipelinePhaseEnds(
    const std::vector<Seconds>& forward_s, const std::vector<Seconds>& backward_s,
    const std::vector<Seconds>& ready_s, const std::vector<Seconds>& fwd_link_s,
    const std::vector<Seconds>& bwd_link_s, int64_t micro_batches, spec::PipelineSchedule schedule,
    std::span<TransferBusy> transfers, int chunks, std::vector<Seconds>* group_links) {
  const size_t num_virtual = forward_s.size();
  MOTLEY_CHECK(
      chunks >= 1 && !ready_s.empty() &&
          num_virtual == ready_s.size() * static_cast<size_t>(chunks) &&
          backward_s.size() == num_virtual && fwd_link_s.size() + 1 >= num_virtual &&
          bwd_link_s.size() + 1 >= num_virtual && micro_batches >= 1 &&
          (group_links == nullptr || group_links->size() == ready_s.size() * ready_s.size()) &&
          (transfers.empty() ||
           transfers.size() == 2 * (num_virtual - 1) * static_cast<size_t>(micro_batches)),
      "bad pipeline phase input");
  return WalkPipeline(forward_s, backward_s, ready_s, fwd_link_s, bwd_link_s, micro_batches,
                      schedule, chunks, transfers, group_links);
}

std::vector<Seconds> PipelineStageEndLowerBounds(const std::vector<Seconds>& forward_s,
                                                 const std::vector<Seconds>& backward_s,
                                                 int64_t micro_batches,
                                                 const std::vector<Seconds>& fwd_link_floor_s,
                                                 const std::vector<Seconds>& bwd_link_floor_s,
                                                 const std::vector<Seconds>& ready_floor_s) {
  const size_t p = forward_s.size();
  MOTLEY_CHECK(backward_s.size() == p &&
                   (fwd_link_floor_s.empty() || fwd_link_floor_s.size() + 1 >= p) &&
                   (bwd_link_floor_s.empty() || bwd_link_floor_s.size() + 1 >= p) &&
                   (ready_floor_s.empty() || ready_floor_s.size() == p),
               "bad pipeline bound input");
  auto at = [](const std::vector<Seconds>& v, size_t i) { return v.empty() ? 0.0 : v[i]; };
  const auto m = static_cast<double>(micro_batches);
  std::vector<Seconds> end(p);
  Seconds start = 0;
  for (size_t i = 0; i < p; ++i) {
    start = i == 0 ? at(ready_floor_s, 0)
                   : std::max(at(ready_floor_s, i),
                              start + forward_s[i - 1] + at(fwd_link_floor_s, i - 1));
    end[i] = start + m * (forward_s[i] + backward_s[i]);  // W_i
  }
  for (size_t i = p; i-- > 1;) {
    end[i - 1] = std::max(end[i - 1], end[i] + backward_s[i - 1] + at(bwd_link_floor_s, i - 1));
  }
  return end;
}

Seconds PipelinePhaseLowerBound(const std::vector<Seconds>& forward_s,
                                const std::vector<Seconds>& backward_s, int64_t micro_batches,
                                const std::vector<Seconds>& fwd_link_floor_s,
                                const std::vector<Seconds>& bwd_link_floor_s) {
  const std::vector<Seconds> end = PipelineStageEndLowerBounds(forward_s, backward_s, micro_batches,
                                                               fwd_link_floor_s, bwd_link_floor_s);
  return end.empty() ? 0.0 : end.front();
}

}  // namespace motley::perf
