// ClusterSpec: the devices, nodes, islands and link classes of a (possibly heterogeneous, possibly
// emulated) cluster, read from YAML (docs/formats/cluster.md), plus lookups that the predictor,
// simulator and runtime share: a flat device list (global id -> node, local index, type) and
// LinkBetween(a, b). Plain value type; const methods are thread-safe once Finalize() succeeded.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "spec/precision.h"

namespace motley::spec {

// The speed an emulated device pretends to have (docs/architecture.md §6): an op is charged
// max(FLOPs / flops_per_s, bytes / memory_bandwidth).
struct EmulatedProfile {
  FlopsPerSecond flops_per_s = 0;
  BytesPerSecond memory_bandwidth = 0;
};

// One output tile of a GEMM kernel (rows x columns of C) that one compute unit computes.
struct GemmTile {
  int m = 0;
  int n = 0;
  bool operator==(const GemmTile&) const = default;
};

// A device type's datasheet figures plus the calibration the compute model reads
// (perf/compute_model.h). Device presets (spec/device_presets.h) fill every field with a
// source; a type written without a preset defaults the calibration to an ideal roofline on the
// figures given (full efficiency, no launch cost, no quantization, the raw memory bandwidth).
struct DeviceType {
  std::string name;                  // e.g. "a100", "mi250", "cpu-fast"
  std::string vendor;                // vendor stack: one of KnownVendors() ("cpu", "cuda", ...)
  std::string preset;                // the preset it started from ("" = none)
  FlopsPerSecond peak_fp32_flops = 0;
  FlopsPerSecond peak_bf16_flops = 0;
  FlopsPerSecond peak_fp16_flops = 0;  // left 0 in code: Finalize() takes the bf16 figure
  Bytes memory_bytes = 0;            // device memory capacity (enforced when emulated)
  BytesPerSecond memory_bandwidth = 0;
  // Compute-model calibration.
  BytesPerSecond achievable_memory_bandwidth = 0;  // what streaming kernels reach; 0 = raw
  int compute_units = 0;        // SMs / CUs / cores a GEMM spreads its tiles over; 0 = none
  Seconds kernel_launch_s = 0;  // fixed cost of every kernel
  // Fraction of PeakFlops(p) one compute unit sustains inside a GEMM tile, per precision.
  std::array<double, kNumPrecisions> gemm_efficiency = {1.0, 1.0, 1.0};
  // Output tiles the GEMM library chooses from, per precision (it takes the fastest for a
  // shape); empty = no tile or wave quantization.
  std::array<std::vector<GemmTile>, kNumPrecisions> gemm_tiles;
  // Fraction of the shorter of a GEMM's compute and memory times that hides under the longer
  // (1: a pure roofline, max of the two; 0: they add up).
  double gemm_overlap = 1.0;
  // Fraction of PeakFlops(p) a fused (flash) attention kernel sustains; 0 = gemm_efficiency.
  double attention_efficiency = 0;
  std::optional<EmulatedProfile> emulated;  // set: run on the emulated backend at this speed

  FlopsPerSecond PeakFlops(Precision p) const {
    return p == Precision::kFp32 ? peak_fp32_flops
                                 : (p == Precision::kBf16 ? peak_bf16_flops : peak_fp16_flops);
  }
  double GemmEfficiency(Precision p) const { return gemm_efficiency[PrecisionIndex(p)]; }
  const std::vector<GemmTile>& GemmTiles(Precision p) const {
    return gemm_tiles[PrecisionIndex(p)];
  }
  double AttentionEfficiency(Precision p) const {
    return attention_efficiency > 0 ? attention_efficiency : GemmEfficiency(p);
  }
  BytesPerSecond AchievableMemoryBandwidth() const {
    return achievable_memory_bandwidth > 0 ? achievable_memory_bandwidth : memory_bandwidth;
  }
  bool is_emulated() const { return emulated.has_value(); }
};

// One kind of path between devices (alpha-beta model): time(S) = latency_s + S / (bandwidth *
// efficiency).
struct LinkClass {
  std::string name;                  // e.g. "nvlink", "ib-hdr", "eth-25g"
  Seconds latency_s = 0;
  BytesPerSecond bandwidth = 0;      // nominal, bytes/s
  double efficiency = 1.0;           // achievable fraction of `bandwidth`, in (0, 1]

