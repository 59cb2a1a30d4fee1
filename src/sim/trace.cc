// Chrome trace writer (see simulator.h): one "X" event per action, process and thread names naming
// pipelines and stages with their devices.
#include <string>

#include <nlohmann/json.hpp>

#include "sim/simulator.h"

namespace motley::sim {

std::string ChromeTraceJson(const spec::Plan& plan, const SimResult& result) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", k}, {"tid", 0},
                      {"args", {{"name", "pipeline " + std::to_string(k)}}}});
    const auto& stages = plan.pipelines[k].stages;
    for (size_t i = 0; i < stages.size(); ++i) {
      std::string devices;
      for (int d : stages[i].devices) devices += (devices.empty() ? "" : ",") + std::to_string(d);
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", k}, {"tid", i},
                        {"args", {{"name", "stage " + std::to_string(i) + " [" + devices + "]"}}}});
    }
  }
  for (const TraceEvent& e : result.trace) {
    events.push_back({{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"pid", e.pipeline},
                      {"tid", e.stage}, {"ts", e.start_s * 1e6}, {"dur", e.duration_s * 1e6}});
  }
  nlohmann::json root;
  root["traceEvents"] = events;
  root["displayTimeUnit"] = "ms";
  root["otherData"] = {{"iteration_s", result.iteration_s}};
  return root.dump() + "\n";
}

}  // namespace motley::sim
