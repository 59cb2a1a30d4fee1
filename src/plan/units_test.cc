// Tests of units and layouts: TP groups inside nodes, balanced and segregated formations,
// contiguous versus strided placement.
#include "plan/units.h"

#include <gtest/gtest.h>

#include "perf/cluster_presets.h"

namespace motley::plan {
namespace {

spec::ClusterSpec Cluster() {
  auto c = perf::MakeCluster("u", {{"h", "h100", 2, 8, "nvlink", "ib-hdr"},
                                   {"a", "a100-80g", 1, 8, "nvlink", "ib-hdr"}},
                             "eth-25g");
  MOTLEY_CHECK(c.ok(), c.status().message());
  return *c;
}

TEST(UnitsTest, TpGroupsStayInsideNodes) {
  const spec::ClusterSpec c = Cluster();
  const int h100 = 0;
  TpAssignment tp(c.device_types.size(), 0);
  tp[h100] = 4;
  const std::vector<Unit> units = BuildUnits(c, tp);
  ASSERT_EQ(units.size(), 4u);  // 2 nodes x 8 / 4; the a100 node unused
  for (const Unit& u : units) {
    ASSERT_EQ(u.devices.size(), 4u);
    for (int d : u.devices) EXPECT_EQ(c.device(d).node, u.node);
  }
}

TEST(UnitsTest, BalancedAndSegregatedLayouts) {
  const spec::ClusterSpec c = Cluster();
  const std::vector<Unit> units = BuildUnits(c, TpAssignment{4, 4});
  const std::vector<Bucket> buckets = BucketUnits(units);
  ASSERT_EQ(units.size(), 6u);
  // 2 pipelines, each: 2 h100 units then 1 a100 unit; contiguous keeps a pipeline's h100 units on
  // one node, strided spreads them over both nodes.
  const Layout contiguous = BalancedLayout(units, buckets, 2, Placement::kContiguous, {0, 1});
  ASSERT_EQ(contiguous.size(), 2u);
  ASSERT_EQ(contiguous[0].size(), 3u);
  EXPECT_EQ(units[contiguous[0][0]].node, units[contiguous[0][1]].node);
  EXPECT_EQ(units[contiguous[0][2]].type, 1);
  const Layout strided = BalancedLayout(units, buckets, 2, Placement::kStrided, {0, 1});
  EXPECT_NE(units[strided[0][0]].node, units[strided[0][1]].node);
  // Every unit used exactly once.
  std::vector<int> all;
  for (const auto& p : strided) all.insert(all.end(), p.begin(), p.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  // Segregated by type: 1 h100 pipeline of 4 stages + 1 a100 pipeline of 2.
  const Layout seg = SegregatedLayout(units, buckets, 0, {1, 1}, Placement::kContiguous, {0, 1}, nullptr);
  ASSERT_EQ(seg.size(), 2u);
  EXPECT_EQ(seg[0].size(), 4u);
  EXPECT_EQ(seg[1].size(), 2u);
  // 7 pipelines for 6 units: some pipeline would be empty.
  EXPECT_TRUE(BalancedLayout(units, buckets, 7, Placement::kContiguous, {0, 1}).empty());
}

}  // namespace
}  // namespace motley::plan
