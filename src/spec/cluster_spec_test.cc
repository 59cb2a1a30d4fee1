// ClusterSpec: parsing, the flat device list, LinkBetween, repeat expansion, and Finalize on a
// cluster built in code.
#include "spec/cluster_spec.h"

#include <gtest/gtest.h>

namespace motley::spec {
namespace {

constexpr const char* kTwoIslands = R"(
name: t
device_types:
  - {name: a100, vendor: cuda, peak_flops: {fp32: 19.5 TFLOPS, bf16: 312 TFLOPS}, memory: 80 GiB,
     memory_bandwidth: 2 TB/s}
  - {name: mi250, vendor: rocm, peak_flops: 362 TFLOPS, memory: 128 GB, memory_bandwidth: 3.2 TB/s,
     emulated: {flops: 1 GFLOPS, memory_bandwidth: 1 GB/s}}
link_classes:
  - {name: nvlink, latency: 2 us, bandwidth: 300 GB/s, efficiency: 0.8}
  - {name: ib, latency: 5 us, bandwidth: 200 Gbit/s}
  - {name: eth, latency: 30 us, bandwidth: 25 Gbit/s, efficiency: 0.7}
nodes:
  - {name: a, repeat: 2, device_type: a100, device_count: 4, intra_link: nvlink, nics: [ib, eth]}
  - {name: m, device_type: mi250, device_count: 2, intra_link: nvlink, nics: [ib]}
  - {name: solo, device_type: mi250, device_count: 1}
islands:
  - {name: left, nodes: [a], link: ib}
inter_island_link: eth
)";

TEST(ClusterSpecTest, ParsesFieldsUnitsAndRepeat) {
  Result<ClusterSpec> r = ParseClusterSpec(kTwoIslands, "t.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const ClusterSpec& c = *r;
  EXPECT_EQ(c.name, "t");
  ASSERT_EQ(c.nodes.size(), 4u);
  EXPECT_EQ(c.nodes[0].name, "a-0");
  EXPECT_EQ(c.nodes[1].name, "a-1");
  EXPECT_EQ(c.nodes[1].group, "a");
  EXPECT_EQ(c.nodes[0].nics, (std::vector<std::string>{"ib", "eth"}));
  EXPECT_EQ(c.num_devices(), 4 + 4 + 2 + 1);
  EXPECT_DOUBLE_EQ(c.device_types[0].PeakFlops(Precision::kBf16), 312e12);
  EXPECT_DOUBLE_EQ(c.device_types[0].PeakFlops(Precision::kFp32), 19.5e12);
  EXPECT_DOUBLE_EQ(c.device_types[1].peak_fp32_flops, 362e12);  // scalar: both precisions
  EXPECT_DOUBLE_EQ(c.device_types[0].memory_bytes, 80.0 * 1024 * 1024 * 1024);
  EXPECT_FALSE(c.device_types[0].is_emulated());
  ASSERT_TRUE(c.device_types[1].is_emulated());
  EXPECT_DOUBLE_EQ(c.device_types[1].emulated->flops_per_s, 1e9);
  EXPECT_DOUBLE_EQ(c.link_classes[1].bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(c.link_classes[1].efficiency, 1.0);
  EXPECT_DOUBLE_EQ(c.link_classes[0].latency_s, 2e-6);
  EXPECT_DOUBLE_EQ(c.link_classes[2].EffectiveBandwidth(), 25e9 / 8 * 0.7);
  EXPECT_DOUBLE_EQ(c.link_classes[1].TransferTime(25e9), 5e-6 + 1.0);
  EXPECT_EQ(c.DevicesPerType(), (std::vector<int>{8, 3}));
}

TEST(ClusterSpecTest, FlatDeviceListAndLinkBetween) {
  Result<ClusterSpec> r = ParseClusterSpec(kTwoIslands, "t.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const ClusterSpec& c = *r;
  const DeviceInfo& d5 = c.device(5);
  EXPECT_EQ(d5.node, 1);
  EXPECT_EQ(d5.local_index, 1);
  EXPECT_EQ(c.device_type_of(5).name, "a100");
  EXPECT_EQ(c.device_type_of(9).name, "mi250");
  EXPECT_EQ(c.node_of(10).name, "solo");
  for (int id = 0; id < c.num_devices(); ++id) EXPECT_EQ(c.devices()[id].id, id);
  EXPECT_EQ(c.LinkBetween(0, 3).name, "nvlink");   // same node
  EXPECT_EQ(c.LinkBetween(0, 4).name, "ib");       // same island "left"
  EXPECT_EQ(c.LinkBetween(4, 8).name, "eth");      // a-1 vs m (own island)
  EXPECT_EQ(c.LinkBetween(8, 9).name, "nvlink");   // inside m
  EXPECT_EQ(c.LinkBetween(9, 10).name, "eth");     // m vs solo: two singleton islands
  EXPECT_EQ(c.LinkBetween(10, 0).name, "eth");
  // Islands: "left" plus the singletons of m and solo.
  EXPECT_EQ(c.islands.size(), 3u);
  EXPECT_TRUE(c.islands[1].implicit);
}

ClusterSpec TwoNodeCluster() {
  ClusterSpec c;
  DeviceType cpu;
  cpu.name = "cpu";
  cpu.vendor = "cpu";
  cpu.peak_fp32_flops = cpu.peak_bf16_flops = 1e9;
  cpu.memory_bytes = 1e9;
  cpu.memory_bandwidth = 1e9;
  c.device_types.push_back(cpu);
  c.link_classes.push_back({"shm", 1e-6, 1e9, 1.0});
  c.link_classes.push_back({"net", 1e-5, 1e8, 0.5});
  c.nodes.push_back({"n0", "n0", "cpu", 2, "shm", {}, {}});
  c.nodes.push_back({"n1", "n1", "cpu", 2, "shm", {"net"}, {}});
  c.inter_island_link = "net";
  return c;
}

// Cards assigned to devices, an island fabric's and the inter-island network's capacity
// (docs/formats/cluster.md, "Network resources").
TEST(ClusterSpecTest, CardsServingDevicesAndAggregateCapacities) {
  Result<ClusterSpec> c = ParseClusterSpec(R"(
device_types:
  - {name: g, vendor: cuda, peak_flops: 100 TFLOPS, memory: 80 GiB, memory_bandwidth: 2 TB/s}
link_classes:
  - {name: fast, latency: 1 us, bandwidth: 100 GB/s}
  - {name: ib, latency: 5 us, bandwidth: 200 Gbit/s}
nodes:
  - name: dgx
    repeat: 2
    device_type: g
    device_count: 4
    intra_link: fast
    nics: [{link: ib, devices: [0, 2]}, {link: ib, devices: [3, 1]}]
  - {name: other, device_type: g, device_count: 1, nics: [ib]}
islands:
  - {name: rack, nodes: [dgx], link: ib, capacity: 1.6 Tbit/s}
inter_island_link: ib
inter_island_capacity: 50 GB/s
)",
                                           "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->nodes.size(), 3U);
  EXPECT_EQ(c->nodes[1].nics, (std::vector<std::string>{"ib", "ib"}));
  EXPECT_EQ(c->nodes[1].nic_of_device, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_TRUE(c->nodes[2].nic_of_device.empty());
  EXPECT_DOUBLE_EQ(c->islands[0].capacity, 200e9);
  EXPECT_DOUBLE_EQ(c->islands.back().capacity, 0.0);  // the implicit island of node `other`
  EXPECT_DOUBLE_EQ(c->inter_island_capacity, 50e9);
}

TEST(ClusterSpecTest, FinalizeInCodeAndAgainAfterEdits) {
  ClusterSpec c = TwoNodeCluster();
  ASSERT_TRUE(c.Finalize().ok()) << c.Finalize().message();
  EXPECT_EQ(c.num_devices(), 4);
  EXPECT_EQ(c.LinkBetween(1, 2).name, "net");
  c.islands.insert(c.islands.begin(), IslandSpec{"both", {"n0", "n1"}, "shm", false});
  ASSERT_TRUE(c.Finalize().ok()) << c.Finalize().message();
  EXPECT_EQ(c.islands.size(), 1u);  // the old singletons are dropped
  EXPECT_EQ(c.LinkBetween(1, 2).name, "shm");
  c.nodes[1].device_count = 3;
  ASSERT_TRUE(c.Finalize().ok());
  EXPECT_EQ(c.num_devices(), 5);
}

TEST(ClusterSpecTest, FinalizeErrorsNameFileAndField) {
  ClusterSpec c = TwoNodeCluster();
  c.nodes[1].device_type = "h100x";
  Status s = c.Finalize("x.yaml", "cluster");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "x.yaml: cluster.nodes[1].device_type: unknown device type 'h100x' (known: cpu)");
  EXPECT_FALSE(c.finalized());

  c = TwoNodeCluster();
  c.inter_island_link.clear();
  s = c.Finalize("c.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("c.yaml: inter_island_link: required", 0), 0u) << s.message();

  c = TwoNodeCluster();
  c.link_classes[1].efficiency = 1.5;
  s = c.Finalize("c.yaml");
  EXPECT_EQ(s.message(), "c.yaml: link_classes[1].efficiency: must be in (0, 1], got 1.5");

  c = TwoNodeCluster();
  c.nodes[1].name = "n0";
  s = c.Finalize("c.yaml");
  EXPECT_EQ(s.message(), "c.yaml: nodes[1].name: duplicate node name 'n0'");
}

TEST(ClusterSpecTest, KnownVendorsListTheStacks) {
  const auto& v = KnownVendors();
  for (const char* name : {"cpu", "cuda", "rocm", "ascend"}) {
    EXPECT_NE(std::find(v.begin(), v.end(), name), v.end()) << name;
  }
}

}  // namespace
}  // namespace motley::spec
