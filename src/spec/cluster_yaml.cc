// Cluster YAML (docs/formats/cluster.md) -> ClusterSpec. References are checked here, with the
// indices of the YAML entries, before `repeat:` expansion; ClusterSpec::Finalize() checks the rest.
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/file_util.h"
#include "spec/cluster_spec.h"
#include "spec/limits.h"
#include "spec/device_presets.h"
#include "spec/spec_yaml.h"
#include "spec/yaml_reader.h"

namespace motley::spec {
namespace internal {
namespace {

Result<std::vector<YAML::Node>> ReadList(const MapReader& map, std::string_view key,
                                         bool required) {
  std::vector<YAML::Node> items;
  if (!map.Has(key)) {
    if (required) return map.MissingError(key);
    return items;
  }
  const YAML::Node node = map.Get(key);
  if (!node.IsSequence()) return map.Error(key, "expected a list");
  for (const auto& item : node) items.push_back(item);
  return items;
}

// A quantity read into *out only when the key is present.
Status OptQuantity(const MapReader& map, std::string_view key, QuantityKind kind, double* out) {
  if (!map.Has(key)) return Status::Ok();
  MOTLEY_ASSIGN_OR_RETURN(*out, map.Quantity(key, kind));
  return Status::Ok();
}

constexpr Precision kPrecisions[] = {Precision::kFp32, Precision::kBf16, Precision::kFp16};

// `peak_flops`: one rate for every precision, or {fp32, bf16, fp16}. Without a preset fp32 is
// required, a missing bf16 takes fp32's value and a missing fp16 takes bf16's; over a preset
// each given key replaces the preset's value.
Status ParsePeakFlops(const MapReader& map, bool has_preset, DeviceType* t) {
  if (!map.Has("peak_flops")) {
    return has_preset ? Status::Ok() : map.MissingError("peak_flops");
  }
  const YAML::Node node = map.Get("peak_flops");
  if (!node.IsMap()) {
    MOTLEY_ASSIGN_OR_RETURN(const double all,
                            map.Quantity("peak_flops", QuantityKind::kFlopsPerSecond));
    t->peak_fp32_flops = t->peak_bf16_flops = t->peak_fp16_flops = all;
    return Status::Ok();
  }
  MOTLEY_ASSIGN_OR_RETURN(const MapReader f,
                          MapReader::Make(node, map.file(), map.PathOf("peak_flops")));
  MOTLEY_RETURN_IF_ERROR(f.CheckKeys({"fp32", "bf16", "fp16"}));
  if (!has_preset) {
    MOTLEY_ASSIGN_OR_RETURN(t->peak_fp32_flops, f.Quantity("fp32", QuantityKind::kFlopsPerSecond));
    t->peak_bf16_flops = t->peak_fp32_flops;
  }
  MOTLEY_RETURN_IF_ERROR(
      OptQuantity(f, "fp32", QuantityKind::kFlopsPerSecond, &t->peak_fp32_flops));
  MOTLEY_RETURN_IF_ERROR(
      OptQuantity(f, "bf16", QuantityKind::kFlopsPerSecond, &t->peak_bf16_flops));
  if (!has_preset) t->peak_fp16_flops = t->peak_bf16_flops;
  return OptQuantity(f, "fp16", QuantityKind::kFlopsPerSecond, &t->peak_fp16_flops);
}

// `gemm_efficiency`: a number for every precision, or {fp32, bf16, fp16} (keys optional).
Status ParseGemmEfficiency(const MapReader& map, DeviceType* t) {
  if (!map.Has("gemm_efficiency")) return Status::Ok();
  const YAML::Node node = map.Get("gemm_efficiency");
  if (!node.IsMap()) {
    double all = 0;
    MOTLEY_RETURN_IF_ERROR(map.OptDouble("gemm_efficiency", &all));
    t->gemm_efficiency.fill(all);
    return Status::Ok();
  }
  MOTLEY_ASSIGN_OR_RETURN(const MapReader e,
                          MapReader::Make(node, map.file(), map.PathOf("gemm_efficiency")));
  MOTLEY_RETURN_IF_ERROR(e.CheckKeys({"fp32", "bf16", "fp16"}));
  for (Precision p : kPrecisions) {
    MOTLEY_RETURN_IF_ERROR(e.OptDouble(PrecisionName(p), &t->gemm_efficiency[PrecisionIndex(p)]));
  }
  return Status::Ok();
}

// A list of "MxN" tiles, e.g. [256x128, 128x128].
Result<std::vector<GemmTile>> ParseTiles(const YAML::Node& node, const std::string& file,
                                         const std::string& path) {
  if (!node.IsSequence()) {
    return FieldError(file, path, "expected a list of tiles such as [256x128, 128x64]");
  }
  std::vector<GemmTile> tiles;
  for (size_t k = 0; k < node.size(); ++k) {
    const std::string at = IndexPath(path, k);
    MOTLEY_ASSIGN_OR_RETURN(const std::string text, ReadString(node[k], file, at));
    GemmTile tile;
    char x = 0;
    char rest = 0;
    if (std::sscanf(text.c_str(), "%d%c%d%c", &tile.m, &x, &tile.n, &rest) != 3 || x != 'x' ||
        tile.m <= 0 || tile.n <= 0) {
      return FieldError(file, at,
                        fmt::format("expected a tile 'MxN' such as 128x64, got '{}'", text));
    }
    tiles.push_back(tile);
  }
  return tiles;
}

// `gemm_tiles`: one list for every precision, or {fp32: [...], bf16: [...], fp16: [...]}.
Status ParseGemmTiles(const MapReader& map, DeviceType* t) {
  if (!map.Has("gemm_tiles")) return Status::Ok();
  const YAML::Node node = map.Get("gemm_tiles");
  if (!node.IsMap()) {
    MOTLEY_ASSIGN_OR_RETURN(const std::vector<GemmTile> all,
                            ParseTiles(node, map.file(), map.PathOf("gemm_tiles")));
    t->gemm_tiles.fill(all);
    return Status::Ok();
  }
  MOTLEY_ASSIGN_OR_RETURN(const MapReader g,
                          MapReader::Make(node, map.file(), map.PathOf("gemm_tiles")));
  MOTLEY_RETURN_IF_ERROR(g.CheckKeys({"fp32", "bf16", "fp16"}));
  for (Precision p : kPrecisions) {
    if (!g.Has(PrecisionName(p))) continue;
    MOTLEY_ASSIGN_OR_RETURN(
        t->gemm_tiles[PrecisionIndex(p)],
        ParseTiles(g.Get(PrecisionName(p)), map.file(), g.PathOf(PrecisionName(p))));
  }
  return Status::Ok();
}

// One `device_types:` entry: a preset (docs/formats/cluster.md lists them) with any field
// overridden, or every required field written out.
Result<DeviceType> ParseDeviceType(const YAML::Node& node, const std::string& file,
                                   const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(node, file, path));
  MOTLEY_RETURN_IF_ERROR(map.CheckKeys(
      {"preset", "name", "vendor", "peak_flops", "memory", "memory_bandwidth",
       "achievable_memory_bandwidth", "compute_units", "kernel_launch", "gemm_efficiency",
       "gemm_tiles", "gemm_overlap", "attention_efficiency", "emulated"}));
  DeviceType t;
  const bool has_preset = map.Has("preset");
  if (has_preset) {
    MOTLEY_ASSIGN_OR_RETURN(const std::string preset, map.String("preset"));
    Result<DeviceType> from = PresetDeviceType(preset);
    if (!from.ok()) return map.Error("preset", from.status().message());
    t = *std::move(from);
    MOTLEY_RETURN_IF_ERROR(map.OptString("name", &t.name));
    MOTLEY_RETURN_IF_ERROR(map.OptString("vendor", &t.vendor));
  } else {
    MOTLEY_ASSIGN_OR_RETURN(t.name, map.String("name"));
    MOTLEY_ASSIGN_OR_RETURN(t.vendor, map.String("vendor"));
  }
  MOTLEY_RETURN_IF_ERROR(ParsePeakFlops(map, has_preset, &t));
  if (has_preset) {
    MOTLEY_RETURN_IF_ERROR(OptQuantity(map, "memory", QuantityKind::kBytes, &t.memory_bytes));
    MOTLEY_RETURN_IF_ERROR(
        OptQuantity(map, "memory_bandwidth", QuantityKind::kBytesPerSecond, &t.memory_bandwidth));
  } else {
    MOTLEY_ASSIGN_OR_RETURN(t.memory_bytes, map.Quantity("memory", QuantityKind::kBytes));
    MOTLEY_ASSIGN_OR_RETURN(t.memory_bandwidth,
                            map.Quantity("memory_bandwidth", QuantityKind::kBytesPerSecond));
  }
  const BytesPerSecond preset_achievable = t.achievable_memory_bandwidth;
  MOTLEY_RETURN_IF_ERROR(OptQuantity(map, "achievable_memory_bandwidth",
                                     QuantityKind::kBytesPerSecond,
                                     &t.achievable_memory_bandwidth));
  // A new raw bandwidth over a preset scales the preset's achievable one with it, unless given.
  if (has_preset && map.Has("memory_bandwidth") && !map.Has("achievable_memory_bandwidth")) {
    const DevicePreset* p = FindDevicePreset(t.preset);
    t.achievable_memory_bandwidth =
        preset_achievable * t.memory_bandwidth / p->memory_bandwidth.value;
  }
  MOTLEY_RETURN_IF_ERROR(map.OptInt("compute_units", &t.compute_units));
  MOTLEY_RETURN_IF_ERROR(
      OptQuantity(map, "kernel_launch", QuantityKind::kSeconds, &t.kernel_launch_s));
  MOTLEY_RETURN_IF_ERROR(ParseGemmEfficiency(map, &t));
  MOTLEY_RETURN_IF_ERROR(ParseGemmTiles(map, &t));
  MOTLEY_RETURN_IF_ERROR(map.OptDouble("gemm_overlap", &t.gemm_overlap));
  MOTLEY_RETURN_IF_ERROR(map.OptDouble("attention_efficiency", &t.attention_efficiency));
  if (map.Has("emulated")) {
    MOTLEY_ASSIGN_OR_RETURN(const MapReader e,
                            MapReader::Make(map.Get("emulated"), file, map.PathOf("emulated")));
    MOTLEY_RETURN_IF_ERROR(e.CheckKeys({"flops", "memory_bandwidth"}));
    EmulatedProfile profile;
    MOTLEY_ASSIGN_OR_RETURN(profile.flops_per_s,
                            e.Quantity("flops", QuantityKind::kFlopsPerSecond));
    MOTLEY_ASSIGN_OR_RETURN(profile.memory_bandwidth,
                            e.Quantity("memory_bandwidth", QuantityKind::kBytesPerSecond));
    t.emulated = profile;
  }
  return t;
}

// One `link_classes:` entry: a preset with any field overridden, or every field written out.
Result<LinkClass> ParseLinkClass(const YAML::Node& node, const std::string& file,
                                 const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(node, file, path));
  MOTLEY_RETURN_IF_ERROR(map.CheckKeys({"preset", "name", "latency", "bandwidth", "efficiency"}));
  LinkClass l;
  if (map.Has("preset")) {
    MOTLEY_ASSIGN_OR_RETURN(const std::string preset, map.String("preset"));
    Result<LinkClass> from = PresetLinkClass(preset);
    if (!from.ok()) return map.Error("preset", from.status().message());
    l = *std::move(from);
    MOTLEY_RETURN_IF_ERROR(map.OptString("name", &l.name));
    MOTLEY_RETURN_IF_ERROR(OptQuantity(map, "latency", QuantityKind::kSeconds, &l.latency_s));
    MOTLEY_RETURN_IF_ERROR(
        OptQuantity(map, "bandwidth", QuantityKind::kBytesPerSecond, &l.bandwidth));
  } else {
    MOTLEY_ASSIGN_OR_RETURN(l.name, map.String("name"));
    MOTLEY_ASSIGN_OR_RETURN(l.latency_s, map.Quantity("latency", QuantityKind::kSeconds));
    MOTLEY_ASSIGN_OR_RETURN(l.bandwidth, map.Quantity("bandwidth", QuantityKind::kBytesPerSecond));
  }
  MOTLEY_RETURN_IF_ERROR(map.OptDouble("efficiency", &l.efficiency));
  return l;
}

struct Names {
  std::set<std::string, std::less<>> types;
  std::set<std::string, std::less<>> links;
  std::string types_list;
  std::string links_list;
};

Status CheckLink(const Names& names, const std::string& link, const std::string& file,
                 const std::string& path) {
  if (names.links.count(link) == 0) {
    return FieldError(file, path, fmt::format("unknown link class '{}' (known: {})", link,
                                              names.links_list));
  }
  return Status::Ok();
}

// `nodes[].nics`: link class names (the cards are pooled), or mappings {link: NAME, devices:
// [local indices]} that assign every device of the node to exactly one card.
Status ParseNics(const MapReader& map, const Names& names, NodeSpec* n) {
  const std::string& file = map.file();
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<YAML::Node> nics, ReadList(map, "nics", false));
  bool assigned = false;
  for (size_t k = 0; k < nics.size(); ++k) {
    const std::string at = IndexPath(map.PathOf("nics"), k);
    if (k == 0) assigned = nics[k].IsMap();
    if (nics[k].IsMap() != assigned) {
      return FieldError(file, at,
                        "either every card names the devices it serves ({link: NAME, devices: "
                        "[...]}) or none does (a link class name: the cards are pooled)");
    }
    if (!assigned) {
      MOTLEY_ASSIGN_OR_RETURN(std::string nic, ReadString(nics[k], file, at));
      MOTLEY_RETURN_IF_ERROR(CheckLink(names, nic, file, at));
      n->nics.push_back(nic);
      continue;
    }
    MOTLEY_ASSIGN_OR_RETURN(const MapReader card, MapReader::Make(nics[k], file, at));
    MOTLEY_RETURN_IF_ERROR(card.CheckKeys({"link", "devices"}));
    MOTLEY_ASSIGN_OR_RETURN(std::string nic, card.String("link"));
    MOTLEY_RETURN_IF_ERROR(CheckLink(names, nic, file, card.PathOf("link")));
    n->nics.push_back(nic);
    MOTLEY_ASSIGN_OR_RETURN(const std::vector<YAML::Node> devices, ReadList(card, "devices", true));
    if (devices.empty()) return card.Error("devices", "a card serves at least one device");
    if (n->nic_of_device.empty()) n->nic_of_device.assign(static_cast<size_t>(n->device_count), -1);
    for (size_t j = 0; j < devices.size(); ++j) {
      const std::string dat = IndexPath(card.PathOf("devices"), j);
      MOTLEY_ASSIGN_OR_RETURN(const int64_t local, ReadInt(devices[j], file, dat));
      if (local < 0 || local >= n->device_count) {
        return FieldError(file, dat,
                          fmt::format("device {} is not on the node (local indices 0..{})", local,
                                      n->device_count - 1));
      }
      int& card_of = n->nic_of_device[static_cast<size_t>(local)];
      if (card_of >= 0) {
        return FieldError(file, dat, fmt::format("device {} already uses card {}", local, card_of));
      }
      card_of = static_cast<int>(k);
    }
  }
  for (size_t j = 0; j < n->nic_of_device.size(); ++j) {
    if (n->nic_of_device[j] < 0) {
      return map.Error("nics", fmt::format("device {} of the node uses no card (every device "
                                           "needs one when the cards name their devices)",
                                           j));
    }
  }
  return Status::Ok();
}

