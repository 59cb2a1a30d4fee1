// Device and link presets: the table's completeness (every number has a source; every preset
// makes a valid cluster), cluster files naming presets with overrides, fp16 peaks and the
// calibration fields, their errors, and docs/formats/cluster.md listing exactly the table.
#include "spec/device_presets.h"

#include <gtest/gtest.h>

#include "core/file_util.h"
#include "motley_source_dir.h"

namespace motley::spec {
namespace {

TEST(DevicePresetsTest, EveryNumberHasASourceAndEveryPresetIsValid) {
  ASSERT_GE(DevicePresets().size(), 8u);
  for (const char* name :
       {"a100-40g", "a100-80g", "h100", "h200", "mi250x", "mi300x", "ascend-910b", "cpu"}) {
    EXPECT_NE(FindDevicePreset(name), nullptr) << name;
  }
  for (const DevicePreset& p : DevicePresets()) {
    for (const Sourced* s : {&p.peak_fp32_flops, &p.peak_bf16_flops, &p.peak_fp16_flops,
                             &p.memory_bytes, &p.memory_bandwidth, &p.achievable_memory_bandwidth,
                             &p.compute_units, &p.kernel_launch_s, &p.gemm_efficiency_16bit,
                             &p.gemm_efficiency_fp32, &p.gemm_overlap, &p.attention_efficiency}) {
      EXPECT_FALSE(s->source.empty()) << p.name;
    }
    EXPECT_FALSE(p.gemm_tiles_source.empty()) << p.name;
    ClusterSpec c;
    c.device_types = {ToDeviceType(p)};
    c.nodes = {{"n", "n", std::string(p.name), 1, "", {}, {}}};
    const Status s = c.Finalize("presets", "");
    EXPECT_TRUE(s.ok()) << p.name << ": " << s.message();
    EXPECT_EQ(c.device_types[0].preset, p.name);
  }
  for (const LinkPreset& l : LinkPresets()) {
    EXPECT_FALSE(l.latency_s.source.empty() || l.bandwidth.source.empty() ||
                 l.efficiency.source.empty())
        << l.name;
    const LinkClass link = ToLinkClass(l);
    EXPECT_GT(link.EffectiveBandwidth(), 0) << l.name;
  }
}

TEST(DevicePresetsTest, UnknownNamesListTheKnownOnes) {
  const Result<DeviceType> t = PresetDeviceType("h100x");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("unknown device preset 'h100x'"), std::string::npos);
  EXPECT_NE(t.status().message().find("a100-80g"), std::string::npos);
  EXPECT_FALSE(PresetLinkClass("ib-xdr").ok());
}

constexpr const char* kPresetCluster = R"(
device_types:
  - {preset: h100}
  - preset: a100-80g
    name: a100-40gb-variant
    memory: 40 GB
    memory_bandwidth: 1555 GB/s
    peak_flops: {fp16: 300 TFLOPS}
    kernel_launch: 4 us
    gemm_efficiency: {bf16: 0.7}
    gemm_tiles: [128x64]
link_classes:
  - {preset: nvlink4}
  - {preset: ib-hdr, name: ib, efficiency: 0.5}
nodes:
  - {name: h, device_type: h100, device_count: 8, intra_link: nvlink4, nics: [ib]}
  - {name: a, device_type: a100-40gb-variant, device_count: 8, intra_link: nvlink4, nics: [ib]}
islands:
  - {name: all, nodes: [h, a], link: ib}
)";

