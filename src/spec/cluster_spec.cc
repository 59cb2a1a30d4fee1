// See cluster_spec.h. Finalize() is the single place where cluster invariants are checked, both
// for parsed files and for clusters built in code.
#include "spec/cluster_spec.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "spec/limits.h"

namespace motley::spec {
namespace {

class Where {
 public:
  Where(std::string_view file, std::string_view prefix) : file_(file), prefix_(prefix) {}
  Status Error(std::string_view field, std::string_view reason) const {
    if (prefix_.empty())
      return Err(StatusCode::kInvalidArgument, "{}: {}: {}", file_, field, reason);
    return Err(StatusCode::kInvalidArgument, "{}: {}.{}: {}", file_, prefix_, field, reason);
  }

 private:
  std::string_view file_;
  std::string_view prefix_;
};

template <typename T>
std::string NameList(const std::vector<T>& items) {
  std::vector<std::string> names;
  names.reserve(items.size());
  for (const T& item : items) names.push_back(item.name);
  return names.empty() ? std::string("none defined") : fmt::format("{}", fmt::join(names, ", "));
}

bool PositiveFinite(double v) { return std::isfinite(v) && v > 0; }

// Empty when lo <= v <= hi (v finite), else the reason: "must be in <range>, got v <unit>".
std::string OutOfRange(double v, double lo, double hi, std::string_view range,
                       std::string_view unit) {
  if (std::isfinite(v) && v >= lo && v <= hi) return "";
  return fmt::format("must be in {}, got {:g} {}", range, v, unit);
}

constexpr const char* kFlopsRange = "[1 MFLOP/s, 1 EFLOP/s]";
constexpr const char* kBandwidthRange = "[1 kB/s, 1 PB/s]";

// The compute-model fields of a device type (cluster_spec.h).
Status CheckCalibration(const DeviceType& t, const Where& where, const std::string& at) {
  if (!std::isfinite(t.achievable_memory_bandwidth) || t.achievable_memory_bandwidth < 0 ||
      t.achievable_memory_bandwidth > t.memory_bandwidth) {
    return where.Error(at + ".achievable_memory_bandwidth",
                       fmt::format("must be in (0, memory_bandwidth = {}], got {}",
                                   t.memory_bandwidth, t.achievable_memory_bandwidth));
  }
  if (t.compute_units < 0 || t.compute_units > 1 << 20) {
    return where.Error(at + ".compute_units",
                       fmt::format("must be in [1, 2^20], got {}", t.compute_units));
  }
  if (!std::isfinite(t.kernel_launch_s) || t.kernel_launch_s < 0 || t.kernel_launch_s > 1) {
    return where.Error(at + ".kernel_launch",
                       fmt::format("must be in [0, 1] s, got {}", t.kernel_launch_s));
  }
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    const double e = t.GemmEfficiency(p);
    if (!(e > 0 && e <= 1)) {
      return where.Error(fmt::format("{}.gemm_efficiency.{}", at, PrecisionName(p)),
                         fmt::format("must be in (0, 1], got {}", e));
    }
    for (const GemmTile& tile : t.GemmTiles(p)) {
      if (tile.m <= 0 || tile.n <= 0 || tile.m > 4096 || tile.n > 4096) {
        return where.Error(
            fmt::format("{}.gemm_tiles.{}", at, PrecisionName(p)),
            fmt::format("tile sides must be in [1, 4096], got {}x{}", tile.m, tile.n));
      }
    }
  }
  if (!(t.gemm_overlap >= 0 && t.gemm_overlap <= 1)) {
    return where.Error(at + ".gemm_overlap",
                       fmt::format("must be in [0, 1], got {}", t.gemm_overlap));
  }
  if (!(t.attention_efficiency >= 0 && t.attention_efficiency <= 1)) {
    return where.Error(at + ".attention_efficiency",
                       fmt::format("must be in (0, 1], got {}", t.attention_efficiency));
  }
  return Status::Ok();
}

}  // namespace

const std::vector<std::string>& KnownVendors() {
  static const std::vector<std::string> kVendors = {"cpu",  "cuda", "rocm", "ascend",
                                                    "mlu", "musa", "xpu"};
  return kVendors;
}

