// Re-planning tests: a straggler makes the re-planner move blocks away from it; with a short
// horizon it prefers the plan that moves the least state; an interleaved current plan moves and
// re-splits by device group.
#include "plan/replan.h"

#include <memory>

#include <gtest/gtest.h>

#include "plan/interleave.h"
#include "plan/test_util.h"
#include "spec/plan_topology.h"

namespace motley::plan {
namespace {

// 8 A100s in one node, Llama-2-7B, and its uniform ZeRO-1 plan of 2 pipelines of 4 stages.
std::unique_ptr<testing::World> EightA100() {
  return testing::MakeWorld({{"a", "a100-80g", 1, 8, "nvlink", "ib-hdr"}}, "ib-hdr", "llama2-7b",
                            16, 2048);
}
Result<spec::Plan> Dp2Pp4(const testing::World& w) {
  spec::UniformPlanOptions u;
  u.dp = 2;
  u.pp = 4;
  u.tp = 1;
  u.optimizer_sharding = spec::OptimizerSharding::kZero1;
  return spec::UniformPlan(w.cluster, w.model, w.train, u);
}

TEST(ReplanTest, StragglerShiftsWorkAndShortHorizonMovesLittle) {
  auto w = EightA100();
  auto current = Dp2Pp4(*w);
  ASSERT_TRUE(current.ok()) << current.status().message();
  ReplanOptions options;
  options.planner.rates.assign(8, 1.0);
  options.planner.rates[2] = 3.0;  // pipeline 0, stage 1
  options.horizon_steps = 1000;
  auto long_run = Replan(*w->predictor, *current, options);
  ASSERT_TRUE(long_run.ok()) << long_run.status().message();
  const double before = long_run->current.candidate.prediction.iteration_s;
  EXPECT_LT(long_run->chosen.candidate.prediction.iteration_s, 0.9 * before);
  EXPECT_LT(long_run->rebalanced.candidate.prediction.iteration_s, before);
  EXPECT_TRUE(spec::ValidatePlan(long_run->chosen.candidate.plan, w->cluster, w->model, w->train).ok());
  // The re-split of the current layout moves less state than any fresh plan with as many
  // pipelines. (A fresh plan of another width can keep more blocks in place by chance: here the
  // single 8-stage pipeline keeps all but three, since the step is bound by the other pipeline's
  // data-parallel tail and many re-splits tie.)
  ASSERT_FALSE(long_run->fresh.empty());
  int same_width = 0;
  for (const ReplanChoice& f : long_run->fresh) {
    if (f.candidate.plan.pipelines.size() != current->pipelines.size()) continue;
    ++same_width;
    EXPECT_LT(long_run->rebalanced.moved_bytes, f.moved_bytes) << f.candidate.description;
  }
  EXPECT_GT(same_width, 0);
  EXPECT_EQ(long_run->current.moved_bytes, 0);
  // A horizon of one step: moving anything costs more than it gains.
  options.horizon_steps = 1;
  auto short_run = Replan(*w->predictor, *current, options);
  ASSERT_TRUE(short_run.ok());
  EXPECT_LE(short_run->chosen.moved_bytes, long_run->chosen.moved_bytes);
  EXPECT_LE(short_run->chosen.score_s, short_run->current.score_s);
}

// An interleaved current plan (as `motley plan` now proposes): a device holds one block range per
// model chunk. The state to move counts every chunk, and the re-split of the current layout is
// over its device groups.
TEST(ReplanTest, InterleavedCurrentPlanMovesByChunkAndReSplitsItsGroups) {
  auto w = EightA100();
  auto one = Dp2Pp4(*w);
  ASSERT_TRUE(one.ok()) << one.status().message();
  ASSERT_EQ(w->model.num_blocks, 32);
  spec::Plan interleaved;
  ASSERT_TRUE(InterleavedWhereAllowed(*one, 2, &interleaved));
  ASSERT_TRUE(spec::ValidatePlan(interleaved, w->cluster, w->model, w->train).ok());
  Bytes bytes = -1;
  Seconds seconds = -1;
  MovedState(*w->predictor, interleaved, interleaved, &bytes, &seconds);
  EXPECT_EQ(bytes, 0);
  EXPECT_EQ(seconds, 0);
  // One chunk: group g holds blocks [8g, 8g + 8). Two chunks: [4g, 4g + 4) and [16 + 4g, 20 + 4g),
  // so groups 0 and 3 keep 4 blocks each and groups 1 and 2 none: 24 of 32 blocks move per
  // pipeline. Against a plan moving one block per pipeline (one boundary shifted by one): 24x.
  Bytes to_interleaved = 0;
  MovedState(*w->predictor, *one, interleaved, &to_interleaved, &seconds);
  spec::Plan shifted = *one;
  for (spec::PipelinePlan& pipe : shifted.pipelines) {
    --pipe.stages[0].num_blocks;
    ++pipe.stages[1].num_blocks;
    pipe.stages[1].first_block = pipe.stages[0].end_block();
  }
  Bytes one_block = 0;
  MovedState(*w->predictor, *one, shifted, &one_block, &seconds);
  ASSERT_GT(one_block, 0);
  EXPECT_NEAR(to_interleaved / one_block, 24.0, 1e-9);

  ReplanOptions options;
  options.planner.rates.assign(8, 1.0);
  options.planner.rates[2] = 3.0;  // pipeline 0, group 1
  options.horizon_steps = 1000;
  auto r = Replan(*w->predictor, interleaved, options);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->current.moved_bytes, 0);
  for (const ReplanChoice* c : {&r->rebalanced, &r->chosen}) {
    const Status valid = spec::ValidatePlan(c->candidate.plan, w->cluster, w->model, w->train);
    EXPECT_TRUE(valid.ok()) << c->candidate.description << ": " << valid.message();
    EXPECT_EQ(spec::PlanDevices(c->candidate.plan).size(), 8u) << c->candidate.description;
  }
  EXPECT_LT(r->rebalanced.candidate.prediction.iteration_s,
            r->current.candidate.prediction.iteration_s);
}

}  // namespace
}  // namespace motley::plan
