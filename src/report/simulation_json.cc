// See simulation_json.h.
#include "report/simulation_json.h"

#include <nlohmann/json.hpp>

#include "core/throughput.h"

namespace motley::report {

DeviceBusy MeanDeviceBusy(const sim::SimResult& result) {
  DeviceBusy out;
  double busy = 0;
  for (const Seconds b : result.device_busy_s) {
    if (b > 0) {
      busy += b;
      ++out.used;
    }
  }
  if (out.used > 0 && result.iteration_s > 0) {
    out.mean_fraction = busy / out.used / result.iteration_s;
  }
  return out;
}

std::string SimulationJson(const sim::SimResult& result, double predicted_s,
                           int64_t tokens_per_step) {
  nlohmann::ordered_json j;
  j["format"] = "motley-simulation";
  j["version"] = 1;
  j["iteration_s"] = result.iteration_s;
  j["predicted_iteration_s"] = predicted_s;
  j["tokens_per_s"] = TokensPerSecond(tokens_per_step, result.iteration_s);
  j["events"] = result.events;
  j["transfers"] = result.transfers;
  const DeviceBusy busy = MeanDeviceBusy(result);
  j["devices_used"] = busy.used;
  j["mean_busy_fraction"] = busy.mean_fraction;
  nlohmann::ordered_json devices = nlohmann::ordered_json::array();
  for (size_t d = 0; d < result.device_busy_s.size(); ++d) {
    if (result.device_busy_s[d] <= 0) continue;
    devices.push_back(
        {{"device", d}, {"busy_s", result.device_busy_s[d]}, {"idle_s", result.device_idle_s[d]}});
  }
  j["devices"] = std::move(devices);
  j["pipeline_backward_end_s"] = result.pipeline_backward_end_s;
  return j.dump(2) + "\n";
}

}  // namespace motley::report
