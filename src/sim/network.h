// Network model of the simulator (docs/architecture.md §3 rule 3): which shared resources a
// transfer between two devices crosses, and a max-min fair bandwidth solver over concurrent flows
// (progressive filling, as SimGrid's LV08 flow model without its TCP corrections).
//
// NodeNicNetwork: a transfer inside a node uses the node's intra link alone (switched fabric, no
// sharing modelled); a transfer between nodes crosses the sender node's egress and the receiver
// node's ingress, each with the capacity of the node's NICs (perf::NodeNicBandwidth); its own cap
// is the effective bandwidth of LinkBetween(a, b).
//
// Ownership: NodeNicNetwork keeps a reference to the cluster, which must outlive it. Thread safety:
// Path() is const and thread-safe; FairShare is a pure function.
#pragma once

#include <vector>

#include "core/units.h"
#include "spec/cluster_spec.h"

namespace motley::sim {

struct PathInfo {
  Seconds latency_s = 0;
  BytesPerSecond bandwidth = 0;  // the flow's own cap
  std::vector<int> resources;    // shared resources crossed (indices into Capacities())
};

class NetworkModel {
 public:
  virtual ~NetworkModel() = default;
  virtual PathInfo Path(int from_device, int to_device) const = 0;
  virtual const std::vector<BytesPerSecond>& Capacities() const = 0;
};

class NodeNicNetwork final : public NetworkModel {
 public:
  explicit NodeNicNetwork(const spec::ClusterSpec& cluster);
  PathInfo Path(int from_device, int to_device) const override;
  const std::vector<BytesPerSecond>& Capacities() const override { return capacities_; }

 private:
  const spec::ClusterSpec& cluster_;
  std::vector<BytesPerSecond> capacities_;  // [2*node] egress, [2*node+1] ingress
};

// Max-min fair rates: flow f gets at most caps[f], and the flows crossing resource r share
// capacities[r]. flows[f] lists the resources of flow f.
std::vector<BytesPerSecond> FairShare(const std::vector<std::vector<int>>& flows,
                                      const std::vector<BytesPerSecond>& caps,
                                      const std::vector<BytesPerSecond>& capacities);

}  // namespace motley::sim