TEST(DevicePresetsTest, ClusterFilesNamePresetsAndOverrideFields) {
  const Result<ClusterSpec> r = ParseClusterSpec(kPresetCluster, "p.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const DeviceType& h = r->device_types[0];
  const DeviceType expected_h = *PresetDeviceType("h100");
  EXPECT_EQ(h.name, "h100");  // named after the preset
  EXPECT_EQ(h.preset, "h100");
  EXPECT_EQ(h.vendor, "cuda");
  EXPECT_DOUBLE_EQ(h.peak_bf16_flops, expected_h.peak_bf16_flops);
  EXPECT_DOUBLE_EQ(h.memory_bandwidth, expected_h.memory_bandwidth);
  EXPECT_EQ(h.compute_units, expected_h.compute_units);
  EXPECT_EQ(h.GemmTiles(Precision::kBf16), expected_h.GemmTiles(Precision::kBf16));

  const DeviceType& a = r->device_types[1];
  const DeviceType base = *PresetDeviceType("a100-80g");
  EXPECT_EQ(a.name, "a100-40gb-variant");
  EXPECT_EQ(a.preset, "a100-80g");
  EXPECT_DOUBLE_EQ(a.memory_bytes, 40e9);
  EXPECT_DOUBLE_EQ(a.memory_bandwidth, 1555e9);
  // The achievable bandwidth scales with an overridden raw bandwidth.
  EXPECT_DOUBLE_EQ(a.achievable_memory_bandwidth,
                   base.achievable_memory_bandwidth * 1555e9 / base.memory_bandwidth);
  EXPECT_DOUBLE_EQ(a.peak_fp16_flops, 300e12);  // overridden
  EXPECT_DOUBLE_EQ(a.peak_bf16_flops, 312e12);  // kept
  EXPECT_DOUBLE_EQ(a.kernel_launch_s, 4e-6);
  EXPECT_DOUBLE_EQ(a.GemmEfficiency(Precision::kBf16), 0.7);
  EXPECT_DOUBLE_EQ(a.GemmEfficiency(Precision::kFp16), base.GemmEfficiency(Precision::kFp16));
  EXPECT_EQ(a.GemmTiles(Precision::kFp32), (std::vector<GemmTile>{{128, 64}}));
  EXPECT_EQ(a.compute_units, base.compute_units);

  const LinkClass* ib = r->FindLinkClass("ib");
  ASSERT_NE(ib, nullptr);
  EXPECT_DOUBLE_EQ(ib->bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(ib->efficiency, 0.5);
  EXPECT_DOUBLE_EQ(ib->latency_s, ToLinkClass(*FindLinkPreset("ib-hdr")).latency_s);
  ASSERT_NE(r->FindLinkClass("nvlink4"), nullptr);
}

TEST(DevicePresetsTest, Fp16PeaksAndCalibrationWithoutAPreset) {
  const char* yaml = R"(
device_types:
  - {name: v, vendor: cuda, peak_flops: {fp32: 10 TFLOPS, fp16: 80 TFLOPS}, memory: 16 GB,
     memory_bandwidth: 900 GB/s}
  - {name: b, vendor: cuda, peak_flops: {fp32: 10 TFLOPS, bf16: 100 TFLOPS}, memory: 16 GB,
     memory_bandwidth: 900 GB/s, achievable_memory_bandwidth: 800 GB/s, compute_units: 80,
     gemm_tiles: {fp16: [256x128, 128x128]}, gemm_efficiency: 0.9, gemm_overlap: 0.5,
     attention_efficiency: 0.6}
  - {name: s, vendor: cpu, peak_flops: 1 TFLOPS, memory: 16 GB, memory_bandwidth: 90 GB/s}
nodes:
  - {name: n, device_type: v, device_count: 1}
)";
  const Result<ClusterSpec> r = ParseClusterSpec(yaml, "f.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const DeviceType& v = r->device_types[0];
  EXPECT_DOUBLE_EQ(v.PeakFlops(Precision::kFp16), 80e12);
  EXPECT_DOUBLE_EQ(v.PeakFlops(Precision::kBf16), 10e12);  // missing bf16: the fp32 figure
  EXPECT_DOUBLE_EQ(v.AchievableMemoryBandwidth(), 900e9);  // no calibration: the raw figure
  EXPECT_EQ(v.compute_units, 0);
  EXPECT_DOUBLE_EQ(v.GemmEfficiency(Precision::kFp16), 1.0);
  const DeviceType& b = r->device_types[1];
  EXPECT_DOUBLE_EQ(b.PeakFlops(Precision::kFp16), 100e12);  // missing fp16: the bf16 figure
  EXPECT_DOUBLE_EQ(b.AchievableMemoryBandwidth(), 800e9);
  EXPECT_EQ(b.compute_units, 80);
  EXPECT_EQ(b.GemmTiles(Precision::kFp16), (std::vector<GemmTile>{{256, 128}, {128, 128}}));
  EXPECT_TRUE(b.GemmTiles(Precision::kBf16).empty());
  EXPECT_DOUBLE_EQ(b.GemmEfficiency(Precision::kFp32), 0.9);
  EXPECT_DOUBLE_EQ(b.gemm_overlap, 0.5);
  EXPECT_DOUBLE_EQ(b.AttentionEfficiency(Precision::kBf16), 0.6);
  EXPECT_DOUBLE_EQ(r->device_types[2].PeakFlops(Precision::kFp16), 1e12);  // one rate: all
}

TEST(DevicePresetsTest, BadFieldsNameTheFileAndField) {
  auto error = [](const std::string& type) {
    const std::string yaml =
        "device_types:\n  - " + type + "\nnodes:\n  - {name: n, device_type: x, device_count: 1}\n";
    const Result<ClusterSpec> r = ParseClusterSpec(yaml, "e.yaml");
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(error("{preset: h100x, name: x}")
                .find("e.yaml: device_types[0].preset: unknown "
                      "device preset 'h100x'"),
            std::string::npos);
  EXPECT_NE(error("{preset: h100, name: x, gemm_tiles: [128by64]}")
                .find("e.yaml: device_types[0].gemm_tiles[0]: expected a tile 'MxN'"),
            std::string::npos);
  EXPECT_NE(error("{preset: h100, name: x, gemm_efficiency: 1.5}")
                .find("device_types[0].gemm_efficiency.fp32: must be in (0, 1]"),
            std::string::npos);
  EXPECT_NE(error("{preset: h100, name: x, achievable_memory_bandwidth: 9 TB/s}")
                .find("device_types[0].achievable_memory_bandwidth: must be in (0, "
                      "memory_bandwidth"),
            std::string::npos);
  EXPECT_NE(error("{preset: h100, name: x, peak_flops: {fp8: 1 TFLOPS}}")
                .find("device_types[0].peak_flops.fp8: unknown key (known: fp32, bf16, fp16)"),
            std::string::npos);
  EXPECT_NE(error("{name: x, vendor: cuda, peak_flops: {bf16: 1 TFLOPS}, memory: 1 GB, "
                  "memory_bandwidth: 1 GB/s}")
                .find("device_types[0].peak_flops.fp32: missing required field"),
            std::string::npos);
  EXPECT_NE(error("{name: x, vendor: cuda, peak_flops: 1 TFLOPS, memory_bandwidth: 1 GB/s}")
                .find("device_types[0].memory: missing required field"),
            std::string::npos);
  EXPECT_EQ(error("{preset: h100, name: x}"), "ok");
}

TEST(DevicePresetsTest, ClusterDocListsExactlyTheTable) {
  const Result<std::string> doc =
      ReadFile(std::string(MOTLEY_SOURCE_DIR) + "/docs/formats/cluster.md");
  ASSERT_TRUE(doc.ok()) << doc.status().message();
  const std::string table = PresetsMarkdown();
  EXPECT_NE(doc->find(table), std::string::npos)
      << "docs/formats/cluster.md must contain spec::PresetsMarkdown() verbatim; it is now:\n"
      << table;
}

}  // namespace
}  // namespace motley::spec
