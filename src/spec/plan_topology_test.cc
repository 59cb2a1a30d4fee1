// Plan topology: rank order, which stage holds which gradient layer, and the data-parallel
// groups per layer for uniform and mixed TP degrees and uneven stage splits.
#include "spec/plan_topology.h"

#include <gtest/gtest.h>

#include "spec/plan_test_util.h"

namespace motley::spec {
namespace {

constexpr int64_t kBlocks = 4;

using test_util::Stage;

PipelinePlan Pipeline(std::vector<StagePlan> stages) {
  PipelinePlan p;
  p.stages = std::move(stages);
  p.micro_batches = 2;
  return p;
}

// Groups of one layer, in the order DataParallelGroups lists them.
std::vector<LayerGroup> GroupsOf(const std::vector<LayerGroup>& all, int64_t layer) {
  std::vector<LayerGroup> out;
  for (const LayerGroup& g : all) {
    if (g.layer == layer) out.push_back(g);
  }
  return out;
}

TEST(PlanTopologyTest, StageHoldsItsBlocksAndItsEnds) {
  const StagePlan first = Stage(0, 2, true, false, {0});
  const StagePlan last = Stage(2, 2, false, true, {1});
  EXPECT_TRUE(StageHoldsLayer(first, 0, kBlocks));   // embedding
  EXPECT_TRUE(StageHoldsLayer(first, 1, kBlocks));   // block 0
  EXPECT_TRUE(StageHoldsLayer(first, 2, kBlocks));   // block 1
  EXPECT_FALSE(StageHoldsLayer(first, 3, kBlocks));  // block 2
  EXPECT_FALSE(StageHoldsLayer(first, 5, kBlocks));  // head
  EXPECT_FALSE(StageHoldsLayer(last, 0, kBlocks));
  EXPECT_FALSE(StageHoldsLayer(last, 2, kBlocks));
  EXPECT_TRUE(StageHoldsLayer(last, 3, kBlocks));
  EXPECT_TRUE(StageHoldsLayer(last, 4, kBlocks));
  EXPECT_TRUE(StageHoldsLayer(last, 5, kBlocks));
  EXPECT_EQ(NumGradientLayers(kBlocks), 6);
}

TEST(PlanTopologyTest, PlanDevicesAreAscendingWhateverTheStageOrder) {
  Plan plan;
  plan.pipelines = {Pipeline({Stage(0, 2, true, false, {9, 3}), Stage(2, 2, false, true, {7})}),
                    Pipeline({Stage(0, 4, true, true, {1})})};
  EXPECT_EQ(PlanDevices(plan), (std::vector<int>{1, 3, 7, 9}));
}

TEST(PlanTopologyTest, UniformTpDegreesGiveOneGroupPerTpRankOverUnevenSplits) {
  // Pipeline 0: blocks 0-1 on {0,1}, blocks 2-3 on {2,3}; pipeline 1: block 0 on {4,5},
  // blocks 1-3 on {6,7}. Block 1 (layer 2) lives on stage 0 of one and stage 1 of the other.
  Plan plan;
  plan.pipelines = {
      Pipeline({Stage(0, 2, true, false, {0, 1}), Stage(2, 2, false, true, {2, 3})}),
      Pipeline({Stage(0, 1, true, false, {4, 5}), Stage(1, 3, false, true, {6, 7})})};
  const std::vector<LayerGroup> groups = DataParallelGroups(plan, kBlocks);
  ASSERT_EQ(groups.size(), 12u);  // 6 layers x 2 TP ranks
  for (size_t i = 0; i < groups.size(); ++i) {
    EXPECT_EQ(groups[i].layer, static_cast<int64_t>(i / 2));
    EXPECT_EQ(groups[i].tp_rank, static_cast<int>(i % 2));
    EXPECT_FALSE(groups[i].mixed);
    EXPECT_EQ(groups[i].tp_degree, 2);
  }
  EXPECT_EQ(GroupsOf(groups, 0)[0].devices, (std::vector<int>{0, 4}));
  EXPECT_EQ(GroupsOf(groups, 0)[1].devices, (std::vector<int>{1, 5}));
  EXPECT_EQ(GroupsOf(groups, 2)[0].devices, (std::vector<int>{0, 6}));
  EXPECT_EQ(GroupsOf(groups, 2)[1].devices, (std::vector<int>{1, 7}));
  EXPECT_EQ(GroupsOf(groups, 5)[1].devices, (std::vector<int>{3, 7}));
}

TEST(PlanTopologyTest, MixedTpDegreesGiveOneGroupOfAllHolders) {
  // Pipeline 0 runs TP 2 on {4,5} for blocks 0-3; pipeline 1 runs blocks 0-1 on device 0 and
  // blocks 2-3 on TP 2 {2,3}: the first layers are mixed, the last ones uniform.
  Plan plan;
  plan.pipelines = {Pipeline({Stage(0, 4, true, true, {4, 5})}),
                    Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {3, 2})})};
  const std::vector<LayerGroup> groups = DataParallelGroups(plan, kBlocks);
  for (int64_t layer : {0, 1, 2}) {
    const std::vector<LayerGroup> g = GroupsOf(groups, layer);
    ASSERT_EQ(g.size(), 1u) << layer;
    EXPECT_TRUE(g[0].mixed);
    EXPECT_EQ(g[0].tp_degree, 1);
    EXPECT_EQ(g[0].devices, (std::vector<int>{0, 4, 5}));
  }
  for (int64_t layer : {3, 4, 5}) {
    const std::vector<LayerGroup> g = GroupsOf(groups, layer);
    ASSERT_EQ(g.size(), 2u) << layer;
    EXPECT_FALSE(g[0].mixed);
    // TP rank 0 of the second stage is device 3 (the stage lists {3, 2}).
    EXPECT_EQ(g[0].devices, (std::vector<int>{3, 4}));
    EXPECT_EQ(g[1].devices, (std::vector<int>{2, 5}));
  }
}

