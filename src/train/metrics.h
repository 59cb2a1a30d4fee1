// Per-step training metrics and their JSONL file (one JSON object per line, flushed after each
// step so a crashed run keeps every finished step). The format is documented in
// docs/formats/metrics.md. MetricsWriter owns its FILE; thread-compatible (one writer per run).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>

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

// One JSON object, no trailing newline; val_loss only when present.
std::string StepMetricsToJson(const StepMetrics& m);

class MetricsWriter {
 public:
  // Creates (truncates) the file; the error names the path.
  static Result<MetricsWriter> Open(const std::string& path);
  // Appends one line and flushes; a write error names the path.
  Status Write(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  MetricsWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
};

}  // namespace motley::train
