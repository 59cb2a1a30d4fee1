// Rate monitor: jitter never commits, a sustained slowdown commits once at its true size, a slow
// link is blamed on the link, a device outside the plan recovers through its probe.
#include "straggler/monitor.h"

#include <random>

#include <gtest/gtest.h>

#include "straggler/test_util.h"

namespace motley::straggler {
namespace {

class MonitorTest : public ::testing::Test {
 protected:
  void SetUp() override { world_ = testing::LoadWorld(); }
  const spec::ClusterSpec& cluster() const { return world_->run.cluster; }
  // Every device reports `expected` seconds of work taking expected * slowdown[d].
  static std::vector<DeviceSample> Devices(const std::vector<double>& slowdown) {
    std::vector<DeviceSample> out;
    for (size_t d = 0; d < slowdown.size(); ++d) {
      out.push_back(DeviceSample{static_cast<int>(d), 0.2 * slowdown[d], 0.2, false});
    }
    return out;
  }
  // The link a <-> b carried 1 MB in 4 messages, `slowdown` times slower than its class allows.
  LinkSample Link(int a, int b, double slowdown) const {
    const spec::LinkClass& c = cluster().LinkBetween(a, b);
    const Bytes bytes = 1e6;
    return LinkSample{a, b, bytes, 4,
                      (4 * c.latency_s + bytes / c.EffectiveBandwidth()) * slowdown};
  }
  std::unique_ptr<testing::World> world_;
};

TEST_F(MonitorTest, JitterOfTwentyPercentNeverCommits) {
  RateMonitor m(cluster());
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  for (int64_t step = 2; step <= 1000; step += 2) {
    std::vector<double> s(8);
    for (double& x : s) x = jitter(rng);
    EXPECT_TRUE(m.Report(step, Devices(s), {Link(0, 4, jitter(rng))}).empty()) << step;
  }
  // The adversarial case: every report at the top of the jitter band, for ever.
  for (int64_t step = 1002; step <= 1200; step += 2) {
    EXPECT_TRUE(m.Report(step, Devices(std::vector<double>(8, 1.2)), {Link(0, 4, 1.2)}).empty());
  }
  EXPECT_TRUE(m.history().empty());
  for (double r : m.device_rates()) EXPECT_EQ(r, 1.0);
  EXPECT_EQ(m.link_rate(4, 0), 1.0);
  EXPECT_NEAR(m.smoothed_link_rate(0, 4), 1.2, 1e-9);
}

TEST_F(MonitorTest, SustainedSlowdownCommitsOnceAtItsSizeAfterThePersistenceCount) {
  RateMonitor m(cluster());
  std::vector<double> s(8, 1.0);
  EXPECT_TRUE(m.Report(2, Devices(s), {}).empty());
  s[5] = 3.0;
  // The first report mixes one healthy and one slow step (2x); then 3x.
  std::vector<double> mixed = s;
  mixed[5] = 2.0;
  EXPECT_TRUE(m.Report(4, Devices(mixed), {}).empty());
  EXPECT_TRUE(m.Report(6, Devices(s), {}).empty());
  const auto changes = m.Report(8, Devices(s), {});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].device, 5);
  EXPECT_FALSE(changes[0].is_link);
  EXPECT_EQ(changes[0].step, 8);
  EXPECT_DOUBLE_EQ(changes[0].from, 1.0);
  EXPECT_DOUBLE_EQ(changes[0].to, 3.0);  // the median of (2, 3, 3), not the lagging EWMA
  EXPECT_DOUBLE_EQ(m.device_rates()[5], 3.0);
  // Sustained, with +-20% jitter on top: no further commit.
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  for (int64_t step = 10; step <= 400; step += 2) {
    std::vector<double> j = s;
    for (double& x : j) x *= jitter(rng);
    EXPECT_TRUE(m.Report(step, Devices(j), {}).empty()) << step;
  }
  EXPECT_EQ(m.history().size(), 1u);
  // Recovery: back to exactly 1 after the persistence count.
  s[5] = 1.0;
  int64_t step = 402;
  for (; m.device_rates()[5] != 1.0 && step < 440; step += 2) (void)m.Report(step, Devices(s), {});
  EXPECT_EQ(m.device_rates()[5], 1.0);
  EXPECT_LE(step, 402 + 2 * 5);
  EXPECT_EQ(m.history().size(), 2u);
}

TEST_F(MonitorTest, ASlowLinkIsBlamedOnTheLinkNotOnItsDevices) {
  RateMonitor m(cluster());
  const std::vector<double> healthy(8, 1.0);
  for (int64_t step = 2; step <= 20; step += 2) {
    (void)m.Report(step, Devices(healthy), {Link(2, 6, 4.0), Link(0, 1, 1.0)});
  }
  EXPECT_DOUBLE_EQ(m.link_rate(6, 2), 4.0);
  EXPECT_DOUBLE_EQ(m.link_rate(0, 1), 1.0);
  for (double r : m.device_rates()) EXPECT_EQ(r, 1.0);
  ASSERT_EQ(m.slow_links().size(), 1u);
  EXPECT_EQ(m.slow_links()[0].first, (std::pair<int, int>{2, 6}));
  for (const RateChangeRecord& c : m.history()) EXPECT_TRUE(c.is_link);
}

TEST_F(MonitorTest, AProbedDeviceOutsideThePlanIsSeenToRecover) {
  RateMonitor m(cluster());
  auto one = [](int d, double slowdown, bool probe) {
    return std::vector<DeviceSample>{DeviceSample{d, 1e-3 * slowdown, 1e-3, probe}};
  };
  for (int64_t step = 2; step <= 8; step += 2) (void)m.Report(step, one(3, 8.0, false), {});
  EXPECT_DOUBLE_EQ(m.device_rates()[3], 8.0);
  // Out of the plan: only its probe reports, still slow, then healthy.
  for (int64_t step = 10; step <= 20; step += 2) (void)m.Report(step, one(3, 8.0, true), {});
  EXPECT_DOUBLE_EQ(m.device_rates()[3], 8.0);
  for (int64_t step = 22; step <= 32; step += 2) (void)m.Report(step, one(3, 1.0, true), {});
  EXPECT_DOUBLE_EQ(m.device_rates()[3], 1.0);
  // Reports without a sample leave the state alone; empty samples are ignored.
  (void)m.Report(34, {DeviceSample{3, 0.0, 1e-3, true}}, {});
  EXPECT_DOUBLE_EQ(m.device_rates()[3], 1.0);
}

TEST_F(MonitorTest, AModerateShiftOfAStragglerReCommits) {
  RateMonitor m(cluster());
  std::vector<double> s(8, 1.0);
  s[1] = 2.0;
  for (int64_t step = 2; step <= 8; step += 2) (void)m.Report(step, Devices(s), {});
  EXPECT_DOUBLE_EQ(m.device_rates()[1], 2.0);
  s[1] = 2.4;  // a 20% move: below min_shift, stays
  for (int64_t step = 10; step <= 40; step += 2) (void)m.Report(step, Devices(s), {});
  EXPECT_DOUBLE_EQ(m.device_rates()[1], 2.0);
  s[1] = 4.0;  // doubles: re-commits
  for (int64_t step = 42; step <= 60; step += 2) (void)m.Report(step, Devices(s), {});
  EXPECT_DOUBLE_EQ(m.device_rates()[1], 4.0);
}

}  // namespace
}  // namespace motley::straggler