TEST(PlanTopologyTest, HoldingsCountHoldersAndMixedDegreesAsTheGroupsDo) {
  // The plan of MixedTpDegreesGiveOneGroupOfAllHolders plus a third pipeline on blocks 0-3 only
  // at TP 1 (so layers 0-2 stay mixed, layers 3-4 turn mixed, the head keeps two holders).
  Plan plan;
  plan.pipelines = {Pipeline({Stage(0, 4, true, true, {4, 5})}),
                    Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {3, 2})}),
                    Pipeline({Stage(0, 4, true, true, {6})})};
  const std::vector<LayerHolding> h = LayerHoldings(plan, kBlocks);
  ASSERT_EQ(h.size(), 6u);
  for (const LayerHolding& x : h) EXPECT_EQ(x.holders, 3);
  for (const LayerHolding& x : h) EXPECT_TRUE(x.mixed);
  EXPECT_EQ(Zero1ShardDegree(h[0]), 1);
  plan.pipelines.pop_back();
  const std::vector<LayerHolding> two = LayerHoldings(plan, kBlocks);
  const std::vector<LayerGroup> groups = DataParallelGroups(plan, kBlocks);
  for (int64_t layer = 0; layer < 6; ++layer) {
    const LayerHolding& x = two[static_cast<size_t>(layer)];
    const std::vector<LayerGroup> g = GroupsOf(groups, layer);
    EXPECT_EQ(x.holders, 2) << layer;
    EXPECT_EQ(x.mixed, g[0].mixed) << layer;
    // ZeRO-1 shards over a uniform layer's group, whose members are its holders.
    EXPECT_EQ(Zero1ShardDegree(x), x.mixed ? 1 : static_cast<int>(g[0].devices.size())) << layer;
  }
  EXPECT_EQ(Zero1ShardDegree(two[5]), 2);
  std::vector<int64_t> layers;
  ForEachGradientLayerOf(plan.pipelines[1].stages[1], kBlocks,
                         [&](int64_t l) { layers.push_back(l); });
  EXPECT_EQ(layers, (std::vector<int64_t>{3, 4, 5}));
}

TEST(PlanTopologyTest, LayerParamsMemoEqualsTheDirectCountsInAnyLookupOrder) {
  const ModelSpec model = test_util::TinyFourBlockModel();
  LayerParamsMemo memo(model);
  for (int tp : {2, 1, 2}) {  // a larger degree first, then a smaller one, then again
    for (int64_t layer = NumGradientLayers(model.num_blocks) - 1; layer >= 0; --layer) {
      const LayerParams direct = LayerParamsPerTpRank(model, layer, tp);
      EXPECT_EQ(memo.Of(layer, tp).sharded, direct.sharded) << layer << " tp " << tp;
      EXPECT_EQ(memo.Of(layer, tp).replicated, direct.replicated) << layer << " tp " << tp;
    }
  }
}

TEST(PlanTopologyTest, ALayerOnOneStageHasSingleMemberGroups) {
  Plan plan;
  plan.pipelines = {Pipeline({Stage(0, 4, true, true, {0, 1})})};
  const std::vector<LayerGroup> groups = DataParallelGroups(plan, kBlocks);
  ASSERT_EQ(groups.size(), 12u);
  for (const LayerGroup& g : groups) {
    EXPECT_EQ(g.devices, (std::vector<int>{g.tp_rank}));
  }
}

}  // namespace
}  // namespace motley::spec
