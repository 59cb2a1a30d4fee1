// See network.h.
#include "sim/network.h"

#include <algorithm>
#include <limits>
#include <map>

#include "core/check.h"
#include "perf/comm_model.h"

namespace motley::sim {

NodeNicNetwork::NodeNicNetwork(const spec::ClusterSpec& cluster) : cluster_(cluster) {
  const size_t num_nodes = cluster.nodes.size();
  capacities_.assign(2 * num_nodes, 0.0);
  for (size_t n = 0; n < num_nodes; ++n) {
    const BytesPerSecond nic = perf::NodeNicBandwidth(cluster, static_cast<int>(n));
    capacities_[2 * n] = nic;
    capacities_[2 * n + 1] = nic;
  }
}

PathInfo NodeNicNetwork::Path(int from_device, int to_device) const {
  const spec::LinkClass& link = cluster_.LinkBetween(from_device, to_device);
  PathInfo path;
  path.latency_s = link.latency_s;
  path.bandwidth = link.EffectiveBandwidth();
  const int a = cluster_.device(from_device).node;
  const int b = cluster_.device(to_device).node;
  if (a != b) path.resources = {2 * a, 2 * b + 1};
  return path;
}

std::vector<BytesPerSecond> FairShare(const std::vector<std::vector<int>>& flows,
                                      const std::vector<BytesPerSecond>& caps,
                                      const std::vector<BytesPerSecond>& capacities) {
  const size_t nf = flows.size();
  MOTLEY_CHECK(caps.size() == nf, "one cap per flow");
  std::vector<BytesPerSecond> rate(nf, 0.0);
  std::vector<bool> fixed(nf, false);
  std::map<int, BytesPerSecond> left;
  std::map<int, int> users;
  for (size_t f = 0; f < nf; ++f) {
    for (int r : flows[f]) {
      left[r] = capacities[static_cast<size_t>(r)];
      ++users[r];
    }
  }
  size_t remaining = nf;
  while (remaining > 0) {
    // The tightest constraint: a resource's fair share or a flow's own cap.
    double share = std::numeric_limits<double>::infinity();
    for (const auto& [r, cap] : left) {
      if (users[r] > 0) share = std::min(share, cap / users[r]);
    }
    for (size_t f = 0; f < nf; ++f) {
      if (!fixed[f]) share = std::min(share, caps[f] - rate[f]);
    }
    // Raise every unfixed flow by `share`, then fix the flows at a saturated resource or cap.
    for (size_t f = 0; f < nf; ++f) {
      if (fixed[f]) continue;
      rate[f] += share;
      for (int r : flows[f]) left[r] -= share;
    }
    bool progress = false;
    for (size_t f = 0; f < nf; ++f) {
      if (fixed[f]) continue;
      bool saturated = rate[f] >= caps[f] * (1 - 1e-12);
      for (int r : flows[f]) {
        if (left[r] <= capacities[static_cast<size_t>(r)] * 1e-12) saturated = true;
      }
      if (saturated) {
        fixed[f] = true;
        progress = true;
        --remaining;
        for (int r : flows[f]) --users[r];
      }
    }
    MOTLEY_CHECK(progress, "FairShare made no progress");
  }
  return rate;
}

}  // namespace motley::sim
