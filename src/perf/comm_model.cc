// See comm_model.h.
#include "perf/comm_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/check.h"

namespace motley::perf {

Seconds P2PTime(Bytes bytes, const spec::LinkClass& link) { return link.TransferTime(bytes); }

Seconds RingAllReduceTime(Bytes bytes, int n, const spec::LinkClass& link) {
  if (n < 2) return 0;
  const double steps = 2.0 * (n - 1);
  return steps * link.latency_s + steps / n * bytes / link.EffectiveBandwidth();
}

Seconds RingReduceScatterTime(Bytes bytes, int n, const spec::LinkClass& link) {
  if (n < 2) return 0;
  const double steps = n - 1;
  return steps * link.latency_s + steps / n * bytes / link.EffectiveBandwidth();
}

Seconds TreeAllReduceTime(Bytes bytes, int n, const spec::LinkClass& link) {
  if (n < 2) return 0;
  const double depth = std::ceil(std::log2(static_cast<double>(n)));
  return 2.0 * depth * link.latency_s + 2.0 * bytes / link.EffectiveBandwidth();
}

Seconds HeterogeneousRingAllReduceTime(Bytes bytes,
                                       const std::vector<const spec::LinkClass*>& hops) {
  const int n = static_cast<int>(hops.size());
  if (n < 2) return 0;
  Seconds step = 0;
  for (const spec::LinkClass* hop : hops) {
    MOTLEY_CHECK(hop != nullptr, "null hop");
    step = std::max(step, hop->TransferTime(bytes / n));
  }
  return 2.0 * (n - 1) * step;
}

Seconds HierarchicalAllReduceTime(Bytes bytes, int k, int groups, const spec::LinkClass& intra,
                                  const spec::LinkClass& inter) {
  return 2.0 * RingReduceScatterTime(bytes, k, intra) +
         std::min(RingAllReduceTime(bytes / k, groups, inter),
                  TreeAllReduceTime(bytes / k, groups, inter));
}

const char* AllReduceAlgorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kRing: return "ring";
    case AllReduceAlgorithm::kHierarchyRing: return "hierarchy (ring across groups)";
    case AllReduceAlgorithm::kHierarchyTree: return "hierarchy (tree across groups)";
  }
  return "?";
}

FlowPhase RingPhase(const std::vector<int>& ring, int steps, Bytes step_bytes) {
  FlowPhase phase;
  if (ring.size() < 2 || steps <= 0) return phase;
  phase.flows.reserve(ring.size());
  for (size_t i = 0; i < ring.size(); ++i) {
    phase.flows.push_back(PhaseFlow{ring[i], ring[(i + 1) % ring.size()],
                                    static_cast<double>(steps), steps * step_bytes});
  }
  return phase;
}

std::vector<CollectiveFlows> AllReduceCandidates(const spec::ClusterSpec& cluster,
                                                 const std::vector<int>& devices, Bytes bytes) {
  std::vector<CollectiveFlows> out;
  if (devices.size() < 2) return out;
  std::vector<int> ring = devices;
  std::sort(ring.begin(), ring.end(), [&](int a, int b) {
    const spec::DeviceInfo& da = cluster.device(a);
    const spec::DeviceInfo& db = cluster.device(b);
    if (da.island != db.island) return da.island < db.island;
    return a < b;  // ids are in node order
  });
  const int n = static_cast<int>(ring.size());
  CollectiveFlows flat;
  flat.algorithm = AllReduceAlgorithm::kRing;
  flat.phases.push_back(RingPhase(ring, 2 * (n - 1), bytes / n));
  out.push_back(std::move(flat));
  // Two-level hierarchy: by island when there are several, else by node.
  std::map<int, std::vector<int>> by_island;
  std::map<int, std::vector<int>> by_node;
  for (int d : ring) {
    by_island[cluster.device(d).island].push_back(d);
    by_node[cluster.device(d).node].push_back(d);
  }
  const auto& grouped = by_island.size() > 1 ? by_island : by_node;
  if (grouped.size() < 2) return out;
  std::vector<std::vector<int>> groups;
  size_t k = std::numeric_limits<size_t>::max();
  for (const auto& [key, members] : grouped) {
    groups.push_back(members);
    k = std::min(k, members.size());
  }
  const int g = static_cast<int>(groups.size());
  FlowPhase inner;  // a reduce-scatter (or all-gather) ring inside every group at once
  for (const std::vector<int>& members : groups) {
    const int m = static_cast<int>(members.size());
    FlowPhase ring_phase = RingPhase(members, m - 1, bytes / m);
    inner.flows.insert(inner.flows.end(), ring_phase.flows.begin(), ring_phase.flows.end());
  }
  const Bytes shard = bytes / static_cast<double>(k);
  for (AllReduceAlgorithm algorithm :
       {AllReduceAlgorithm::kHierarchyRing, AllReduceAlgorithm::kHierarchyTree}) {
    CollectiveFlows h;
    h.algorithm = algorithm;
    if (!inner.flows.empty()) h.phases.push_back(inner);
    if (algorithm == AllReduceAlgorithm::kHierarchyRing) {
      FlowPhase outer;
      for (size_t j = 0; j < k; ++j) {
        std::vector<int> leaders;
        for (const std::vector<int>& members : groups) leaders.push_back(members[j]);
        FlowPhase ring_phase = RingPhase(leaders, 2 * (g - 1), shard / g);
        outer.flows.insert(outer.flows.end(), ring_phase.flows.begin(), ring_phase.flows.end());
      }
      h.phases.push_back(std::move(outer));
    } else {
      // Binary tree over the groups in group order (heap numbering: the parent of i is (i-1)/2).
      const double depth = std::ceil(std::log2(static_cast<double>(g)));
      FlowPhase reduce;
      FlowPhase broadcast;
      for (size_t j = 0; j < k; ++j) {
        for (int i = 1; i < g; ++i) {
          const int child = groups[static_cast<size_t>(i)][j];
          const int parent = groups[static_cast<size_t>((i - 1) / 2)][j];
          reduce.flows.push_back(PhaseFlow{child, parent, depth, shard});
          broadcast.flows.push_back(PhaseFlow{parent, child, depth, shard});
        }
      }
      h.phases.push_back(std::move(reduce));
      h.phases.push_back(std::move(broadcast));
    }
    if (!inner.flows.empty()) h.phases.push_back(inner);
    out.push_back(std::move(h));
  }
  return out;
}

