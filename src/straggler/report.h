// How the straggler loop shows itself (issue 6, item 6): the `straggler` record of a metrics JSONL
// line (docs/formats/parallel-metrics.md: detected rates, committed changes, re-plan decisions)
// and the progress-line text of a change or a decision. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "straggler/controller.h"
#include "straggler/monitor.h"

namespace motley::straggler {

// {"device_rates": [...committed...], "smoothed_rates": [...], "slow_links": [{"a", "b", "rate",
//  "smoothed"}], "changes": [{"device" | "link": [a, b], "from", "to"}], "replan_in_flight",
//  "decision": {...}} -- `decision` only when one was taken at this step.
nlohmann::ordered_json StragglerRecord(const RateMonitor& monitor,
                                       const std::vector<RateChangeRecord>& changes,
                                       bool replan_in_flight,
                                       const std::optional<ReplanDecision>& decision);
nlohmann::ordered_json DecisionRecord(const ReplanDecision& decision);

// "straggler: device 5 slowdown 1.00 -> 3.00; link 2-4 slowdown 1.00 -> 4.00" (empty: none).
std::string ChangesText(const std::vector<RateChangeRecord>& changes);
// "re-plan (started after step 104): adopted 'without device 5': predicted 3.906 -> 2.049 s/step,
// gain 371.4 s over 200 steps > migration 0.003 s (1.2 MB)" or "... kept the running plan: ...".
std::string DecisionText(const ReplanDecision& decision, int64_t horizon_steps);

}  // namespace motley::straggler
