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

// Two nodes of two devices joined by `net` (10 us, 10 GB/s); each node's network cards are one
// `net` card, or `cards` of them.
spec::ClusterSpec TwoNodes(int cards) {
  std::string nics = "[net";
  for (int i = 1; i < cards; ++i) nics += ", net";
  nics += "]";
  const std::string yaml = R"(
device_types:
  - {name: g, vendor: cuda, peak_flops: 100 TFLOPS, memory: 80 GiB, memory_bandwidth: 2 TB/s}
link_classes:
  - {name: fast, latency: 0 us, bandwidth: 100 GB/s, efficiency: 1.0}
  - {name: net, latency: 10 us, bandwidth: 10 GB/s, efficiency: 1.0}
nodes:
  - {name: a, device_type: g, device_count: 2, intra_link: fast, nics: )" + nics + R"(}
  - {name: b, device_type: g, device_count: 2, intra_link: fast, nics: )" + nics + R"(}
islands:
  - {name: rack, nodes: [a, b], link: net}
)";
  Result<spec::ClusterSpec> c = spec::ParseClusterSpec(yaml, "two-nodes");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

// The fastest candidate algorithm of one all-reduce over `devices`, alone on the network.
Seconds BestAlone(const spec::ClusterSpec& cluster, const std::vector<int>& devices, Bytes bytes,
                  bool shared) {
  const Network network(cluster, shared);
  Seconds best = 1e300;
  for (const CollectiveFlows& c : AllReduceCandidates(cluster, devices, bytes)) {
    best = std::min(best, ConcurrentCollectiveTimes(network, {&c}).front());
  }
  return best;
}

// Two all-reduces (the TP colours of one layer: devices {0, 2} and {1, 3}, one member per node)
// cross the same single-card NICs at once: each gets half the card. Hand-computed for S = 1 GB:
// a 2-member ring moves S over each hop in 2 steps of S/2, alone 2 x 10 us + 1 GB / 10 GB/s, shared
// 2 x 10 us + 1 GB / 5 GB/s. With two pooled cards per node, sharing two ways costs nothing.
TEST(CommModelTest, ConcurrentAllReducesShareANodesNic) {
  const Bytes s = 1e9;
  const spec::ClusterSpec one = TwoNodes(1);
  const Network shared(one, true);
  const CollectiveFlows a{AllReduceAlgorithm::kRing, {RingPhase({0, 2}, 2, s / 2)}};
  const CollectiveFlows b{AllReduceAlgorithm::kRing, {RingPhase({1, 3}, 2, s / 2)}};
  EXPECT_NEAR(ConcurrentCollectiveTimes(shared, {&a}).front(), 2e-5 + 0.1, 1e-12);
  const std::vector<Seconds> both = ConcurrentCollectiveTimes(shared, {&a, &b});
  EXPECT_NEAR(both[0], 2e-5 + 0.2, 1e-12);
  EXPECT_NEAR(both[1], 2e-5 + 0.2, 1e-12);
  // Unshared links (nic_contention off): each at its link's bandwidth.
  const Network unshared(one, false);
  EXPECT_NEAR(ConcurrentCollectiveTimes(unshared, {&a, &b})[1], 2e-5 + 0.1, 1e-12);
  const spec::ClusterSpec two = TwoNodes(2);
  const Network pooled(two, true);
  EXPECT_NEAR(ConcurrentCollectiveTimes(pooled, {&a, &b})[0], 2e-5 + 0.1, 1e-12);
  EXPECT_NEAR(GroupAllReduceTime(one, {0, 2}, s), 2e-5 + 0.1, 1e-12);
  // Each flow alone over given paths (the predictor passes its slowed links): twice the latency
  // and half the bandwidth, twice the time.
  EXPECT_NEAR(CollectiveTimeAlone(one, a), 2e-5 + 0.1, 1e-12);
  const FlowPathFn slowed = [&](int from, int to) {
    FlowPath p = unshared.Path(from, to);
    p.latency_s *= 2;
    p.cap /= 2;
    return p;
  };
  EXPECT_NEAR(CollectiveTimeAlone(one, a, slowed), 2 * (2e-5 + 0.1), 1e-12);
  EXPECT_NEAR(GroupAllReduceTime(one, {0, 2}, s, slowed), 2 * (2e-5 + 0.1), 1e-12);
}

// A collective's own concurrent flows share the card too. Over all four devices the hierarchy
// reduce-scatters inside each node (1 step of S/2 at 100 GB/s: 0.005 s), runs two cross-node
// all-reduces of S/2 at once, one per local rank (each a 2-member ring moving S/2 over each hop:
// with one card 5 GB/s per flow, 2 x 10 us + 0.1 s; with two cards 10 GB/s, 2 x 10 us + 0.05 s),
// then all-gathers inside each node (0.005 s). The flat ring 0-1-2-3 crosses each node's card
// once per direction: 6 steps of S/4 over a 10 GB/s hop (6 (10 us + 0.025 s) = 0.15006 s), and
// the tree across the two nodes reduces then broadcasts S/2 per flow (2 (10 us + 0.1 s) with one
// card): both slower than the ring hierarchy.
TEST(CommModelTest, AHierarchysConcurrentCrossNodeFlowsShareTheCard) {
  const Bytes s = 1e9;
  const spec::ClusterSpec one = TwoNodes(1);
  const spec::ClusterSpec two = TwoNodes(2);
  EXPECT_NEAR(BestAlone(one, {0, 1, 2, 3}, s, true), 0.01 + 2e-5 + 0.1, 1e-12);
  EXPECT_NEAR(BestAlone(two, {0, 1, 2, 3}, s, true), 0.01 + 2e-5 + 0.05, 1e-12);
  // Unshared links (nic_contention off): as with two cards.
  EXPECT_NEAR(BestAlone(one, {0, 1, 2, 3}, s, false), 0.01 + 2e-5 + 0.05, 1e-12);
  EXPECT_NEAR(GroupAllReduceTime(one, {0, 1, 2, 3}, s), 0.01 + 2e-5 + 0.05, 1e-12);
  const std::vector<CollectiveFlows> c = AllReduceCandidates(one, {0, 1, 2, 3}, s);
  ASSERT_EQ(c.size(), 3U);
  EXPECT_EQ(c[0].algorithm, AllReduceAlgorithm::kRing);
  EXPECT_EQ(c[1].algorithm, AllReduceAlgorithm::kHierarchyRing);
  EXPECT_EQ(c[2].algorithm, AllReduceAlgorithm::kHierarchyTree);
  const Network shared(one, true);
  EXPECT_NEAR(ConcurrentCollectiveTimes(shared, {&c[0]}).front(), 6 * (1e-5 + 0.025), 1e-12);
  EXPECT_NEAR(ConcurrentCollectiveTimes(shared, {&c[2]}).front(), 0.01 + 2 * (1e-5 + 0.1), 1e-12);
}

}  // namespace
}  // namespace motley::perf