std::vector<Seconds> ConcurrentCollectiveTimes(
    const Network& network, const std::vector<const CollectiveFlows*>& collectives,
    const FlowPathFn& path, const BackgroundFlows* background) {
  std::vector<Seconds> times(collectives.size(), 0.0);
  size_t phases = 0;
  for (const CollectiveFlows* c : collectives) phases = std::max(phases, c->phases.size());
  std::vector<FlowPath> paths;
  std::vector<size_t> owner;
  std::vector<const PhaseFlow*> flows;
  for (size_t p = 0; p < phases; ++p) {
    paths.clear();
    owner.clear();
    flows.clear();
    for (size_t c = 0; c < collectives.size(); ++c) {
      if (p >= collectives[c]->phases.size()) continue;
      for (const PhaseFlow& f : collectives[c]->phases[p].flows) {
        paths.push_back(path ? path(f.from, f.to) : network.Path(f.from, f.to));
        owner.push_back(c);
        flows.push_back(&f);
      }
    }
    if (paths.empty()) continue;
    const size_t own = paths.size();
    std::vector<double> weights;
    if (background != nullptr && p < background->paths.size() && !background->paths[p].empty()) {
      weights.assign(own, 1.0);
      paths.insert(paths.end(), background->paths[p].begin(), background->paths[p].end());
      weights.insert(weights.end(), background->weights[p].begin(), background->weights[p].end());
    }
    std::vector<BytesPerSecond> caps(paths.size());
    for (size_t i = 0; i < paths.size(); ++i) caps[i] = paths[i].cap;
    const std::vector<BytesPerSecond> rates = FairShare(paths, caps, network.capacities(), weights);
    std::vector<Seconds> phase_s(collectives.size(), 0.0);
    for (size_t i = 0; i < own; ++i) {
      const Seconds t = flows[i]->latencies * paths[i].latency_s + flows[i]->bytes / rates[i];
      phase_s[owner[i]] = std::max(phase_s[owner[i]], t);
    }
    for (size_t c = 0; c < collectives.size(); ++c) times[c] += phase_s[c];
  }
  return times;
}

Seconds CollectiveTimeAlone(const spec::ClusterSpec& cluster, const CollectiveFlows& collective,
                            const FlowPathFn& path) {
  Seconds sum = 0;
  for (const FlowPhase& phase : collective.phases) {
    Seconds slowest = 0;
    for (const PhaseFlow& f : phase.flows) {
      const FlowPath alone =
          path ? path(f.from, f.to) : FlowPath::Alone(cluster.LinkBetween(f.from, f.to));
      slowest = std::max(slowest, f.latencies * alone.latency_s + f.bytes / alone.cap);
    }
    sum += slowest;
  }
  return sum;
}

Seconds GroupAllReduceTime(const spec::ClusterSpec& cluster, const std::vector<int>& devices,
                           Bytes bytes, const FlowPathFn& path) {
  Seconds best = 0;
  bool first = true;
  for (const CollectiveFlows& c : AllReduceCandidates(cluster, devices, bytes)) {
    const Seconds t = CollectiveTimeAlone(cluster, c, path);
    if (first || t < best) best = t;
    first = false;
  }
  return best;
}

}  // namespace motley::perf