// Parses one `nodes:` entry into one node, or `repeat` nodes named "<name>-<k>".
Status ParseNodes(const YAML::Node& node, const std::string& file, const std::string& path,
                  const Names& names, std::vector<NodeSpec>* out) {
  MOTLEY_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(node, file, path));
  MOTLEY_RETURN_IF_ERROR(map.CheckKeys(
      {"name", "device_type", "device_count", "intra_link", "nics", "repeat"}));
  NodeSpec n;
  MOTLEY_ASSIGN_OR_RETURN(n.name, map.String("name"));
  n.group = n.name;
  MOTLEY_ASSIGN_OR_RETURN(n.device_type, map.String("device_type"));
  if (names.types.count(n.device_type) == 0) {
    return map.Error("device_type", fmt::format("unknown device type '{}' (known: {})",
                                                n.device_type, names.types_list));
  }
  MOTLEY_ASSIGN_OR_RETURN(const int64_t count, map.Int("device_count"));
  if (count <= 0 || count > kMaxDevices) {
    return map.Error("device_count", fmt::format("must be in [1, {}], got {}", kMaxDevices, count));
  }
  n.device_count = static_cast<int>(count);
  MOTLEY_RETURN_IF_ERROR(map.OptString("intra_link", &n.intra_link));
  if (!n.intra_link.empty()) {
    MOTLEY_RETURN_IF_ERROR(CheckLink(names, n.intra_link, file, map.PathOf("intra_link")));
  }
  MOTLEY_RETURN_IF_ERROR(ParseNics(map, names, &n));
  int64_t repeat = 0;
  MOTLEY_RETURN_IF_ERROR(map.OptInt("repeat", &repeat));
  if (!map.Has("repeat")) {
    out->push_back(n);
    return Status::Ok();
  }
  if (repeat <= 0 || repeat > kMaxNodes) {
    return map.Error("repeat", fmt::format("must be in [1, {}], got {}", kMaxNodes, repeat));
  }
  if (static_cast<int64_t>(out->size()) + repeat > kMaxNodes) {
    return map.Error("repeat", fmt::format("the cluster would have more than {} nodes", kMaxNodes));
  }
  for (int64_t k = 0; k < repeat; ++k) {
    NodeSpec copy = n;
    copy.name = fmt::format("{}-{}", n.name, k);
    out->push_back(copy);
  }
  return Status::Ok();
}