Status ClusterSpec::Finalize(std::string_view file, std::string_view field_prefix) {
  finalized_ = false;
  const Where where(file, field_prefix);
  if (device_types.empty()) return where.Error("device_types", "at least one device type needed");
  if (nodes.empty()) return where.Error("nodes", "at least one node needed");

  std::map<std::string, int, std::less<>> type_index;
  for (size_t i = 0; i < device_types.size(); ++i) {
    DeviceType& t = device_types[i];
    if (t.peak_fp16_flops == 0) t.peak_fp16_flops = t.peak_bf16_flops;  // built without one
    const std::string at = fmt::format("device_types[{}]", i);
    if (t.name.empty()) return where.Error(at + ".name", "must not be empty");
    if (!type_index.emplace(t.name, static_cast<int>(i)).second) {
      return where.Error(at + ".name", fmt::format("duplicate device type name '{}'", t.name));
    }
    const auto& vendors = KnownVendors();
    if (std::find(vendors.begin(), vendors.end(), t.vendor) == vendors.end()) {
      return where.Error(at + ".vendor", fmt::format("unknown vendor stack '{}' (known: {})",
                                                     t.vendor, fmt::join(vendors, ", ")));
    }
    // Positive, then within the ranges of spec/limits.h.
    const bool emulated = t.emulated.has_value();
    const struct {
      bool present;
      const char* field;
      double value, lo, hi;
      const char* range;
      const char* unit;
    } quantities[] = {
        {true, ".peak_flops.fp32", t.peak_fp32_flops, kMinFlopsPerSecond, kMaxFlopsPerSecond,
         kFlopsRange, "FLOP/s"},
        {true, ".peak_flops.bf16", t.peak_bf16_flops, kMinFlopsPerSecond, kMaxFlopsPerSecond,
         kFlopsRange, "FLOP/s"},
        {true, ".peak_flops.fp16", t.peak_fp16_flops, kMinFlopsPerSecond, kMaxFlopsPerSecond,
         kFlopsRange, "FLOP/s"},
        {true, ".memory", t.memory_bytes, kMinMemoryBytes, kMaxMemoryBytes, "[1 MiB, 1 PiB]",
         "bytes"},
        {true, ".memory_bandwidth", t.memory_bandwidth, kMinBandwidth, kMaxBandwidth,
         kBandwidthRange, "bytes/s"},
        {emulated, ".emulated.flops", emulated ? t.emulated->flops_per_s : 0, kMinFlopsPerSecond,
         kMaxFlopsPerSecond, kFlopsRange, "FLOP/s"},
        {emulated, ".emulated.memory_bandwidth", emulated ? t.emulated->memory_bandwidth : 0,
         kMinBandwidth, kMaxBandwidth, kBandwidthRange, "bytes/s"},
    };
    for (const auto& q : quantities) {
      if (!q.present) continue;
      if (!PositiveFinite(q.value)) {
        return where.Error(at + q.field, fmt::format("must be positive, got {}", q.value));
      }
      const std::string reason = OutOfRange(q.value, q.lo, q.hi, q.range, q.unit);
      if (!reason.empty()) return where.Error(at + q.field, reason);
    }
    MOTLEY_RETURN_IF_ERROR(CheckCalibration(t, where, at));
  }

  std::map<std::string, int, std::less<>> link_index;
  for (size_t i = 0; i < link_classes.size(); ++i) {
    const LinkClass& l = link_classes[i];
    const std::string at = fmt::format("link_classes[{}]", i);
    if (l.name.empty()) return where.Error(at + ".name", "must not be empty");
    if (!link_index.emplace(l.name, static_cast<int>(i)).second) {
      return where.Error(at + ".name", fmt::format("duplicate link class name '{}'", l.name));
    }
    if (!std::isfinite(l.latency_s) || l.latency_s < 0) {
      return where.Error(at + ".latency", fmt::format("must be >= 0, got {}", l.latency_s));
    }
    if (const std::string r = OutOfRange(l.latency_s, 0, kMaxLatencySeconds, "[0 s, 60 s]", "s");
        !r.empty()) {
      return where.Error(at + ".latency", r);
    }
    if (!PositiveFinite(l.bandwidth)) {
      return where.Error(at + ".bandwidth", fmt::format("must be positive, got {}", l.bandwidth));
    }
    if (const std::string r =
            OutOfRange(l.bandwidth, kMinBandwidth, kMaxBandwidth, kBandwidthRange, "bytes/s");
        !r.empty()) {
      return where.Error(at + ".bandwidth", r);
    }
    if (!(l.efficiency > 0 && l.efficiency <= 1)) {
      return where.Error(at + ".efficiency",
                         fmt::format("must be in (0, 1], got {}", l.efficiency));
    }
  }
  auto find_link = [&](const std::string& link_name, const std::string& field) -> Result<int> {
    auto it = link_index.find(link_name);
    if (it == link_index.end()) {
      return where.Error(field, fmt::format("unknown link class '{}' (known: {})", link_name,
                                            NameList(link_classes)));
    }
    return it->second;
  };

  if (static_cast<int64_t>(nodes.size()) > kMaxNodes) {
    return where.Error("nodes", fmt::format("{} nodes, more than {}", nodes.size(), kMaxNodes));
  }
  std::map<std::string, int, std::less<>> node_index;
  node_first_device_.assign(nodes.size(), 0);
  node_intra_link_.assign(nodes.size(), -1);
  devices_.clear();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeSpec& n = nodes[i];
    const std::string at = fmt::format("nodes[{}]", i);
    if (n.name.empty()) return where.Error(at + ".name", "must not be empty");
    if (!node_index.emplace(n.name, static_cast<int>(i)).second) {
      return where.Error(at + ".name", fmt::format("duplicate node name '{}'", n.name));
    }
    auto type_it = type_index.find(n.device_type);
    if (type_it == type_index.end()) {
      return where.Error(at + ".device_type", fmt::format("unknown device type '{}' (known: {})",
                                                          n.device_type, NameList(device_types)));
    }
    if (n.device_count <= 0) {
      return where.Error(at + ".device_count",
                         fmt::format("must be positive, got {}", n.device_count));
    }
    if (static_cast<int64_t>(devices_.size()) + n.device_count > kMaxDevices) {
      return where.Error(at + ".device_count",
                         fmt::format("the cluster would have more than {} devices", kMaxDevices));
    }
    if (!n.intra_link.empty()) {
      MOTLEY_ASSIGN_OR_RETURN(node_intra_link_[i], find_link(n.intra_link, at + ".intra_link"));
    } else if (n.device_count > 1) {
      return where.Error(at + ".intra_link",
                         fmt::format("required: the node has {} devices", n.device_count));
    }
    for (size_t k = 0; k < n.nics.size(); ++k) {
      MOTLEY_RETURN_IF_ERROR(find_link(n.nics[k], fmt::format("{}.nics[{}]", at, k)).status());
    }
    if (!n.nic_of_device.empty()) {
      if (n.nic_of_device.size() != static_cast<size_t>(n.device_count)) {
        return where.Error(at + ".nics", fmt::format("assigns {} devices to cards, the node has {}",
                                                     n.nic_of_device.size(), n.device_count));
      }
      for (size_t j = 0; j < n.nic_of_device.size(); ++j) {
        const int card = n.nic_of_device[j];
        if (card < 0 || static_cast<size_t>(card) >= n.nics.size()) {
          return where.Error(
              at + ".nics",
              fmt::format("device {} uses card {}, the node has {} cards", j, card, n.nics.size()));
        }
      }
    }
    node_first_device_[i] = static_cast<int>(devices_.size());
    for (int local = 0; local < n.device_count; ++local) {
      DeviceInfo d;
      d.id = static_cast<int>(devices_.size());
      d.node = static_cast<int>(i);
      d.local_index = local;
      d.type = type_it->second;
      devices_.push_back(d);
    }
  }

  // Islands: drop previously appended singletons so that Finalize() can run again after edits.
  std::erase_if(islands, [](const IslandSpec& s) { return s.implicit; });
  node_island_.assign(nodes.size(), -1);
  island_link_.clear();
  std::set<std::string, std::less<>> island_names;
  for (size_t i = 0; i < islands.size(); ++i) {
    const IslandSpec& s = islands[i];
    const std::string at = fmt::format("islands[{}]", i);
    if (s.name.empty()) return where.Error(at + ".name", "must not be empty");
    if (!island_names.insert(s.name).second) {
      return where.Error(at + ".name", fmt::format("duplicate island name '{}'", s.name));
    }
    if (s.nodes.empty()) return where.Error(at + ".nodes", "an island needs at least one node");
    for (size_t k = 0; k < s.nodes.size(); ++k) {
      const std::string field = fmt::format("{}.nodes[{}]", at, k);
      auto it = node_index.find(s.nodes[k]);
      if (it == node_index.end()) {
        return where.Error(field, fmt::format("unknown node '{}'", s.nodes[k]));
      }
      if (node_island_[it->second] >= 0) {
        return where.Error(field, fmt::format("node '{}' is already in island '{}'", s.nodes[k],
                                              islands[node_island_[it->second]].name));
      }
      node_island_[it->second] = static_cast<int>(i);
    }
    int link = -1;
    if (!s.link.empty()) {
      MOTLEY_ASSIGN_OR_RETURN(link, find_link(s.link, at + ".link"));
    } else if (s.nodes.size() > 1) {
      return where.Error(at + ".link",
                         fmt::format("required: the island has {} nodes", s.nodes.size()));
    }
    island_link_.push_back(link);
    if (s.capacity != 0) {
      if (const std::string r =
              OutOfRange(s.capacity, kMinBandwidth, kMaxBandwidth, kBandwidthRange, "bytes/s");
          !r.empty()) {
        return where.Error(at + ".capacity", r);
      }
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (node_island_[i] >= 0) continue;
    IslandSpec single;
    single.name = nodes[i].name;
    single.nodes = {nodes[i].name};
    single.implicit = true;
    node_island_[i] = static_cast<int>(islands.size());
    islands.push_back(single);
    island_link_.push_back(-1);
  }
  inter_island_link_index_ = -1;
  if (!inter_island_link.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(inter_island_link_index_,
                            find_link(inter_island_link, "inter_island_link"));
  } else if (islands.size() > 1) {
    return where.Error("inter_island_link",
                       fmt::format("required: the cluster has {} islands (a node outside every "
                                   "declared island is an island of its own)",
                                   islands.size()));
  }
  if (inter_island_capacity != 0) {
    if (const std::string r = OutOfRange(inter_island_capacity, kMinBandwidth, kMaxBandwidth,
                                         kBandwidthRange, "bytes/s");
        !r.empty()) {
      return where.Error("inter_island_capacity", r);
    }
  }
  for (DeviceInfo& d : devices_) d.island = node_island_[d.node];
  finalized_ = true;
  return Status::Ok();
}

