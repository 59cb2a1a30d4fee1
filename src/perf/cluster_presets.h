// Device types and link classes with data-sheet numbers, and clusters generated in code for tests
// and the scale benchmark (the 1,024- and 4,096-device three-type mixed-NIC clusters of issue 5).
// Pure functions; the returned specs are finalized.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "spec/cluster_spec.h"

namespace motley::perf {

// Data-sheet device types: "a100-80g" (NVIDIA A100 SXM 80GB: 312 TFLOP/s bf16 dense, 19.5 fp32,
// 2.039 TB/s), "h100" (H100 SXM: 989 TFLOP/s bf16 dense, 67 fp32, 80 GB, 3.35 TB/s), "mi250x"
// (AMD MI250X: 383 TFLOP/s bf16, 47.9 fp32, 128 GB, 3.2 TB/s), "a100-40g" (312 bf16, 40 GB,
// 1.555 TB/s), "910b" (Ascend 910B as HETHUB uses it: about 320 TFLOP/s fp16/bf16, 64 GB, 1.6
// TB/s; public product figures). Unknown names abort (bug).
spec::DeviceType PresetDeviceType(const std::string& name);

// Link classes: "nvlink" (A100 NVLink 3: 300 GB/s per direction, 2 us, 0.8 efficiency), "xgmi"
// (MI250X Infinity Fabric: 100 GB/s, 2 us, 0.8), "hccs" (56 GB/s, 2 us, 0.8), "ib-hdr" (200 Gb/s,
// 5 us, 0.9), "roce-100g" (100 Gb/s, 8 us, 0.85), "eth-25g" (25 Gb/s, 30 us, 0.8), "wan-10g"
// (10 Gb/s, 100 us, 0.7: a slow link between islands). Efficiencies are assumptions.
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
// 1/4 h100 on InfiniBand, 1/4 a100-80g on RoCE, 1/2 mi250x on 25G Ethernet, islands joined by
// 25G Ethernet. 1,024 and 4,096 are the scale benchmarks.
Result<spec::ClusterSpec> MakeThreeTypeCluster(int total_devices);

// HETHUB-like two-vendor cluster: 16 nodes of 8 a100-80g (InfiniBand) + 80 nodes of 8 910b (RoCE),
// 768 devices, joined by RoCE.
Result<spec::ClusterSpec> MakeTwoVendorCluster768();

}  // namespace motley::perf
