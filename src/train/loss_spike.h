// LossSpikeDetector: flags a training step whose loss jumps far above its recent trend, so that
// the progress line and the metrics file can point at it (docs/architecture.md §7, observability).
// A flag is a report, never an action: the step has been taken already (non-finite losses and
// gradients are what the training loops skip).
//
// Rule: the detector keeps an exponentially weighted mean and variance of the losses it has seen
// (weight `alpha` for the newest). After `warmup` observations, a loss is a spike when
//     loss > mean + max(sigmas * stddev, min_rise * |mean|).
// The relative floor keeps a smooth, nearly noise-free curve from flagging tiny wiggles. A spike
// is not folded into the statistics (one bad batch does not raise the bar for the next), and a
// non-finite loss is ignored (the loop reports it as skipped).
//
// Plain value type; not thread-safe (one training loop's rank 0 owns it).
#pragma once

#include <cstdint>

namespace motley::train {

struct LossSpikeOptions {
  double alpha = 0.1;      // EWMA weight of the newest loss
  int64_t warmup = 10;     // observations before anything is flagged
  double sigmas = 4.0;     // standard deviations above the mean
  double min_rise = 0.10;  // and at least this fraction of the mean above it
};

class LossSpikeDetector {
 public:
  explicit LossSpikeDetector(LossSpikeOptions options = {}) : options_(options) {}

  // Records `loss` and returns true when it is a spike (see the rule above).
  bool Observe(double loss);

  double mean() const { return mean_; }
  int64_t observed() const { return observed_; }

 private:
  LossSpikeOptions options_;
  double mean_ = 0.0;
  double variance_ = 0.0;
  int64_t observed_ = 0;
};

}  // namespace motley::train
