// Per-step training metrics and their JSONL file (one JSON object per line, flushed after each
// line so a crashed run keeps every finished step). Formats: docs/formats/metrics.md (the serial
// loop) and docs/formats/parallel-metrics.md (the parallel loop, whose lines it writes too).
//
// Every line carries "timestamp" (wall-clock time, ISO-8601 UTC with milliseconds,
// "2026-12-01T15:04:05.123Z") and "elapsed_s" (wall seconds since this run, or this resumed run,
// started), placed after "step". A resumed run keeps the file: the lines of steps after the
// checkpoint's step N (work lost since it, which the run trains again) and earlier resume records
// at N or later are removed, one resume record {"event": "resume", "step": N, "timestamp",
// "elapsed_s", "from": "<checkpoint dir>"} is appended, and the new steps follow, so the file
// holds every step once.
// MetricsWriter owns its FILE; thread-compatible (one writer per run).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace motley::train {

struct StepMetrics {
  int64_t step = 0;                // 1-based: 1 is the first optimizer update
  double loss = 0.0;               // mean training loss of the step's global batch (nats per token)
  double lr = 0.0;                 // learning rate used by this step's update
  double grad_norm = 0.0;          // global L2 norm of the gradient before clipping
  int64_t tokens = 0;              // tokens in the global batch (B * T)
  double step_time_s = 0.0;        // wall time of the step (sampling, fwd/bwd, optimizer)
  double tokens_per_s = 0.0;       // tokens / step_time_s
  double gflops = 0.0;             // achieved GFLOP/s: flops_per_token * tokens / step_time_s / 1e9
  std::optional<double> val_loss;  // mean validation loss, on steps where it was measured
  bool loss_spike = false;         // flagged by LossSpikeDetector (loss_spike.h)
};

// One JSON object of the serial loop's fields (no timestamp: the writer adds it); val_loss only
// when present.
nlohmann::ordered_json StepMetricsJson(const StepMetrics& m);
// The same, dumped (no trailing newline).
std::string StepMetricsToJson(const StepMetrics& m);

// "2026-12-01T15:04:05.123Z": ISO-8601, UTC, milliseconds.
std::string IsoTimestampUtc(std::chrono::system_clock::time_point t);

// A resumed run's metrics: the checkpoint's step and folder.
struct MetricsResume {
  int64_t step = 0;
  std::string from;
};

class MetricsWriter {
 public:
  using SteadyClock = std::chrono::steady_clock;
  // Fresh run (no resume): creates or truncates the file. Resumed run: keeps the lines up to
  // resume->step (see the top of this file), then appends the resume record. `run_start` is the
  // origin of elapsed_s. The target must be absent or a regular file (core/file_util.h); errors
  // name the path.
  static Result<MetricsWriter> Open(const std::string& path,
                                    const std::optional<MetricsResume>& resume = std::nullopt,
                                    SteadyClock::time_point run_start = SteadyClock::now());
  // Appends one serial-loop line and flushes.
  Status Write(const StepMetrics& m);
  // Appends `line` with "timestamp" and "elapsed_s" inserted after its "step" (or at the end)
  // and flushes; a write error names the path.
  Status WriteLine(const nlohmann::ordered_json& line);
  const std::string& path() const { return path_; }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  MetricsWriter(std::string path, std::FILE* file, SteadyClock::time_point start)
      : path_(std::move(path)), file_(file), start_(start) {}
  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
  SteadyClock::time_point start_;
};

}  // namespace motley::train