int ClusterSpec::num_devices() const {
  MOTLEY_CHECK(finalized_, "ClusterSpec used before Finalize()");
  return static_cast<int>(devices_.size());
}

const std::vector<DeviceInfo>& ClusterSpec::devices() const {
  MOTLEY_CHECK(finalized_, "ClusterSpec used before Finalize()");
  return devices_;
}

const DeviceInfo& ClusterSpec::device(int id) const {
  MOTLEY_CHECK(finalized_, "ClusterSpec used before Finalize()");
  MOTLEY_CHECK(id >= 0 && id < static_cast<int>(devices_.size()), "device id out of range");
  return devices_[static_cast<size_t>(id)];
}

const DeviceType& ClusterSpec::device_type_of(int id) const {
  return device_types[static_cast<size_t>(device(id).type)];
}

const NodeSpec& ClusterSpec::node_of(int id) const {
  return nodes[static_cast<size_t>(device(id).node)];
}

const LinkClass& ClusterSpec::LinkBetween(int a, int b) const {
  MOTLEY_CHECK(a != b, "LinkBetween needs two distinct devices");
  const DeviceInfo& da = device(a);
  const DeviceInfo& db = device(b);
  int link = -1;
  if (da.node == db.node) {
    link = node_intra_link_[static_cast<size_t>(da.node)];
  } else if (da.island == db.island) {
    link = island_link_[static_cast<size_t>(da.island)];
  } else {
    link = inter_island_link_index_;
  }
  MOTLEY_CHECK(link >= 0, "Finalize() guarantees a link between any two devices");
  return link_classes[static_cast<size_t>(link)];
}

const DeviceType* ClusterSpec::FindDeviceType(std::string_view type_name) const {
  for (const DeviceType& t : device_types) {
    if (t.name == type_name) return &t;
  }
  return nullptr;
}

const LinkClass* ClusterSpec::FindLinkClass(std::string_view link_name) const {
  for (const LinkClass& l : link_classes) {
    if (l.name == link_name) return &l;
  }
  return nullptr;
}

int ClusterSpec::FindNode(std::string_view node_name) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].name == node_name) return static_cast<int>(i);
  }
  return -1;
}

std::vector<int> ClusterSpec::DevicesPerType() const {
  std::vector<int> counts(device_types.size(), 0);
  for (const DeviceInfo& d : devices()) ++counts[static_cast<size_t>(d.type)];
  return counts;
}

}  // namespace motley::spec
