// See network.h.
#include "perf/network.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/check.h"

namespace motley::perf {

Network::Network(const spec::ClusterSpec& cluster, bool shared)
    : cluster_(cluster), shared_(shared) {
  const int nd = cluster.num_devices();
  egress_of_device_.assign(static_cast<size_t>(nd), -1);
  ingress_of_device_.assign(static_cast<size_t>(nd), -1);
  std::vector<int> first_device(cluster.nodes.size(), -1);
  for (const spec::DeviceInfo& d : cluster.devices()) {
    int& f = first_device[static_cast<size_t>(d.node)];
    if (f < 0) f = d.id;
  }
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    const spec::NodeSpec& node = cluster.nodes[n];
    const int first = first_device[n];
    if (node.nic_of_device.empty()) {
      const BytesPerSecond bw = NodeNicBandwidth(cluster, static_cast<int>(n));
      const int out = AddResource(fmt::format("node {} egress", node.name), bw);
      const int in = AddResource(fmt::format("node {} ingress", node.name), bw);
      for (int j = 0; j < node.device_count; ++j) {
        egress_of_device_[static_cast<size_t>(first + j)] = out;
        ingress_of_device_[static_cast<size_t>(first + j)] = in;
      }
      continue;
    }
    std::vector<int> out(node.nics.size());
    std::vector<int> in(node.nics.size());
    for (size_t k = 0; k < node.nics.size(); ++k) {
      const spec::LinkClass* link = cluster.FindLinkClass(node.nics[k]);
      MOTLEY_CHECK(link != nullptr, "a finalized cluster names known link classes");
      out[k] = AddResource(fmt::format("node {} card {} egress", node.name, k),
                           link->EffectiveBandwidth());
      in[k] = AddResource(fmt::format("node {} card {} ingress", node.name, k),
                          link->EffectiveBandwidth());
    }
    for (int j = 0; j < node.device_count; ++j) {
      const auto card = static_cast<size_t>(node.nic_of_device[static_cast<size_t>(j)]);
      egress_of_device_[static_cast<size_t>(first + j)] = out[card];
      ingress_of_device_[static_cast<size_t>(first + j)] = in[card];
    }
  }
  fabric_of_island_.assign(cluster.islands.size(), -1);
  for (size_t i = 0; i < cluster.islands.size(); ++i) {
    const spec::IslandSpec& island = cluster.islands[i];
    if (island.capacity > 0) {
      fabric_of_island_[i] =
          AddResource(fmt::format("island {} fabric", island.name), island.capacity);
    }
  }
  if (cluster.inter_island_capacity > 0) {
    inter_island_ = AddResource("inter-island network", cluster.inter_island_capacity);
  }
}

int Network::AddResource(std::string name, BytesPerSecond capacity) {
  capacities_.push_back(capacity);
  names_.push_back(std::move(name));
  return static_cast<int>(capacities_.size()) - 1;
}

FlowPath Network::Path(int from_device, int to_device, const spec::LinkClass& link) const {
  FlowPath path = FlowPath::Alone(link);
  const spec::DeviceInfo& a = cluster_.device(from_device);
  const spec::DeviceInfo& b = cluster_.device(to_device);
  if (!shared_ || a.node == b.node) return path;
  path.Add(egress_of_device_[static_cast<size_t>(from_device)]);
  path.Add(ingress_of_device_[static_cast<size_t>(to_device)]);
  if (a.island == b.island) {
    const int fabric = fabric_of_island_[static_cast<size_t>(a.island)];
    if (fabric >= 0) path.Add(fabric);
  } else if (inter_island_ >= 0) {
    path.Add(inter_island_);
  }
  return path;
}

FlowPath Network::Path(int from_device, int to_device) const {
  return Path(from_device, to_device, cluster_.LinkBetween(from_device, to_device));
}

std::vector<BytesPerSecond> FairShare(const std::vector<FlowPath>& paths,
                                      const std::vector<BytesPerSecond>& caps,
                                      const std::vector<BytesPerSecond>& capacities) {
  return FairShare(paths, caps, capacities, {});
}

