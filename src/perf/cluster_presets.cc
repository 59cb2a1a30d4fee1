// See cluster_presets.h.
#include "perf/cluster_presets.h"

#include "core/check.h"

namespace motley::perf {

spec::DeviceType PresetDeviceType(const std::string& name) {
  spec::DeviceType t;
  t.name = name;
  t.vendor = "cuda";
  if (name == "a100-80g") {
    t.peak_bf16_flops = 312e12;
    t.peak_fp32_flops = 19.5e12;
    t.memory_bytes = 80 * kGB;
    t.memory_bandwidth = 2.039e12;
  } else if (name == "a100-40g") {
    t.peak_bf16_flops = 312e12;
    t.peak_fp32_flops = 19.5e12;
    t.memory_bytes = 40 * kGB;
    t.memory_bandwidth = 1.555e12;
  } else if (name == "h100") {
    t.peak_bf16_flops = 989e12;
    t.peak_fp32_flops = 67e12;
    t.memory_bytes = 80 * kGB;
    t.memory_bandwidth = 3.35e12;
  } else if (name == "mi250x") {
    t.vendor = "rocm";
    t.peak_bf16_flops = 383e12;
    t.peak_fp32_flops = 47.9e12;
    t.memory_bytes = 128 * kGB;
    t.memory_bandwidth = 3.2e12;
  } else if (name == "910b") {
    t.vendor = "ascend";
    t.peak_bf16_flops = 320e12;
    t.peak_fp32_flops = 80e12;
    t.memory_bytes = 64 * kGB;
    t.memory_bandwidth = 1.6e12;
  } else {
    MOTLEY_CHECK(false, "unknown preset device type " + name);
  }
  return t;
}

spec::LinkClass PresetLinkClass(const std::string& name) {
  spec::LinkClass l;
  l.name = name;
  if (name == "nvlink") {
    l = {name, 2e-6, 300e9, 0.8};
  } else if (name == "xgmi") {
    l = {name, 2e-6, 100e9, 0.8};
  } else if (name == "hccs") {
    l = {name, 2e-6, 56e9, 0.8};
  } else if (name == "ib-hdr") {
    l = {name, 5e-6, 25e9, 0.9};
  } else if (name == "roce-100g") {
    l = {name, 8e-6, 12.5e9, 0.85};
  } else if (name == "eth-25g") {
    l = {name, 30e-6, 3.125e9, 0.8};
  } else if (name == "wan-10g") {
    l = {name, 100e-6, 1.25e9, 0.7};
  } else {
    MOTLEY_CHECK(false, "unknown preset link class " + name);
  }
  return l;
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
                      {"ascend", "910b", 80, 8, "hccs", "roce-100g"}},
                     "roce-100g");
}

}  // namespace motley::perf