  BytesPerSecond EffectiveBandwidth() const { return bandwidth * efficiency; }
  Seconds TransferTime(Bytes bytes) const { return latency_s + bytes / EffectiveBandwidth(); }
};

struct NodeSpec {
  std::string name;                  // unique; "group-k" when expanded from `repeat:`
  std::string group;                 // the YAML entry's name (== name without `repeat:`)
  std::string device_type;           // a DeviceType name
  int device_count = 0;
  std::string intra_link;            // link class between devices of this node ("" if 1 device)
  std::vector<std::string> nics;     // link classes of the network cards (may be empty)
  // Which card each device uses (by local index: an index into `nics`), when the cluster file
  // assigns devices to cards (nodes[].nics[].devices); empty: the cards are pooled, every device
  // using all of them (perf/network.h).
  std::vector<int> nic_of_device;
};

struct IslandSpec {
  std::string name;
  std::vector<std::string> nodes;    // node names (a `repeat:` group name is expanded on parse)
  std::string link;                  // link class between nodes of this island
  // Aggregate capacity of the island's fabric, shared by every transfer between two of its nodes
  // (perf/network.h); 0: not given (each node's cards are its uplinks, the fabric adds nothing).
  BytesPerSecond capacity = 0;
  bool implicit = false;             // a one-node island appended by Finalize()
};

// One device of the flat list; global ids are 0..N-1 in node order, then local index.
struct DeviceInfo {
  int id = 0;
  int node = 0;                      // index into ClusterSpec::nodes
  int local_index = 0;               // index inside its node
  int type = 0;                      // index into ClusterSpec::device_types
  int island = 0;                    // index into ClusterSpec::islands (after Finalize)
};

class ClusterSpec {
 public:
  std::string name;
  std::vector<DeviceType> device_types;
  std::vector<LinkClass> link_classes;
  std::vector<NodeSpec> nodes;
  // Declared islands. Finalize() appends a singleton island (named after the node) for every node
  // that no declared island lists.
  std::vector<IslandSpec> islands;
  std::string inter_island_link;     // link class between islands; required when > 1 island
  // Aggregate capacity of the network between islands, shared by every transfer between two
  // islands (perf/network.h); 0: not given.
  BytesPerSecond inter_island_capacity = 0;

  // Validates names, sizes and references and builds the device index. Call after editing the
  // fields; the parse functions return finalized specs. Messages read "<file>: <prefix>.<field>:
  // <reason>", e.g. Finalize("run.yaml", "cluster") -> "run.yaml: cluster.nodes[2].device_type:
  // unknown device type 'h100x' (known: a100, mi250)". Node indices are those after `repeat:`
  // expansion.
  Status Finalize(std::string_view file = "cluster", std::string_view field_prefix = "");
  bool finalized() const { return finalized_; }

  // All accessors below require finalized() (checked).
  int num_devices() const;
  const std::vector<DeviceInfo>& devices() const;
  const DeviceInfo& device(int id) const;
  const DeviceType& device_type_of(int id) const;
  const NodeSpec& node_of(int id) const;
  // The link class joining two distinct devices: same node -> the node's intra_link; same island ->
  // the island's link; else inter_island_link. MOTLEY_CHECKs a != b and valid ids.
  const LinkClass& LinkBetween(int a, int b) const;
  // Lookups by name; nullptr / -1 when absent.
  const DeviceType* FindDeviceType(std::string_view type_name) const;
  const LinkClass* FindLinkClass(std::string_view link_name) const;
  int FindNode(std::string_view node_name) const;
  // Device count per device type name, in device_types order.
  std::vector<int> DevicesPerType() const;

 private:
  bool finalized_ = false;
  std::vector<DeviceInfo> devices_;
  std::vector<int> node_first_device_;
  std::vector<int> node_island_;
  std::vector<int> node_intra_link_;   // -1 when the node has no intra link
  std::vector<int> island_link_;       // -1 when the island has no link (one node)
  int inter_island_link_index_ = -1;
};

// Vendor stacks a device type may name ("cpu", "cuda", "rocm", "ascend", "mlu", "musa", "xpu").
const std::vector<std::string>& KnownVendors();

// Reads a cluster file (docs/formats/cluster.md). Errors: "<path>: <field>: <reason>".
Result<ClusterSpec> LoadClusterSpec(const std::string& path);
// Parses YAML text; `name_for_errors` plays the role of the file name in messages.
Result<ClusterSpec> ParseClusterSpec(std::string_view yaml_text, std::string_view name_for_errors);

}  // namespace motley::spec