std::vector<BytesPerSecond> FairShare(const std::vector<FlowPath>& paths,
                                      const std::vector<BytesPerSecond>& caps,
                                      const std::vector<BytesPerSecond>& capacities,
                                      const std::vector<double>& weights) {
  const size_t nf = paths.size();
  MOTLEY_CHECK(caps.size() == nf, "one cap per flow");
  MOTLEY_CHECK(weights.empty() || weights.size() == nf, "one weight per flow");
  auto weight = [&](size_t f) { return weights.empty() ? 1.0 : weights[f]; };

  std::vector<BytesPerSecond> rate(nf, 0.0);
  // The resources the flows cross, renumbered densely.
  std::vector<int> local;  // global resource -> local index, -1 when unused (sized lazily)
  std::vector<int> global;
  for (const FlowPath& p : paths) {
    for (int i = 0; i < p.num_resources; ++i) {
      const int r = p.resources[static_cast<size_t>(i)];
      if (static_cast<size_t>(r) >= local.size()) local.resize(static_cast<size_t>(r) + 1, -1);
      if (local[static_cast<size_t>(r)] < 0) {
        local[static_cast<size_t>(r)] = static_cast<int>(global.size());
        global.push_back(r);
      }
    }
  }
  const size_t nr = global.size();
  std::vector<double> left(nr);
  std::vector<double> users(nr, 0.0);  // the unfixed flows' weights
  for (size_t k = 0; k < nr; ++k) left[k] = capacities[static_cast<size_t>(global[k])];
  for (size_t f = 0; f < nf; ++f) {
    const FlowPath& p = paths[f];
    for (int i = 0; i < p.num_resources; ++i) {
      users[static_cast<size_t>(local[static_cast<size_t>(p.resources[static_cast<size_t>(i)])])] +=
          weight(f);
    }
  }
  auto res = [&](const FlowPath& p, int i) {
    return static_cast<size_t>(local[static_cast<size_t>(p.resources[static_cast<size_t>(i)])]);
  };
  std::vector<char> fixed(nf, 0);
  size_t remaining = nf;
  std::vector<char> saturated(nr, 0);  // resources at their bottleneck
  while (remaining > 0) {
    // The tightest constraint per unit of weight: a resource's fair share or a flow's own cap.
    double share = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < nr; ++k) {
      if (saturated[k] == 0 && users[k] > 1e-12) share = std::min(share, left[k] / users[k]);
    }
    for (size_t f = 0; f < nf; ++f) {
      if (fixed[f] == 0) share = std::min(share, (caps[f] - rate[f]) / weight(f));
    }
    share = std::max(share, 0.0);
    // The constraints that bind now (ties within rounding): those resources saturate.
    const double tie = share * (1 + 1e-9) + 1e-300;
    for (size_t k = 0; k < nr; ++k) {
      if (saturated[k] == 0 && users[k] > 1e-12 && left[k] / users[k] <= tie) saturated[k] = 1;
    }
    // Raise every unfixed flow by its weight x `share`, then fix the flows at a saturated resource
    // or at their cap. Each round saturates a resource or caps a flow, so it ends.
    for (size_t f = 0; f < nf; ++f) {
      if (fixed[f] != 0) continue;
      rate[f] += weight(f) * share;
      for (int i = 0; i < paths[f].num_resources; ++i) {
        left[res(paths[f], i)] -= weight(f) * share;
      }
    }
    bool progress = false;
    for (size_t f = 0; f < nf; ++f) {
      if (fixed[f] != 0) continue;
      bool done = rate[f] >= caps[f] * (1 - 1e-12);
      for (int i = 0; i < paths[f].num_resources && !done; ++i) {
        done = saturated[res(paths[f], i)] != 0;
      }
      if (done) {
        fixed[f] = 1;
        progress = true;
        --remaining;
        for (int i = 0; i < paths[f].num_resources; ++i) users[res(paths[f], i)] -= weight(f);
      }
    }
    MOTLEY_CHECK(progress, "FairShare made no progress");
  }
  return rate;
}

std::vector<BytesPerSecond> FairShare(const std::vector<FlowPath>& paths,
                                      const std::vector<BytesPerSecond>& capacities) {
  std::vector<BytesPerSecond> caps(paths.size());
  for (size_t f = 0; f < paths.size(); ++f) caps[f] = paths[f].cap;
  return FairShare(paths, caps, capacities);
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