Result<IslandSpec> ParseIsland(const YAML::Node& node, const std::string& file,
                               const std::string& path, const Names& names,
                               const std::vector<NodeSpec>& nodes) {
  MOTLEY_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(node, file, path));
  MOTLEY_RETURN_IF_ERROR(map.CheckKeys({"name", "nodes", "link", "capacity"}));
  IslandSpec s;
  MOTLEY_ASSIGN_OR_RETURN(s.name, map.String("name"));
  MOTLEY_RETURN_IF_ERROR(OptQuantity(map, "capacity", QuantityKind::kBytesPerSecond, &s.capacity));
  if (map.Has("capacity") && !(s.capacity > 0)) {
    return map.Error("capacity", fmt::format("must be positive, got {}", s.capacity));
  }
  MOTLEY_RETURN_IF_ERROR(map.OptString("link", &s.link));
  if (!s.link.empty()) MOTLEY_RETURN_IF_ERROR(CheckLink(names, s.link, file, map.PathOf("link")));
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<YAML::Node> members, ReadList(map, "nodes", true));
  for (size_t k = 0; k < members.size(); ++k) {
    const std::string at = IndexPath(map.PathOf("nodes"), k);
    MOTLEY_ASSIGN_OR_RETURN(const std::string member, ReadString(members[k], file, at));
    bool found = false;
    for (const NodeSpec& n : nodes) {
      if (n.name == member || n.group == member) {
        s.nodes.push_back(n.name);
        found = true;
      }
    }
    if (!found) return FieldError(file, at, fmt::format("unknown node '{}'", member));
  }
  return s;
}

}  // namespace

