// The network model the predictor and the simulator share (docs/architecture.md §8; the resources
// are defined for users in docs/formats/cluster.md, "Network resources"): which shared resources
// a transfer between two devices crosses, their capacities, and the max-min fair rates of
// concurrent flows over them (progressive filling, as SimGrid's LV08 flow model without its TCP
// corrections). Written by hand: no library of the field models a training cluster's NICs and
// fabrics as shared resources (SimGrid does, as a whole simulation framework; its flow model is
// the one followed here).
//
// Resources (each a capacity in bytes/s that the flows crossing it share):
//  - a node's network cards, per direction: pooled (one egress and one ingress resource of
//    NodeNicBandwidth) unless the cluster file assigns devices to cards (nodes[].nics[].devices),
//    then one egress and one ingress resource per card, crossed by the transfers of the devices
//    it serves;
//  - an island's fabric, when the file gives islands[].capacity: one resource crossed by every
//    transfer between two nodes of that island (without it, a node's cards are its uplinks and
//    the fabric adds no constraint);
//  - the network between islands, when the file gives inter_island_capacity: one resource crossed
//    by every transfer between two islands.
// A transfer inside a node crosses none (its intra link is a switched fabric). Every flow is also
// capped by its own link class (ClusterSpec::LinkBetween, or the caller's slowed class).
// With sharing off (PerfSettings::nic_contention false: emulated clusters, whose runtime link
// emulation charges each rank pair on its own) no path crosses a resource.
//
// Ownership: a Network keeps a reference to the cluster, which must outlive it. Thread safety:
// const methods are thread-safe; FairShare is a pure function.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/units.h"
#include "spec/cluster_spec.h"

namespace motley::perf {

// What one transfer from one device to another crosses.
struct FlowPath {
  Seconds latency_s = 0;
  BytesPerSecond cap = 0;          // the flow's own limit: its link class's effective bandwidth
  std::array<int, 4> resources{};  // shared resources crossed (indices into capacities())
  int num_resources = 0;
  void Add(int resource) { resources[static_cast<size_t>(num_resources++)] = resource; }
  // A flow over `link` that crosses no shared resource (at the link's latency and bandwidth).
  static FlowPath Alone(const spec::LinkClass& link) {
    FlowPath path;
    path.latency_s = link.latency_s;
    path.cap = link.EffectiveBandwidth();
    return path;
  }
};

class Network {
 public:
  // `shared` false: paths cross no resource (every flow at its own cap).
  Network(const spec::ClusterSpec& cluster, bool shared);

  // The path of a transfer from `from_device` to `to_device` (distinct) over `link` (normally
  // cluster().LinkBetween(from, to); a caller applying link rates passes the slowed class).
  FlowPath Path(int from_device, int to_device, const spec::LinkClass& link) const;
  FlowPath Path(int from_device, int to_device) const;

  const std::vector<BytesPerSecond>& capacities() const { return capacities_; }
  // "node a-1 egress", "node a-1 card 0 ingress", "island rack fabric", "inter-island network".
  const std::string& ResourceName(int resource) const {
    return names_[static_cast<size_t>(resource)];
  }
  bool shared() const { return shared_; }
  const spec::ClusterSpec& cluster() const { return cluster_; }

 private:
  int AddResource(std::string name, BytesPerSecond capacity);

  const spec::ClusterSpec& cluster_;
  bool shared_ = true;
  std::vector<BytesPerSecond> capacities_;
  std::vector<std::string> names_;
  std::vector<int> egress_of_device_;  // by device id
  std::vector<int> ingress_of_device_;
  std::vector<int> fabric_of_island_;  // -1: no aggregate capacity given
  int inter_island_ = -1;
};

// Max-min fair rates: flow f gets at most caps[f], and the flows crossing resource r share
// capacities[r]. paths[f] lists the resources of flow f (its cap is caps[f], not paths[f].cap, so
// that a caller may cap flows otherwise).
std::vector<BytesPerSecond> FairShare(const std::vector<FlowPath>& paths,
                                      const std::vector<BytesPerSecond>& caps,
                                      const std::vector<BytesPerSecond>& capacities);
// Weighted max-min: flow f takes weights[f] shares of every resource it crosses (the predictor
// weighs a transfer that overlaps another only part of the time by that fraction); its rate is
// still at most caps[f]. Weights are positive; empty: all 1.
std::vector<BytesPerSecond> FairShare(const std::vector<FlowPath>& paths,
                                      const std::vector<BytesPerSecond>& caps,
                                      const std::vector<BytesPerSecond>& capacities,
                                      const std::vector<double>& weights);
// FairShare with each flow's own cap.
std::vector<BytesPerSecond> FairShare(const std::vector<FlowPath>& paths,
                                      const std::vector<BytesPerSecond>& capacities);

// Bandwidth of a node's network cards, per direction: the sum of its cards' effective bandwidths;
// without cards listed, the faster of its island link and the inter-island link; 1e30 (no limit)
// when neither exists.
BytesPerSecond NodeNicBandwidth(const spec::ClusterSpec& cluster, int node);

}  // namespace motley::perf
