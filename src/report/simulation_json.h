// What `motley simulate` prints, as one JSON object (`motley simulate --summary FILE`), for
// scripts that read a plan's simulated step (bench/plan_set.py): the simulated and predicted
// step, tokens/s, and how busy each device the plan uses is. The fields are documented in
// docs/formats/simulation.md. The mean busy fraction is computed here once, for the printed
// lines and the JSON alike (tokens/s is core/throughput.h's TokensPerSecond of the simulated
// step). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "sim/simulator.h"

namespace motley::report {

// The devices a simulated step keeps busy (device_busy_s > 0) and their mean busy fraction of the
// step (0 when none is busy), as `motley simulate` prints it.
struct DeviceBusy {
  int used = 0;
  double mean_fraction = 0;
};
DeviceBusy MeanDeviceBusy(const sim::SimResult& result);

// `result` is Simulator::Run of a plan; `predicted_s` the predictor's step of the same plan under
// the same rates; `tokens_per_step` global batch x sequence length.
std::string SimulationJson(const sim::SimResult& result, double predicted_s,
                           int64_t tokens_per_step);

}  // namespace motley::report
