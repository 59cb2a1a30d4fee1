// One self-contained HTML page about a plan (`motley plan --report report.html`): the summary
// (tokens/s, MFU, memory per device type, reference ratios, speedups over the baselines), the
// device map (every device coloured by pipeline, labelled with its stage), the stage layout and a
// pipeline timeline drawn from a simulator trace. Inline SVG and CSS; no scripts, no network.
// Pure function; thread-safe.
#pragma once

#include <string>

#include "perf/predictor.h"
#include "plan/planner.h"
#include "sim/simulator.h"

namespace motley::plan {

// `trace` is a simulation of report.best.plan with record_trace on.
std::string ReportHtml(const perf::Predictor& predictor, const PlanReport& report,
                       const sim::SimResult& trace);

}  // namespace motley::plan
