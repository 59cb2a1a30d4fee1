// Communication model (alpha-beta; performance-model.md): time of point-to-point transfers and of
// collectives over link classes. Ring, tree and hierarchical all-reduce; a heterogeneous ring is
// bounded by its slowest hop. Collectives over concrete devices are phases of flows over the
// shared network (perf/network.h), which the predictor solves in closed form and the simulator
// replays; GroupAllReduceTime picks the cheapest algorithm for a set of devices, the way NCCL's
// tuner picks one. Pure functions; thread-safe.
#pragma once

#include <functional>
#include <vector>

#include "core/units.h"
#include "perf/network.h"
#include "spec/cluster_spec.h"

namespace motley::perf {

// One transfer of `bytes` over `link`: latency + bytes / effective bandwidth.
Seconds P2PTime(Bytes bytes, const spec::LinkClass& link);
// Ring all-reduce over n ranks joined by one link class: 2(n-1)*alpha + 2(n-1)/n * S/B.
Seconds RingAllReduceTime(Bytes bytes, int n, const spec::LinkClass& link);
// Reduce-scatter or all-gather: (n-1)*alpha + (n-1)/n * S/B.
Seconds RingReduceScatterTime(Bytes bytes, int n, const spec::LinkClass& link);
// Pipelined binary tree (reduce then broadcast): 2*ceil(log2 n)*alpha + 2*S/B.
Seconds TreeAllReduceTime(Bytes bytes, int n, const spec::LinkClass& link);
// Ring over hops of different link classes (hops.size() == n, the closing hop included): each of
// the 2(n-1) steps moves S/n over every hop at once and lasts as long as the slowest hop.
Seconds HeterogeneousRingAllReduceTime(Bytes bytes, const std::vector<const spec::LinkClass*>& hops);
// Hierarchical: reduce-scatter inside each of `groups` groups of k ranks (intra link), all-reduce
// of S/k across groups (inter link), all-gather inside the groups.
Seconds HierarchicalAllReduceTime(Bytes bytes, int k, int groups, const spec::LinkClass& intra,
                                  const spec::LinkClass& inter);

// --- Collectives as flows over the shared network (perf/network.h) ---------------------------
// A collective moves its bytes in phases; in a phase its flows run at once, each paying its link's
// latency `latencies` times (the phase's ring steps or tree levels) and moving `bytes`; a phase
// lasts as long as its slowest flow. The predictor's fast solve (ConcurrentCollectiveTimes) and
// the simulator's replay (sim/) read the same phases, so both time the same algorithm.

struct PhaseFlow {
  int from = 0;  // device ids
  int to = 0;
  double latencies = 0;  // link latencies paid in the phase
  Bytes bytes = 0;       // bytes moved in the phase
};
struct FlowPhase {
  std::vector<PhaseFlow> flows;
};

enum class AllReduceAlgorithm { kRing, kHierarchyRing, kHierarchyTree };
// "ring", "hierarchy (ring across groups)", "hierarchy (tree across groups)".
const char* AllReduceAlgorithmName(AllReduceAlgorithm algorithm);

struct CollectiveFlows {
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kRing;
  std::vector<FlowPhase> phases;
};

// A ring over `ring` (member order; the closing hop included) running `steps` steps of
// `step_bytes` per hop, as one phase: every hop a flow of steps latencies and steps * step_bytes.
// Empty below two members.
FlowPhase RingPhase(const std::vector<int>& ring, int steps, Bytes step_bytes);

// The algorithms an all-reduce of `bytes` over concrete devices may take (GroupAllReduceTime picks
// the fastest, the way NCCL's tuner picks one):
//  - kRing: one ring in (island, id) order, so that slow links are crossed as few times as
//    possible: 2(n-1) steps of S/n;
//  - a two-level hierarchy over islands (over nodes when the devices sit in one island), when
//    there are two groups or more: a reduce-scatter ring inside every group (m-1 steps of S/m),
//    then k = the smallest group's size concurrent all-reduces of S/k across groups, one per
//    member index j < k over member j of every group (kHierarchyRing: rings of 2(g-1) steps of
//    S/(kg); kHierarchyTree: a binary tree over the g groups in group order, reduce to the root
//    then broadcast, each a phase of ceil(log2 g) latencies and S/k per edge), then the all-gather
//    ring inside every group.
// Empty for fewer than two devices.
std::vector<CollectiveFlows> AllReduceCandidates(const spec::ClusterSpec& cluster,
                                                 const std::vector<int>& devices, Bytes bytes);

// The path a flow from a to b takes (Network::Path, or with a slowed link class).
using FlowPathFn = std::function<FlowPath(int from_device, int to_device)>;

// Transfers of other work that overlap a set of collectives part of the time, by phase of the
// set: each flow weighted by the fraction of the set's time it runs (weighted FairShare).
struct BackgroundFlows {
  std::vector<std::vector<FlowPath>> paths;  // [phase]
  std::vector<std::vector<double>> weights;  // [phase], in (0, 1]
  bool empty() const { return paths.empty(); }
};

// Time of each of `collectives`, all starting together: phase p of every collective runs at once
// with phase p of the others (their flows share the network, FairShare), and a collective's phase
// lasts as long as its slowest flow, latencies x latency + bytes / rate. Phases follow each
// other; a collective with fewer phases is done earlier (the rest no longer share with it).
// `path` null: Network::Path. `background` (optional): other transfers sharing the network with
// phase p, weighted.
std::vector<Seconds> ConcurrentCollectiveTimes(
    const Network& network, const std::vector<const CollectiveFlows*>& collectives,
    const FlowPathFn& path = nullptr, const BackgroundFlows* background = nullptr);

// A collective with every flow alone on the network: each phase lasts as long as its slowest
// flow, latencies x latency + bytes / cap (no sharing; a lower bound on any sharing, since
// max-min sharing only lowers a flow's rate). `path` null: the link class between the devices.
Seconds CollectiveTimeAlone(const spec::ClusterSpec& cluster, const CollectiveFlows& collective,
                            const FlowPathFn& path = nullptr);

// All-reduce of `bytes` over concrete devices on unshared links: the fastest of
// AllReduceCandidates, each at CollectiveTimeAlone over `path` (null: the link classes; the
// predictor passes its slowed links). 0 for fewer than two devices.
Seconds GroupAllReduceTime(const spec::ClusterSpec& cluster, const std::vector<int>& devices,
                           Bytes bytes, const FlowPathFn& path = nullptr);

}  // namespace motley::perf
