// The run part of motley's HTML reports (`motley report METRICS.jsonl ...`, `motley train
// --report`): a summary table of each run and charts with every run overlaid — training and
// validation loss against step and against wall time, throughput against step and wall time
// (the run's clock, and wall-clock tokens/s beside an emulated run's virtual rate), and measured
// against predicted step time. Chart ids and what each mark stands for: docs/formats/report.md.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "report/metrics_file.h"

namespace motley::report {

// HTML sections (<h2> ...) for the runs; `runs` may be empty (then a note says so).
std::string RunSections(const std::vector<RunMetrics>& runs);

// A whole page of runs (what `motley report` writes).
std::string RunReportHtml(const std::string& title, const std::vector<RunMetrics>& runs);

}  // namespace motley::report
