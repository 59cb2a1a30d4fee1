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

namespace {

// The link of hop a -> b, its bandwidth capped by the NICs it leaves and enters when `nic` is set:
// at most NodeNicBandwidth(n) / (sharers(n) * flows through n of this collective), per direction.
spec::LinkClass CappedHop(const spec::ClusterSpec& cluster, int a, int b, const NicSharing* nic,
                          const std::vector<int>& flows_out, const std::vector<int>& flows_in) {
  spec::LinkClass link = cluster.LinkBetween(a, b);
  const int na = cluster.device(a).node;
  const int nb = cluster.device(b).node;
  if (nic == nullptr || na == nb) return link;
  BytesPerSecond bw = link.EffectiveBandwidth();
  bw = std::min(bw, NodeNicBandwidth(cluster, na) /
                        (nic->SharersAt(na) * flows_out[static_cast<size_t>(na)]));
  bw = std::min(bw, NodeNicBandwidth(cluster, nb) /
                        (nic->SharersAt(nb) * flows_in[static_cast<size_t>(nb)]));
  link.bandwidth = bw;
  link.efficiency = 1.0;
  return link;
}

// The slowest hop among consecutive devices of `ring` (closing hop included), each hop's NICs
// shared by the ring's own flows through them and by `nic`'s sharers.
Seconds RingOver(const spec::ClusterSpec& cluster, const std::vector<int>& ring, Bytes bytes,
                 const NicSharing* nic) {
  if (ring.size() < 2) return 0;
  std::vector<int> flows_out;  // by node, with `nic` only
  std::vector<int> flows_in;
  if (nic != nullptr) {
    flows_out.assign(cluster.nodes.size(), 0);
    flows_in.assign(cluster.nodes.size(), 0);
    for (size_t i = 0; i < ring.size(); ++i) {
      const int na = cluster.device(ring[i]).node;
      const int nb = cluster.device(ring[(i + 1) % ring.size()]).node;
      if (na != nb) {
        ++flows_out[static_cast<size_t>(na)];
        ++flows_in[static_cast<size_t>(nb)];
      }
    }
  }
  std::vector<spec::LinkClass> links;
  links.reserve(ring.size());
  for (size_t i = 0; i < ring.size(); ++i) {
    links.push_back(CappedHop(cluster, ring[i], ring[(i + 1) % ring.size()], nic, flows_out,
                              flows_in));
  }
  std::vector<const spec::LinkClass*> hops;
  hops.reserve(links.size());
  for (const spec::LinkClass& link : links) hops.push_back(&link);
  return HeterogeneousRingAllReduceTime(bytes, hops);
}

}  // namespace

double NicSharing::SharersAt(int node) const {
  if (node < 0 || static_cast<size_t>(node) >= sharers.size()) return 1.0;
  return std::max(1, sharers[static_cast<size_t>(node)]);
}

Seconds GroupAllReduceTime(const spec::ClusterSpec& cluster, const std::vector<int>& devices,
                           Bytes bytes, const NicSharing* nic) {
  if (devices.size() < 2) return 0;
  std::vector<int> ring = devices;
  std::sort(ring.begin(), ring.end(), [&](int a, int b) {
    const spec::DeviceInfo& da = cluster.device(a);
    const spec::DeviceInfo& db = cluster.device(b);
    if (da.island != db.island) return da.island < db.island;
    return a < b;  // ids are in node order
  });
  Seconds best = RingOver(cluster, ring, bytes, nic);
  // Two-level hierarchy: by island when there are several, else by node.
  std::map<int, std::vector<int>> by_island;
  std::map<int, std::vector<int>> by_node;
  for (int d : ring) {
    by_island[cluster.device(d).island].push_back(d);
    by_node[cluster.device(d).node].push_back(d);
  }
  const auto& groups = by_island.size() > 1 ? by_island : by_node;
  if (groups.size() > 1) {
    size_t k = std::numeric_limits<size_t>::max();
    Seconds inner = 0;
    std::vector<int> leaders;
    for (const auto& [key, members] : groups) {
      k = std::min(k, members.size());
      // Reduce-scatter then all-gather inside the group: the same steps as its ring all-reduce.
      inner = std::max(inner, RingOver(cluster, members, bytes, nic));
      leaders.push_back(members.front());
    }
    // The slowest link between group leaders carries the cross-group all-reduce of S/k.
    spec::LinkClass outer_link = cluster.LinkBetween(leaders[0], leaders[1]);
    for (size_t i = 1; i < leaders.size(); ++i) {
      const spec::LinkClass& link = cluster.LinkBetween(leaders[i], leaders[(i + 1) % leaders.size()]);
      if (link.EffectiveBandwidth() < outer_link.EffectiveBandwidth()) outer_link = link;
    }
    if (nic != nullptr) {
      // The k outer all-reduces run at once, one per member index j < k of every group: member j
      // of each group sends through its node's NICs, shared with the sharers'.
      std::map<int, int> flows;
      for (const auto& [key, members] : groups) {
        for (size_t j = 0; j < k; ++j) ++flows[cluster.device(members[j]).node];
      }
      BytesPerSecond bw = outer_link.EffectiveBandwidth();
      for (const auto& [node, f] : flows) {
        bw = std::min(bw, NodeNicBandwidth(cluster, node) / (nic->SharersAt(node) * f));
      }
      outer_link.bandwidth = bw;
      outer_link.efficiency = 1.0;
    }
    const int n_groups = static_cast<int>(groups.size());
    const Bytes shard = bytes / static_cast<double>(k);
    const Seconds outer = std::min(RingAllReduceTime(shard, n_groups, outer_link),
                                   TreeAllReduceTime(shard, n_groups, outer_link));
    best = std::min(best, inner + outer);
  }
  return best;
}

BytesPerSecond NodeNicBandwidth(const spec::ClusterSpec& cluster, int node_index) {
  const spec::NodeSpec& node = cluster.nodes[static_cast<size_t>(node_index)];
  BytesPerSecond nic = 0;
  for (const std::string& name : node.nics) {
    const spec::LinkClass* link = cluster.FindLinkClass(name);
    if (link != nullptr) nic += link->EffectiveBandwidth();
  }
  if (nic > 0) return nic;
  for (const spec::IslandSpec& island : cluster.islands) {
    if (std::find(island.nodes.begin(), island.nodes.end(), node.name) != island.nodes.end()) {
      const spec::LinkClass* link = cluster.FindLinkClass(island.link);
      if (link != nullptr) nic = link->EffectiveBandwidth();
    }
  }
  const spec::LinkClass* inter = cluster.FindLinkClass(cluster.inter_island_link);
  if (inter != nullptr) nic = std::max(nic, inter->EffectiveBandwidth());
  return nic > 0 ? nic : 1e30;
}

}  // namespace motley::perf
