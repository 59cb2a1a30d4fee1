// LossSpikeDetector: quiet on a decreasing noisy curve, flags a jump, ignores non-finite losses,
// and does not let a spike raise the bar for the next step.
#include "train/loss_spike.h"

#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

namespace motley::train {
namespace {

// A typical curve: exponential decay from 5 towards 2 with 2% multiplicative noise.
double Curve(int64_t step, std::mt19937_64& rng) {
  std::normal_distribution<double> noise(0.0, 0.02);
  return (2.0 + 3.0 * std::exp(-static_cast<double>(step) / 50.0)) * (1.0 + noise(rng));
}

TEST(LossSpikeTest, QuietOnNoisyDecreasingCurve) {
  LossSpikeDetector detector;
  std::mt19937_64 rng(7);
  for (int64_t step = 1; step <= 500; ++step) {
    EXPECT_FALSE(detector.Observe(Curve(step, rng))) << "step " << step;
  }
  EXPECT_EQ(detector.observed(), 500);
}

TEST(LossSpikeTest, FlagsJumpAndKeepsStatistics) {
  LossSpikeDetector detector;
  std::mt19937_64 rng(11);
  for (int64_t step = 1; step <= 100; ++step) ASSERT_FALSE(detector.Observe(Curve(step, rng)));
  const double mean = detector.mean();
  EXPECT_TRUE(detector.Observe(mean * 1.5));
  EXPECT_EQ(detector.mean(), mean);  // the spike is not folded in
  EXPECT_TRUE(detector.Observe(mean * 1.5));  // so the same jump is flagged again
  EXPECT_FALSE(detector.Observe(mean * 1.01));
}

TEST(LossSpikeTest, NothingFlaggedDuringWarmup) {
  LossSpikeDetector detector(LossSpikeOptions{.alpha = 0.1, .warmup = 5});
  for (double loss : {5.0, 50.0, 5.0, 500.0, 5.0}) EXPECT_FALSE(detector.Observe(loss));
  EXPECT_EQ(detector.observed(), 5);
}

TEST(LossSpikeTest, IgnoresNonFiniteLosses) {
  LossSpikeDetector detector(LossSpikeOptions{.alpha = 0.1, .warmup = 2});
  EXPECT_FALSE(detector.Observe(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_FALSE(detector.Observe(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(detector.observed(), 0);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(detector.Observe(3.0));
  EXPECT_FALSE(detector.Observe(3.2));  // under the 10% floor above a zero-variance mean
  EXPECT_TRUE(detector.Observe(3.5));
}

}  // namespace
}  // namespace motley::train
