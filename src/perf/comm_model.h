// Communication model (alpha-beta; performance-model.md): time of point-to-point transfers and of
// collectives over link classes. Ring, tree and hierarchical all-reduce; a heterogeneous ring is
// bounded by its slowest hop. GroupAllReduceTime picks the cheapest algorithm for a concrete set of
// devices, the way NCCL's tuner picks one. Pure functions; thread-safe.
#pragma once

#include <vector>

#include "core/units.h"
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

// How a collective shares nodes' network cards (PerfSettings::nic_contention): sharers[n] is the
// number of collectives that cross node n's NICs at the same time as this one, itself included
// (the TP colours of one layer's data-parallel groups start together). A node without an entry,
// or with 0, counts 1. The collective's own flows through a node share them too: a ring's hops
// leaving (entering) the node, a hierarchy's concurrent cross-group all-reduces.
struct NicSharing {
  std::vector<int> sharers;  // by node index of the cluster
  double SharersAt(int node) const;
};

// All-reduce of `bytes` over concrete devices of `cluster`: the best of a heterogeneous ring (in
// island, node, id order, so that slow links are crossed as few times as possible) and a two-level
// hierarchy over islands (or over nodes in one island). 0 for fewer than two devices. With `nic`,
// every flow leaving or entering node n gets at most NodeNicBandwidth(n) / (sharers at n * the
// collective's own flows through n); without, links are unshared.
Seconds GroupAllReduceTime(const spec::ClusterSpec& cluster, const std::vector<int>& devices,
                           Bytes bytes, const NicSharing* nic = nullptr);

// Bandwidth of a node's network cards, per direction: the sum of its NICs' effective bandwidths;
// without NICs listed, the faster of its island link and the inter-island link; 1e30 (unshared)
// when neither exists. Shared by the predictor's contention estimate and the simulator's network
// model.
BytesPerSecond NodeNicBandwidth(const spec::ClusterSpec& cluster, int node);

}  // namespace motley::perf
