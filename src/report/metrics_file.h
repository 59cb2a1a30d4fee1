// Reading a training run's metrics file (JSONL) for the reports: the single-device loop's lines
// (docs/formats/metrics.md) and the parallel loop's (docs/formats/parallel-metrics.md) alike. Reads
// what is present and works without what is not: `timestamp` / `elapsed_s` (wall seconds since the
// run started), `wall_step_time_s`, `predicted_step_time_s`, `val_loss`; lines
// {"event": "resume", "step": N, "from": DIR, ...} mark where a resumed run continued; other event
// lines are skipped. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace motley::report {

struct MetricsRow {
  int64_t step = 0;
  double loss = 0.0;
  std::optional<double> val_loss;
  int64_t tokens = 0;
  double step_time_s = 0.0;       // on the run's clock (emulated on a virtual-clock run)
  double tokens_per_s = 0.0;      // on the run's clock
  double wall_step_time_s = 0.0;  // the step's wall time (step_time_s when not written)
  std::optional<double> predicted_step_time_s;
  std::optional<double> elapsed_s;  // as written
  std::string timestamp;            // as written ("" when absent)
  bool skipped = false;
  bool loss_spike = false;
  std::string plan;  // parallel runs: the plan the step ran under
  // Wall seconds since the run started: elapsed_s when every row has it (continued across
  // resumes: a restart adds the previous process's last value), else the running sum of
  // wall_step_time_s.
  double wall_s = 0.0;
};

struct ResumeRecord {
  int64_t step = 0;  // the checkpoint's step: the run continued at step + 1
  std::string from;
  std::string timestamp;
  size_t row = 0;  // index of the first row written after the resume
};

struct RunMetrics {
  std::string label;
  std::string path;
  std::string clock;  // "virtual", "wall", "host" (parallel files), "" (single-device files)
  std::vector<MetricsRow> rows;
  std::vector<ResumeRecord> resumes;
  bool wall_from_elapsed = false;  // wall_s came from elapsed_s (else from summed step times)
  // True when step_time_s is not wall time (the virtual clock): the report then also shows the
  // wall-clock rate.
  bool emulated_clock() const { return clock == "virtual"; }
};

// Parses JSONL text; `name` stands for the file in messages ("m.jsonl:3: ..."). Errors: a line
// that is not a JSON object, or a step line without a numeric `step` or `loss`.
Result<RunMetrics> ParseMetrics(std::string_view text, const std::string& name,
                                const std::string& label);
// Reads and parses a file; the label defaults to the file name without its extension.
Result<RunMetrics> ReadMetricsFile(const std::string& path, const std::string& label = "");

}  // namespace motley::report
