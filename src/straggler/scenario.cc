// See scenario.h.
#include "straggler/scenario.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/file_util.h"
#include "spec/limits.h"
#include "spec/yaml_reader.h"

namespace motley::straggler {
namespace {

using spec::internal::FieldError;
using spec::internal::IndexPath;
using spec::internal::MapReader;

// A device given as a global id (integer scalar) or as "NODE:LOCAL_INDEX" / "NODE".
Result<int> ResolveDevice(const YAML::Node& node, const spec::ClusterSpec& cluster,
                          std::string_view file, const std::string& path) {
  if (!node.IsScalar()) {
    return FieldError(file, path, "expected a device id or a name NODE:LOCAL_INDEX");
  }
  const std::string text = node.Scalar();
  const int n = cluster.num_devices();
  if (!text.empty() &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    MOTLEY_ASSIGN_OR_RETURN(const int64_t id, spec::internal::ReadInt(node, file, path));
    if (id >= n) {
      return FieldError(file, path,
                        fmt::format("device {} does not exist (the cluster has {})", id, n));
    }
    return static_cast<int>(id);
  }
  if (!text.empty() && text.front() == '-') {
    return FieldError(file, path, fmt::format("device ids are >= 0, got {}", text));
  }
  const size_t colon = text.rfind(':');
  const std::string node_name = colon == std::string::npos ? text : text.substr(0, colon);
  const int node_index = cluster.FindNode(node_name);
  if (node_index < 0) {
    return FieldError(file, path, fmt::format("unknown node '{}' in device '{}'", node_name, text));
  }
  const spec::NodeSpec& ns = cluster.nodes[static_cast<size_t>(node_index)];
  int local = 0;
  if (colon == std::string::npos) {
    if (ns.device_count != 1) {
      return FieldError(file, path,
                        fmt::format("node '{}' has {} devices: write NODE:LOCAL_INDEX", node_name,
                                    ns.device_count));
    }
  } else {
    const std::string idx = text.substr(colon + 1);
    if (idx.empty() ||
        !std::all_of(idx.begin(), idx.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        idx.size() > 6) {
      return FieldError(file, path, fmt::format("bad local index in device '{}'", text));
    }
    local = std::stoi(idx);
    if (local >= ns.device_count) {
      return FieldError(file, path,
                        fmt::format("node '{}' has {} devices, no local index {}", node_name,
                                    ns.device_count, local));
    }
  }
  for (const spec::DeviceInfo& d : cluster.devices()) {
    if (d.node == node_index && d.local_index == local) return d.id;
  }
  return FieldError(file, path, fmt::format("device '{}' not found", text));  // unreachable
}

// `warnings` gets a line when the event uses the old `rate:` key (a fraction of speed).
Result<ScenarioEvent> ParseEvent(const YAML::Node& node, const std::string& file,
                                 const std::string& path, const spec::ClusterSpec& cluster,
                                 std::vector<std::string>* warnings) {
  MOTLEY_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(node, file, path));
  MOTLEY_RETURN_IF_ERROR(
      map.CheckKeys({"step", "device", "link", "link_class", "slowdown", "rate"}));
  ScenarioEvent e;
  MOTLEY_ASSIGN_OR_RETURN(e.step, map.Int("step"));
  if (e.step < 1) return map.Error("step", fmt::format("must be >= 1, got {}", e.step));
  if (e.step > spec::kMaxSteps) {
    return map.Error("step", fmt::format("must be at most {}, got {}", spec::kMaxSteps, e.step));
  }
  if (map.Has("slowdown") && map.Has("rate")) {
    return FieldError(file, path, "give 'slowdown' or the old 'rate', not both");
  }
  // Bounds (spec/limits.h, issue 17): at most kMaxSlowdown times slower, never faster than nominal
  // (a rate above 1 would claim more than the device's peak, which the MFU is measured against).
  if (map.Has("rate")) {  // the old key: a fraction of nominal speed
    MOTLEY_ASSIGN_OR_RETURN(e.rate, map.Double("rate"));
    if (!std::isfinite(e.rate) || e.rate < 1.0 / spec::kMaxSlowdown || e.rate > 1.0) {
      return map.Error("rate", fmt::format("must be in [{:g}, 1] (at most {:g}x slower than "
                                           "nominal; 1 is healthy), got {:g}",
                                           1.0 / spec::kMaxSlowdown, spec::kMaxSlowdown, e.rate));
    }
    warnings->push_back(fmt::format(
        "{}: {}: 'rate: {}' (a fraction of speed) is deprecated; write 'slowdown: {:.4g}' "
        "(a factor >= 1: 3 is three times slower)",
        file, map.PathOf("rate"), e.rate, 1.0 / e.rate));
  } else {
    MOTLEY_ASSIGN_OR_RETURN(const double slowdown, map.Double("slowdown"));
    if (!std::isfinite(slowdown) || slowdown < 1.0 || slowdown > spec::kMaxSlowdown) {
      return map.Error("slowdown",
                       fmt::format("must be a factor in [1, {:g}] (1 = healthy, 3 = three times "
                                   "slower), got {:g}",
                                   spec::kMaxSlowdown, slowdown));
    }
    e.rate = 1.0 / slowdown;
  }
  const int targets =
      (map.Has("device") ? 1 : 0) + (map.Has("link") ? 1 : 0) + (map.Has("link_class") ? 1 : 0);
  if (targets != 1) {
    return FieldError(file, path, "an event names exactly one of 'device', 'link' or 'link_class'");
  }
  if (map.Has("device")) {
    e.target = EventTarget::kDevice;
    MOTLEY_ASSIGN_OR_RETURN(e.device,
                            ResolveDevice(map.Get("device"), cluster, file, map.PathOf("device")));
  } else if (map.Has("link")) {
    e.target = EventTarget::kLink;
    const YAML::Node link = map.Get("link");
    if (!link.IsSequence() || link.size() != 2) {
      return map.Error("link", "expected a list of two devices, e.g. [0, 5]");
    }
    const std::string lp = map.PathOf("link");
    MOTLEY_ASSIGN_OR_RETURN(const int a, ResolveDevice(link[0], cluster, file, IndexPath(lp, 0)));
    MOTLEY_ASSIGN_OR_RETURN(const int b, ResolveDevice(link[1], cluster, file, IndexPath(lp, 1)));
    if (a == b) return map.Error("link", fmt::format("both ends are device {}", a));
    e.link_a = std::min(a, b);
    e.link_b = std::max(a, b);
  } else {
    e.target = EventTarget::kLinkClass;
    MOTLEY_ASSIGN_OR_RETURN(e.link_class, map.String("link_class"));
    if (cluster.FindLinkClass(e.link_class) == nullptr) {
      std::vector<std::string> known;
      for (const spec::LinkClass& l : cluster.link_classes) known.push_back(l.name);
      return map.Error("link_class", fmt::format("unknown link class '{}' (known: {})",
                                                 e.link_class, fmt::join(known, ", ")));
    }
  }
  return e;
}

RateSteps Sorted(RateSteps steps) {
  std::stable_sort(steps.begin(), steps.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  return steps;
}

double SpeedAt(const RateSteps& steps, int64_t step) {
  double speed = 1.0;
  for (const auto& [s, r] : steps) {
    if (s > step) break;
    speed = r;
  }
  return speed;
}

}  // namespace

RateSteps Scenario::DeviceSchedule(int device) const {
  RateSteps out;
  for (const ScenarioEvent& e : events) {
    if (e.target == EventTarget::kDevice && e.device == device) out.emplace_back(e.step, e.rate);
  }
  return Sorted(std::move(out));
}

RateSteps Scenario::LinkSchedule(const spec::ClusterSpec& cluster, int a, int b) const {
  MOTLEY_CHECK(a != b, "Scenario::LinkSchedule: a link joins two distinct devices");
  const int lo = std::min(a, b);
  const int hi = std::max(a, b);
  const std::string& cls = cluster.LinkBetween(a, b).name;
  RateSteps out;
  for (const ScenarioEvent& e : events) {
    const bool pair = e.target == EventTarget::kLink && e.link_a == lo && e.link_b == hi;
    const bool by_class = e.target == EventTarget::kLinkClass && e.link_class == cls;
    if (pair || by_class) out.emplace_back(e.step, e.rate);
  }
  return Sorted(std::move(out));
}

double Scenario::DeviceSpeedAt(int device, int64_t step) const {
  return SpeedAt(DeviceSchedule(device), step);
}

double Scenario::LinkSpeedAt(const spec::ClusterSpec& cluster, int a, int b, int64_t step) const {
  return SpeedAt(LinkSchedule(cluster, a, b), step);
}

bool Scenario::has_link_events() const {
  return std::any_of(events.begin(), events.end(),
                     [](const ScenarioEvent& e) { return e.target != EventTarget::kDevice; });
}

std::string DeviceName(const spec::ClusterSpec& cluster, int device) {
  const spec::DeviceInfo& d = cluster.device(device);
  return fmt::format("{}:{}", cluster.nodes[static_cast<size_t>(d.node)].name, d.local_index);
}

namespace {

Result<Scenario> ParseScenarioImpl(std::string_view yaml_text, std::string_view name_for_errors,
                                   const spec::ClusterSpec& cluster) {
  const std::string file(name_for_errors);
  Scenario scenario;
  scenario.source = file;
  MOTLEY_ASSIGN_OR_RETURN(const YAML::Node root, spec::internal::LoadYaml(yaml_text, file));
  try {
    YAML::Node list = root;
    if (root.IsMap()) {  // also accepted: {events: [...]}
      MOTLEY_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(root, file, ""));
      MOTLEY_RETURN_IF_ERROR(map.CheckKeys({"events"}));
      if (!map.Has("events")) return map.MissingError("events");
      list = map.Get("events");
    }
    if (!list.IsSequence()) {
      return FieldError(file, "events",
                        "expected a list of events ({step, device | link | "
                        "link_class, slowdown})");
    }
    for (size_t i = 0; i < list.size(); ++i) {
      MOTLEY_ASSIGN_OR_RETURN(ScenarioEvent e, ParseEvent(list[i], file, IndexPath("events", i),
                                                          cluster, &scenario.warnings));
      scenario.events.push_back(std::move(e));
    }
  } catch (const YAML::Exception& ex) {
    return Err("{}: YAML error: {}", file, ex.what());
  }
  return scenario;
}

}  // namespace

Result<Scenario> ParseScenario(std::string_view yaml_text, std::string_view name_for_errors,
                               const spec::ClusterSpec& cluster) {
  MOTLEY_CHECK(cluster.finalized(), "ParseScenario needs a finalized cluster");
  return AsInputError(ParseScenarioImpl(yaml_text, name_for_errors, cluster));
}

Result<Scenario> LoadScenario(const std::string& path, const spec::ClusterSpec& cluster) {
  MOTLEY_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseScenario(text, path, cluster);
}

}  // namespace motley::straggler
