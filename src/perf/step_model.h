// Building blocks of the predictor's step model (predictor.cc), written against what motley's
// runtime does on the virtual clock (docs/architecture.md §6, comm/ring_communicator.h):
//  - a transfer of S bytes over a link occupies the sender's outgoing link to that peer for
//    latency + S / bandwidth (transfers on one link queue), the sender does not wait for it
//    (eager send), and the receiver continues at max(its clock, arrival);
//  - a ring collective is a sequence of such transfers, rank r sending to r + 1 and receiving from
//    r - 1 in every step;
//  - a pipeline stage runs its sched action list, a batch of Send*/Recv* posting its sends at
//    once and waiting for its receives.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "core/units.h"
#include "sched/step_program.h"
#include "spec/plan.h"

namespace motley::perf {

// Alpha-beta link: Time(S) = latency + S / bandwidth.
struct Hop {
  Seconds latency_s = 0;
  BytesPerSecond bandwidth = 1e30;
  Seconds Time(Bytes bytes) const { return latency_s + bytes / bandwidth; }
};

// Bytes rank `rank` sends in step `step` of a ring collective.
using RingChunkBytes = std::function<Bytes(int step, int rank)>;

// The steps of a ring collective (RingStepsOf below): how many, the bytes each member sends in
// each, and the largest and smallest of those sizes (every chunk is sent in every step).
struct RingSteps {
  int steps = 0;
  RingChunkBytes chunk_bytes;
  Bytes largest_chunk = 0;
  Bytes smallest_chunk = 0;
};

// Exit time of every member of a ring collective of `ring.steps` steps: members in ring order,
// `entries[r]` when member r enters, `hops[r]` the link from member r to member r + 1 (mod n).
// Exact recurrence for n <= exact_max_ranks (O(n * steps)); above it every member leaves at
// max(entries) + steps * the slowest hop's time for the largest chunk.
// `hop_free` (optional, one per hop, in and out): when each hop's link is free of earlier
// transfers (the runtime's links queue across operations).
std::vector<Seconds> RingCollectiveExits(const std::vector<Seconds>& entries,
                                         const std::vector<Hop>& hops, const RingSteps& ring,
                                         int exact_max_ranks,
                                         std::vector<Seconds>* hop_free = nullptr);
// RingCollectiveExits's bound, from the last member's entry to every member's exit: steps * the
// slowest of `hops` (one per member, in ring order) for the largest chunk; 0 below two members or
// without steps.
Seconds RingBoundTime(const std::vector<Hop>& hops, const RingSteps& ring);

// Exit times of the runtime's chain broadcast of one chunk of `bytes` from member 0 (members in
// chain order, `hops[r]` from member r to r + 1): each member forwards after it received.
std::vector<Seconds> ChainBroadcastExits(const std::vector<Seconds>& entries,
                                         const std::vector<Hop>& hops, Bytes bytes,
                                         std::vector<Seconds>* hop_free = nullptr);

// Chunk sizes of the runtime's ring all-reduce of `numel` elements of `element_bytes` over n
// ranks (comm EvenCounts: the first numel % n chunks one element larger): reduce-scatter step s
// sends chunk (r - s - 1) mod n, all-gather step s sends chunk (r - s) mod n. 2(n - 1) steps.
RingChunkBytes AllReduceChunks(int64_t numel, double element_bytes, int n);

// The ring of a ring-engine collective of the step program (comm/ring_collectives.cc): an
// all-reduce (layer or loss-norm) 2(n-1) steps of AllReduceChunks; a reduce-scatter n-1 steps,
// member q sending chunk q - s - 1 in step s; an all-gather (layer values, the metrics gather)
// n-1 steps, member q sending chunk q - s; chunks from the collective's `chunks`, elements of
// `element_bytes` each. Not for the plan agreement (a chain broadcast).
RingSteps RingStepsOf(const sched::Collective& collective, double element_bytes);

// One pipeline's stages running their 1F1B, GPipe or interleaved 1F1B action lists with eager
// sends: device group i starts at ready_s[i] (p entries); a forward of virtual stage s (chunk
// c of group i: s = c p + i; s = i without interleaving, chunks = 1) takes forward_s[s], a
// backward backward_s[s] (p chunks entries each); an activation from virtual stage s to s + 1
// takes fwd_link_s[s], a gradient from s + 1 to s bwd_link_s[s], each queued behind the earlier
// transfers from its sending group to its receiving group (one queue per directed pair of groups,
// as the simulator's device links; without interleaving, one per boundary and direction).
// Returns, per device group, when its last pipeline action ends. `group_links` (optional, p * p
// entries [from * p + to]): in, when each directed pair of groups is free of earlier transfers
// (the runtime queues a rank's pipeline messages behind its collectives' on the same link); out,
// when the walk leaves it free. Exact: every action is
// walked, O(p m) (no extrapolation from a few micro-batches: with links the per-micro-batch
// increment settles only after a transient that may oscillate, so extrapolating from the first
// 2p + 4 micro-batches, as this function once did, was off by up to 6% against the event replay
// at 64 micro-batches).
// When a pipeline transfer occupies its link: from when it starts (its send, or the link freeing
// up from the transfer before) to its arrival. Boundary b joins (virtual) stages b and b + 1;
// direction 0 is an activation (b -> b + 1), 1 a gradient.
using TransferBusy = std::pair<Seconds, Seconds>;
// Where micro-batch k's transfer over boundary b in direction `dir` is in PipelinePhaseEnds's
// `transfers`, of m micro-batches: each (boundary, direction) holds m consecutive entries, in
// micro-batch order, which is also the order they take their link (sorted, disjoint).
inline size_t TransferIndex(int boundary, int dir, int64_t k, int64_t m) {
  return static_cast<size_t>((2 * static_cast<int64_t>(boundary) + dir) * m + k);
}
// `transfers` (optional): empty, or sized 2 (V - 1) m for V = forward_s.size() virtual stages;
// filled at TransferIndex.
std::vector<Seconds> PipelinePhaseEnds(const std::vector<Seconds>& forward_s,
                                       const std::vector<Seconds>& backward_s,
                                       const std::vector<Seconds>& ready_s,
                                       const std::vector<Seconds>& fwd_link_s,
                                       const std::vector<Seconds>& bwd_link_s,
                                       int64_t micro_batches, spec::PipelineSchedule schedule,
                                       std::span<TransferBusy> transfers = {}, int chunks = 1,
                                       std::vector<Seconds>* group_links = nullptr);

// Proven lower bounds, per stage l, on when stage l's last action (the last micro-batch's
// backward) ends in PipelinePhaseEnds(...) of one chunk, for ready_s >= `ready_floor_s` (empty:
// 0) and links at least `fwd_link_floor_s` / `bwd_link_floor_s` (each boundary's least transfer
// time; empty: 0), in O(p). A stage's actions run one at a time; stage i cannot start before its
// ready time nor before micro-batch 0's forwards and transfers on the stages before it reach it:
//   A_0 = ready_0,  A_i = max(ready_i, A_{i-1} + forward_s[i-1] + lf[i-1]);
// its last backward then ends at or after W_i = A_i + m (forward_s[i] + backward_s[i]), and
// stage l's last backward comes after that of every later stage, its gradient transfer and the
// backwards between:
//   E_{p-1} = W_{p-1},  E_l = max(W_l, E_{l+1} + backward_s[l] + lb[l]).
// Both schedules (1F1B, GPipe). The predictor's step bound builds on it
// (Predictor::StepLowerBound).
std::vector<Seconds> PipelineStageEndLowerBounds(const std::vector<Seconds>& forward_s,
                                                 const std::vector<Seconds>& backward_s,
                                                 int64_t micro_batches,
                                                 const std::vector<Seconds>& fwd_link_floor_s = {},
                                                 const std::vector<Seconds>& bwd_link_floor_s = {},
                                                 const std::vector<Seconds>& ready_floor_s = {});
// A proven lower bound on max_i PipelinePhaseEnds(...)[i] with ready_s >= 0: stage 0's E_0 of
// PipelineStageEndLowerBounds (stage 0 ends last), which from ready 0 reads
//   max_i [ sum_{j<i} (forward_s[j] + lf[j]) + m (forward_s[i] + backward_s[i])
//           + sum_{j<i} (backward_s[j] + lb[j]) ].
Seconds PipelinePhaseLowerBound(const std::vector<Seconds>& forward_s,
                                const std::vector<Seconds>& backward_s, int64_t micro_batches,
                                const std::vector<Seconds>& fwd_link_floor_s = {},
                                const std::vector<Seconds>& bwd_link_floor_s = {});

}  // namespace motley::perf
