// See report.h.
#include "straggler/report.h"

#include <fmt/core.h>
#include <fmt/format.h>

namespace motley::straggler {

nlohmann::ordered_json DecisionRecord(const ReplanDecision& d) {
  nlohmann::ordered_json j;
  j["started_step"] = d.started_step;
  j["decided_step"] = d.decided_step;
  j["adopted"] = d.adopted;
  j["candidate"] = d.candidate;
  j["current_iteration_s"] = d.current_iteration_s;
  j["new_iteration_s"] = d.new_iteration_s;
  j["gain_s"] = d.gain_s;
  j["migration_s"] = d.migration_s;
  j["moved_bytes"] = d.moved_bytes;
  j["devices_out"] = d.devices_out;
  j["replan_wall_s"] = d.replan_wall_s;
  return j;
}

nlohmann::ordered_json StragglerRecord(const RateMonitor& monitor,
                                       const std::vector<RateChangeRecord>& changes,
                                       bool replan_in_flight,
                                       const std::optional<ReplanDecision>& decision) {
  nlohmann::ordered_json j;
  j["device_rates"] = monitor.device_rates();
  std::vector<double> smoothed;
  for (size_t d = 0; d < monitor.device_rates().size(); ++d) {
    smoothed.push_back(monitor.smoothed_device_rate(static_cast<int>(d)));
  }
  j["smoothed_rates"] = smoothed;
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  for (const auto& [key, rate] : monitor.slow_links()) {
    nlohmann::ordered_json l;
    l["a"] = key.first;
    l["b"] = key.second;
    l["rate"] = rate;
    l["smoothed"] = monitor.smoothed_link_rate(key.first, key.second);
    links.push_back(std::move(l));
  }
  j["slow_links"] = std::move(links);
  nlohmann::ordered_json ch = nlohmann::ordered_json::array();
  for (const RateChangeRecord& c : changes) {
    nlohmann::ordered_json e;
    if (c.is_link) {
      e["link"] = {c.a, c.b};
    } else {
      e["device"] = c.device;
    }
    e["from"] = c.from;
    e["to"] = c.to;
    ch.push_back(std::move(e));
  }
  j["changes"] = std::move(ch);
  j["replan_in_flight"] = replan_in_flight;
  if (decision.has_value()) j["decision"] = DecisionRecord(*decision);
  return j;
}

std::string ChangesText(const std::vector<RateChangeRecord>& changes) {
  std::vector<std::string> parts;
  for (const RateChangeRecord& c : changes) {
    const std::string what =
        c.is_link ? fmt::format("link {}-{}", c.a, c.b) : fmt::format("device {}", c.device);
    parts.push_back(fmt::format("{} slowdown {:.2f} -> {:.2f}", what, c.from, c.to));
  }
  if (parts.empty()) return "";
  return "straggler: " + fmt::format("{}", fmt::join(parts, "; "));
}

std::string DecisionText(const ReplanDecision& d, int64_t horizon_steps) {
  const std::string head =
      d.adopted ? fmt::format("adopted '{}'", d.candidate) : std::string("kept the running plan");
  return fmt::format(
      "re-plan (started after step {}): {}: predicted {:.4g} -> {:.4g} s/step, gain {:.4g} s over "
      "{} steps {} migration {:.4g} s ({:.3g} MB){}",
      d.started_step, head, d.current_iteration_s, d.new_iteration_s, d.gain_s, horizon_steps,
      d.adopted ? ">" : "does not clear", d.migration_s, d.moved_bytes / 1e6,
      d.devices_out.empty() ? ""
                            : fmt::format("; out of the plan: {}", fmt::join(d.devices_out, ", ")));
}

}  // namespace motley::straggler
