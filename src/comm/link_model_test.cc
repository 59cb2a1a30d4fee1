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

}  // namespace
}  // namespace motley::comm
