// See cluster_presets.h.
#include "perf/cluster_presets.h"

#include "core/check.h"
#include "spec/device_presets.h"

namespace motley::perf {

spec::DeviceType PresetDeviceType(const std::string& name) {
  Result<spec::DeviceType> t = spec::PresetDeviceType(name);
  MOTLEY_CHECK(t.ok(), t.status().message());
  return *std::move(t);
}

spec::LinkClass PresetLinkClass(const std::string& name) {
  Result<spec::LinkClass> l = spec::PresetLinkClass(name);
  MOTLEY_CHECK(l.ok(), l.status().message());
  return *std::move(l);
}

Result<spec::ClusterSpec> MakeCluster(const std::string& name, const std::vector<NodeGroup>& groups,
                                      const std::string& inter_island_link) {
  spec::ClusterSpec c;
  c.name = name;
  auto add_type = [&](const std::string& t) {
    if (c.FindDeviceType(t) == nullptr) c.device_types.push_back(PresetDeviceType(t));
  };
  auto add_link = [&](const std::string& l) {
    if (l.empty()) return;
    for (const spec::LinkClass& have : c.link_classes) {
      if (have.name == l) return;
    }
    c.link_classes.push_back(PresetLinkClass(l));
  };
  add_link(inter_island_link);
  for (const NodeGroup& g : groups) {
    add_type(g.device_type);
    add_link(g.intra_link);
    add_link(g.island_link);
    spec::IslandSpec island;
    island.name = g.name;
    island.link = g.island_link;
    for (int n = 0; n < g.nodes; ++n) {
      spec::NodeSpec node;
      node.name = g.name + "-" + std::to_string(n);
      node.group = g.name;
      node.device_type = g.device_type;
      node.device_count = g.devices_per_node;
      node.intra_link = g.devices_per_node > 1 ? g.intra_link : "";
      if (!g.island_link.empty()) node.nics = {g.island_link};
      island.nodes.push_back(node.name);
      c.nodes.push_back(std::move(node));
    }
    if (g.nodes > 1) c.islands.push_back(std::move(island));
  }
  c.inter_island_link = inter_island_link;
  MOTLEY_RETURN_IF_ERROR(c.Finalize(name, "cluster"));
  return c;
}

Result<spec::ClusterSpec> MakeThreeTypeCluster(int total_devices) {
  const int nodes = total_devices / 8;
  if (nodes < 8 || total_devices % 64 != 0) {
    return Err("three-type cluster: total_devices must be a multiple of 64, got {}", total_devices);
  }
  return MakeCluster("three-type-" + std::to_string(total_devices),
                     {{"h100", "h100", nodes / 4, 8, "nvlink", "ib-hdr"},
                      {"a100", "a100-80g", nodes / 4, 8, "nvlink", "roce-100g"},
                      {"mi250x", "mi250x", nodes / 2, 8, "xgmi", "eth-25g"}},
                     "eth-25g");
}

Result<spec::ClusterSpec> MakeTwoVendorCluster768() {
  return MakeCluster("two-vendor-768",
                     {{"a100", "a100-80g", 16, 8, "nvlink", "ib-hdr"},
                      {"ascend", "ascend-910b", 80, 8, "hccs", "roce-100g"}},
                     "roce-100g");
}

}  // namespace motley::perf
