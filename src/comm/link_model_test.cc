// Tests for the link model and the alpha-beta ring formulas.
#include "comm/link_model.h"

#include <gtest/gtest.h>

namespace motley::comm {
namespace {

TEST(LinkModelTest, TransferTimeIsLatencyPlusBytesOverBandwidth) {
  LinkModel l{1e-3, 1e9};
  EXPECT_DOUBLE_EQ(l.TransferTime(0.0), 1e-3);
  EXPECT_DOUBLE_EQ(l.TransferTime(1e9), 1.0 + 1e-3);
}

TEST(LinkModelTest, RingFormulas) {
  std::vector<LinkModel> ring(4, LinkModel{1e-5, 1e10});
  const double s = 1 << 20;
  EXPECT_DOUBLE_EQ(RingAllReduceTime(ring, s), 6.0 * (1e-5 + s / 4.0 / 1e10));
  EXPECT_DOUBLE_EQ(RingReduceScatterTime(ring, s), 3.0 * (1e-5 + s / 4.0 / 1e10));
  ring[2].bandwidth_bytes_per_s = 1e9;  // the slowest link bounds each step
  EXPECT_DOUBLE_EQ(RingAllGatherTime(ring, s), 3.0 * (1e-5 + s / 4.0 / 1e9));
  EXPECT_DOUBLE_EQ(RingAllReduceTime({LinkModel{}}, s), 0.0);
}

TEST(LinkMatrixTest, SetAndValidate) {
  LinkMatrix m(3, LinkModel{0.0, 1e9});
  m.SetBoth(0, 2, LinkModel{1e-3, 1e6});
  EXPECT_DOUBLE_EQ(m.link(2, 0).bandwidth_bytes_per_s, 1e6);
  EXPECT_DOUBLE_EQ(m.link(0, 1).bandwidth_bytes_per_s, 1e9);
  EXPECT_TRUE(m.Validate().ok());
  m.Set(1, 2, LinkModel{-1.0, 1e9});
  Status s = m.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("link 1->2: latency_s"), std::string::npos) << s.message();
}

TEST(LinkMatrixTest, RateScheduleSlowsOnePairFromAStepOn) {
  LinkMatrix m(3, LinkModel{1e-3, 1e9});
  m.SetRateSchedule(2, 0, {{20, 1.0}, {10, 0.25}});  // unsorted on purpose
  EXPECT_DOUBLE_EQ(m.RateAt(0, 2, 9), 1.0);
  EXPECT_DOUBLE_EQ(m.RateAt(0, 2, 10), 0.25);
  EXPECT_DOUBLE_EQ(m.RateAt(2, 0, 19), 0.25);  // both directions
  EXPECT_DOUBLE_EQ(m.RateAt(2, 0, 20), 1.0);
  EXPECT_DOUBLE_EQ(m.RateAt(0, 1, 15), 1.0);  // other pairs untouched
  // A quarter-speed link takes four times as long for any size.
  EXPECT_DOUBLE_EQ(m.LinkAt(0, 2, 12).TransferTime(1e6), 4.0 * m.link(0, 2).TransferTime(1e6));
  EXPECT_DOUBLE_EQ(m.LinkAt(0, 2, 25).TransferTime(1e6), m.link(0, 2).TransferTime(1e6));
  EXPECT_DOUBLE_EQ(m.link(0, 2).bandwidth_bytes_per_s, 1e9);  // the nominal link is kept
  m.SetRateSchedule(0, 2, {});
  EXPECT_DOUBLE_EQ(m.RateAt(0, 2, 12), 1.0);
}

}  // namespace
}  // namespace motley::comm