Result<ClusterSpec> ParseClusterNode(const YAML::Node& node, const std::string& file,
                                     const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(node, file, path));
  MOTLEY_RETURN_IF_ERROR(map.CheckKeys({"name", "device_types", "link_classes", "nodes", "islands",
                                        "inter_island_link", "inter_island_capacity"}));
  ClusterSpec cluster;
  MOTLEY_RETURN_IF_ERROR(map.OptString("name", &cluster.name));
  Names names;
  std::vector<std::string> type_names;
  std::vector<std::string> link_names;

  MOTLEY_ASSIGN_OR_RETURN(const std::vector<YAML::Node> types,
                          ReadList(map, "device_types", true));
  for (size_t i = 0; i < types.size(); ++i) {
    MOTLEY_ASSIGN_OR_RETURN(DeviceType t,
                            ParseDeviceType(types[i], file, IndexPath(map.PathOf("device_types"), i)));
    names.types.insert(t.name);
    type_names.push_back(t.name);
    cluster.device_types.push_back(std::move(t));
  }
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<YAML::Node> links,
                          ReadList(map, "link_classes", false));
  for (size_t i = 0; i < links.size(); ++i) {
    MOTLEY_ASSIGN_OR_RETURN(LinkClass l,
                            ParseLinkClass(links[i], file, IndexPath(map.PathOf("link_classes"), i)));
    names.links.insert(l.name);
    link_names.push_back(l.name);
    cluster.link_classes.push_back(std::move(l));
  }
  names.types_list = fmt::format("{}", fmt::join(type_names, ", "));
  names.links_list = link_names.empty() ? std::string("none defined")
                                        : fmt::format("{}", fmt::join(link_names, ", "));

  MOTLEY_ASSIGN_OR_RETURN(const std::vector<YAML::Node> nodes, ReadList(map, "nodes", true));
  for (size_t i = 0; i < nodes.size(); ++i) {
    MOTLEY_RETURN_IF_ERROR(ParseNodes(nodes[i], file, IndexPath(map.PathOf("nodes"), i), names,
                                      &cluster.nodes));
  }
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<YAML::Node> islands, ReadList(map, "islands", false));
  for (size_t i = 0; i < islands.size(); ++i) {
    MOTLEY_ASSIGN_OR_RETURN(IslandSpec s, ParseIsland(islands[i], file,
                                                      IndexPath(map.PathOf("islands"), i), names,
                                                      cluster.nodes));
    cluster.islands.push_back(std::move(s));
  }
  MOTLEY_RETURN_IF_ERROR(map.OptString("inter_island_link", &cluster.inter_island_link));
  MOTLEY_RETURN_IF_ERROR(OptQuantity(map, "inter_island_capacity", QuantityKind::kBytesPerSecond,
                                     &cluster.inter_island_capacity));
  if (map.Has("inter_island_capacity") && !(cluster.inter_island_capacity > 0)) {
    return map.Error("inter_island_capacity",
                     fmt::format("must be positive, got {}", cluster.inter_island_capacity));
  }
  MOTLEY_RETURN_IF_ERROR(cluster.Finalize(file, path));
  return cluster;
}

}  // namespace internal

Result<ClusterSpec> ParseClusterSpec(std::string_view yaml_text, std::string_view name_for_errors) {
  const std::string file(name_for_errors);
  MOTLEY_ASSIGN_OR_RETURN(const YAML::Node root, internal::LoadYaml(yaml_text, file));
  return AsInputError(internal::ParseClusterNode(root, file, ""));
}

Result<ClusterSpec> LoadClusterSpec(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseClusterSpec(text, path);
}

}  // namespace motley::spec
