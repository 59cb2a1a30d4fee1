// Cluster YAML (docs/formats/cluster.md) -> ClusterSpec. References are checked here, with the
// indices of the YAML entries, before `repeat:` expansion; ClusterSpec::Finalize() checks the rest.
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/file_util.h"
#include "spec/cluster_spec.h"
#include "spec/limits.h"
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

Result<DeviceType> ParseDeviceType(const YAML::Node& node, const std::string& file,
                                   const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(node, file, path));
  MOTLEY_RETURN_IF_ERROR(map.CheckKeys(
      {"name", "vendor", "peak_flops", "memory", "memory_bandwidth", "emulated"}));
  DeviceType t;
  MOTLEY_ASSIGN_OR_RETURN(t.name, map.String("name"));
  MOTLEY_ASSIGN_OR_RETURN(t.vendor, map.String("vendor"));
  if (!map.Has("peak_flops")) return map.MissingError("peak_flops");
  const YAML::Node flops = map.Get("peak_flops");
  if (flops.IsMap()) {
    MOTLEY_ASSIGN_OR_RETURN(const MapReader f,
                            MapReader::Make(flops, file, map.PathOf("peak_flops")));
    MOTLEY_RETURN_IF_ERROR(f.CheckKeys({"fp32", "bf16"}));
    MOTLEY_ASSIGN_OR_RETURN(t.peak_fp32_flops,
                            f.Quantity("fp32", QuantityKind::kFlopsPerSecond));
    t.peak_bf16_flops = t.peak_fp32_flops;
    if (f.Has("bf16")) {
      MOTLEY_ASSIGN_OR_RETURN(t.peak_bf16_flops,
                              f.Quantity("bf16", QuantityKind::kFlopsPerSecond));
    }
  } else {
    MOTLEY_ASSIGN_OR_RETURN(t.peak_fp32_flops,
                            map.Quantity("peak_flops", QuantityKind::kFlopsPerSecond));
    t.peak_bf16_flops = t.peak_fp32_flops;
  }
  MOTLEY_ASSIGN_OR_RETURN(t.memory_bytes, map.Quantity("memory", QuantityKind::kBytes));
  MOTLEY_ASSIGN_OR_RETURN(t.memory_bandwidth,
                          map.Quantity("memory_bandwidth", QuantityKind::kBytesPerSecond));
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

Result<LinkClass> ParseLinkClass(const YAML::Node& node, const std::string& file,
                                 const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(node, file, path));
  MOTLEY_RETURN_IF_ERROR(map.CheckKeys({"name", "latency", "bandwidth", "efficiency"}));
  LinkClass l;
  MOTLEY_ASSIGN_OR_RETURN(l.name, map.String("name"));
  MOTLEY_ASSIGN_OR_RETURN(l.latency_s, map.Quantity("latency", QuantityKind::kSeconds));
  MOTLEY_ASSIGN_OR_RETURN(l.bandwidth, map.Quantity("bandwidth", QuantityKind::kBytesPerSecond));
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
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<YAML::Node> nics, ReadList(map, "nics", false));
  for (size_t k = 0; k < nics.size(); ++k) {
    const std::string at = IndexPath(map.PathOf("nics"), k);
    MOTLEY_ASSIGN_OR_RETURN(std::string nic, ReadString(nics[k], file, at));
    MOTLEY_RETURN_IF_ERROR(CheckLink(names, nic, file, at));
    n.nics.push_back(nic);
  }
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
  MOTLEY_RETURN_IF_ERROR(map.CheckKeys({"name", "nodes", "link"}));
  IslandSpec s;
  MOTLEY_ASSIGN_OR_RETURN(s.name, map.String("name"));
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
  MOTLEY_RETURN_IF_ERROR(map.CheckKeys(
      {"name", "device_types", "link_classes", "nodes", "islands", "inter_island_link"}));
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
