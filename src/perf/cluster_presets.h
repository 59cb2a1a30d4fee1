// Clusters generated in code from the presets of spec/device_presets.h, for tests and the scale
// benchmark (the 1,024- and 4,096-device three-type mixed-NIC clusters of issue 5). Pure
// functions; the returned specs are finalized.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "spec/cluster_spec.h"

namespace motley::perf {

// The device and link presets of spec/device_presets.h (the one table, with a source per
// number), for clusters built in code. Unknown names abort (a bug in the caller).
spec::DeviceType PresetDeviceType(const std::string& name);
spec::LinkClass PresetLinkClass(const std::string& name);

// A group of identical nodes of one island.
struct NodeGroup {
  std::string name;
  std::string device_type;   // a preset name
  int nodes = 1;
  int devices_per_node = 8;
  std::string intra_link;    // a preset link name
  std::string island_link;   // the NIC class joining this group's nodes (its island's link)
};

// One island per group, islands joined by `inter_island_link` (a preset name). Errors from
// ClusterSpec::Finalize.
Result<spec::ClusterSpec> MakeCluster(const std::string& name, const std::vector<NodeGroup>& groups,
                                      const std::string& inter_island_link);

// Three device types on mixed NICs, `total_devices` / 8 nodes of 8 (a multiple of 64 expected):
// 1/4 h100 on InfiniBand, 1/4 a100-80g on RoCE, 1/2 mi250x (8 GCDs per node) on 25G Ethernet,
// islands joined by 25G Ethernet. 1,024 and 4,096 are the scale benchmarks.
Result<spec::ClusterSpec> MakeThreeTypeCluster(int total_devices);

// HETHUB-like two-vendor cluster: 16 nodes of 8 a100-80g (InfiniBand) + 80 nodes of 8 ascend-910b
// (RoCE),
// 768 devices, joined by RoCE.
Result<spec::ClusterSpec> MakeTwoVendorCluster768();

}  // namespace motley::perf
