// Tests of the alpha-beta communication model: formula values, the slowest-link bound of a
// heterogeneous ring, and that GroupAllReduceTime keeps traffic off a slow inter-island link.
#include "perf/comm_model.h"

#include <gtest/gtest.h>

#include "perf/cluster_presets.h"

namespace motley::perf {
namespace {

TEST(CommModelTest, RingFormulas) {
  const spec::LinkClass link{"l", 1e-5, 1e10, 1.0};
  // 2(n-1) alpha + 2(n-1)/n S/B with n=4, S=1e9.
  EXPECT_DOUBLE_EQ(RingAllReduceTime(1e9, 4, link), 6 * 1e-5 + 1.5 * 1e9 / 1e10);
  EXPECT_DOUBLE_EQ(RingReduceScatterTime(1e9, 4, link), 3 * 1e-5 + 0.75 * 1e9 / 1e10);
  EXPECT_DOUBLE_EQ(RingAllReduceTime(1e9, 1, link), 0.0);
  EXPECT_DOUBLE_EQ(TreeAllReduceTime(1e9, 8, link), 6 * 1e-5 + 2 * 1e9 / 1e10);
  EXPECT_DOUBLE_EQ(P2PTime(1e9, link), 1e-5 + 0.1);
}

TEST(CommModelTest, HeterogeneousRingBoundedBySlowestHop) {
  const spec::LinkClass fast{"fast", 1e-6, 1e11, 1.0};
  const spec::LinkClass slow{"slow", 1e-5, 1e9, 1.0};
  const std::vector<const spec::LinkClass*> all_fast = {&fast, &fast, &fast, &fast};
  const std::vector<const spec::LinkClass*> one_slow = {&fast, &slow, &fast, &fast};
  const std::vector<const spec::LinkClass*> all_slow = {&slow, &slow, &slow, &slow};
  EXPECT_NEAR(HeterogeneousRingAllReduceTime(1e8, all_fast), RingAllReduceTime(1e8, 4, fast), 1e-12);
  EXPECT_NEAR(HeterogeneousRingAllReduceTime(1e8, one_slow), RingAllReduceTime(1e8, 4, slow), 1e-12);
  EXPECT_DOUBLE_EQ(HeterogeneousRingAllReduceTime(1e8, one_slow),
                   HeterogeneousRingAllReduceTime(1e8, all_slow));
}

TEST(CommModelTest, HierarchicalBeatsFlatRingAcrossSlowLink) {
  const spec::LinkClass fast{"fast", 1e-6, 1e11, 1.0};
  const spec::LinkClass slow{"slow", 1e-5, 1e9, 1.0};
  EXPECT_LT(HierarchicalAllReduceTime(1e9, 8, 2, fast, slow), RingAllReduceTime(1e9, 16, slow));
}

TEST(CommModelTest, GroupAllReduceInsideIslandIsCheaperThanAcross) {
  auto cluster = MakeCluster("two-islands",
                             {{"a", "a100-80g", 2, 8, "nvlink", "ib-hdr"},
                              {"b", "a100-80g", 2, 8, "nvlink", "ib-hdr"}},
                             "wan-10g");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  // Devices 0 and 8: nodes a-0 and a-1 (same island); 0 and 16: across islands.
  const Seconds inside = GroupAllReduceTime(*cluster, {0, 8}, 1e9);
  const Seconds across = GroupAllReduceTime(*cluster, {0, 16}, 1e9);
  EXPECT_NEAR(inside, RingAllReduceTime(1e9, 2, PresetLinkClass("ib-hdr")), 1e-12);
  EXPECT_NEAR(across, RingAllReduceTime(1e9, 2, PresetLinkClass("wan-10g")), 1e-12);
  EXPECT_LT(inside * 10, across);
  // Four devices in two islands: the hierarchy crosses the slow link with half the bytes.
  const Seconds mixed = GroupAllReduceTime(*cluster, {0, 8, 16, 24}, 1e9);
  EXPECT_LT(mixed, RingAllReduceTime(1e9, 4, PresetLinkClass("wan-10g")));
  EXPECT_DOUBLE_EQ(GroupAllReduceTime(*cluster, {5}, 1e9), 0.0);
}

}  // namespace
}  // namespace motley::perf
