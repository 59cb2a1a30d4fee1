// LossSpikeDetector (loss_spike.h).
#include "train/loss_spike.h"

#include <algorithm>
#include <cmath>

namespace motley::train {

bool LossSpikeDetector::Observe(double loss) {
  if (!std::isfinite(loss)) return false;
  if (observed_ >= options_.warmup) {
    const double bar = mean_ + std::max(options_.sigmas * std::sqrt(variance_),
                                        options_.min_rise * std::fabs(mean_));
    if (loss > bar) return true;
  }
  if (observed_ == 0) {
    mean_ = loss;
    variance_ = 0.0;
  } else {
    // West's incremental EWMA of mean and variance.
    const double diff = loss - mean_;
    const double incr = options_.alpha * diff;
    mean_ += incr;
    variance_ = (1.0 - options_.alpha) * (variance_ + diff * incr);
  }
  ++observed_;
  return false;
}

}  // namespace motley::train
