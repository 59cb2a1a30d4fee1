// Interleaving as a planner dimension (plan/interleave.h): the chunk rule, where it is allowed,
// and the planner choosing it where the predictor and the simulator find it faster.
#include "plan/interleave.h"

#include <cstdio>
#include <vector>

#include <gtest/gtest.h>

#include "core/sanitized_build.h"
#include "plan/planner.h"
#include "plan/test_util.h"
#include "sim/simulator.h"

namespace motley::plan {
namespace {

using testing::MakeWorld;

// One pipeline of `blocks.size()` single-device stages over devices 0, 1, ..., one chunk each.
spec::PipelinePlan OneChunkPipeline(const std::vector<int64_t>& blocks, int64_t micro_batches) {
  spec::PipelinePlan pipe;
  pipe.micro_batches = micro_batches;
  int64_t first = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    spec::StagePlan st;
    st.first_block = first;
    st.num_blocks = blocks[i];
    st.devices = {static_cast<int>(i)};
    st.has_embedding = i == 0;
    st.has_head = i + 1 == blocks.size();
    st.recompute = i == 1 ? spec::Recompute::kSelective : spec::Recompute::kNone;
    pipe.stages.push_back(st);
    first += blocks[i];
  }
  return pipe;
}

TEST(InterleaveTest, ChunkRuleKeepsEachGroupsBlocksAndPlacesEmbeddingAndHead) {
  const spec::PipelinePlan pipe = OneChunkPipeline({3, 2, 2, 3}, 8);
  ASSERT_TRUE(CanInterleave(pipe, 2));
  const spec::PipelinePlan two = InterleavePipeline(pipe, 2);
  ASSERT_EQ(two.chunks, 2);
  ASSERT_EQ(two.num_stages(), 4);
  ASSERT_EQ(two.stages.size(), 8u);
  // Group i's chunk c is virtual stage c * 4 + i; earlier chunks take the remainder.
  const std::vector<int64_t> blocks = {2, 1, 1, 2, 1, 1, 1, 1};
  int64_t first = 0;
  for (size_t s = 0; s < two.stages.size(); ++s) {
    const spec::StagePlan& st = two.stages[s];
    EXPECT_EQ(st.num_blocks, blocks[s]) << "virtual stage " << s;
    EXPECT_EQ(st.first_block, first) << "virtual stage " << s;
    EXPECT_EQ(st.devices, pipe.stages[s % 4].devices) << "virtual stage " << s;
    EXPECT_EQ(st.recompute, pipe.stages[s % 4].recompute) << "virtual stage " << s;
    EXPECT_EQ(st.has_embedding, s == 0);
    EXPECT_EQ(st.has_head, s + 1 == two.stages.size());
    first += st.num_blocks;
  }
  EXPECT_EQ(first, 10);
  EXPECT_EQ(two.micro_batches, 8);

  // The plan passes THE plan rule on a cluster and model of that shape.
  auto w = MakeWorld({{"n", "a100-80g", 1, 4, "nvlink", "ib-hdr"}}, "ib-hdr", "gpt2-124m", 8, 512);
  w->model.num_blocks = 10;
  w->Finish();
  spec::Plan plan;
  plan.pipelines = {pipe};
  spec::Plan interleaved;
  EXPECT_FALSE(InterleavedWhereAllowed(plan, 3, &interleaved)) << "groups of 2 blocks";
  ASSERT_TRUE(InterleavedWhereAllowed(plan, 2, &interleaved));
  const Status valid = spec::ValidatePlan(interleaved, w->cluster, w->model, w->train);
  EXPECT_TRUE(valid.ok()) << valid.message();
  EXPECT_EQ(InterleaveNote(interleaved), ", interleaved v=2");
  EXPECT_EQ(InterleaveNote(plan), "");
}

TEST(InterleaveTest, RefusesWhatInterleaved1F1BCannotRun) {
  EXPECT_FALSE(CanInterleave(OneChunkPipeline({4}, 4), 2)) << "one device group";
  EXPECT_FALSE(CanInterleave(OneChunkPipeline({3, 1, 3}, 6), 2)) << "a group of one block";
  EXPECT_TRUE(CanInterleave(OneChunkPipeline({3, 2, 3}, 6), 2)) << "m = 2p";
  EXPECT_TRUE(CanInterleave(OneChunkPipeline({3, 2, 3}, 5), 2)) << "m < 2p";
  EXPECT_FALSE(CanInterleave(OneChunkPipeline({3, 2, 3}, 7), 2)) << "2p <= m, not a multiple of p";
  EXPECT_FALSE(CanInterleave(OneChunkPipeline({3, 2, 3}, 6), 1));
  EXPECT_FALSE(CanInterleave(InterleavePipeline(OneChunkPipeline({4, 4}, 4), 2), 2))
      << "already interleaved";
  // Pipelines that cannot keep one chunk; a GPipe plan is not interleaved at all.
  spec::Plan plan;
  plan.pipelines = {OneChunkPipeline({2, 2}, 4), OneChunkPipeline({3, 1}, 4)};
  spec::Plan out;
  ASSERT_TRUE(InterleavedWhereAllowed(plan, 2, &out));
  EXPECT_EQ(out.pipelines[0].chunks, 2);
  EXPECT_EQ(out.pipelines[1].chunks, 1);
  EXPECT_EQ(InterleaveNote(out), ", interleaved v=2/1");
  plan.schedule = spec::PipelineSchedule::kGPipe;
  EXPECT_FALSE(InterleavedWhereAllowed(plan, 2, &out));
}

TEST(InterleaveTest, MovesMicroBatchesSoThatPipelinesCanInterleave) {
  // Two 2-group pipelines with 5 and 7 micro-batches (2p <= m, not multiples of p: neither runs
  // interleaved) and equal phases of 1 s: per micro-batch 1/6 s and 1/8 s.
  spec::Plan plan;
  plan.pipelines = {OneChunkPipeline({2, 2}, 5), OneChunkPipeline({2, 2}, 7)};
  spec::Plan out;
  EXPECT_FALSE(InterleavedWhereAllowed(plan, 2, &out));
  const spec::Plan moved = MicroBatchesForInterleaving(plan, {1.0, 1.0}, 2);
  // Kept 4 and 6, 2 freed, which go to the second in one accepted step of p = 2 (estimate
  // (8 + 1/2) / 8 s against (6 + 1/2) / 6 s for the first).
  ASSERT_EQ(moved.pipelines.size(), 2u);
  EXPECT_EQ(moved.pipelines[0].micro_batches, 4);
  EXPECT_EQ(moved.pipelines[1].micro_batches, 8);
  ASSERT_TRUE(InterleavedWhereAllowed(moved, 2, &out));
  EXPECT_EQ(InterleaveNote(out), ", interleaved v=2");
  // One pipeline: 10 kept at 8, and the 2 freed fit no accepted step (4), so they go back and the
  // pipeline keeps one chunk.
  spec::Plan alone;
  alone.pipelines = {OneChunkPipeline({2, 2, 2, 2}, 10)};
  EXPECT_EQ(MicroBatchesForInterleaving(alone, {1.0}, 2).pipelines[0].micro_batches, 10);
  // A pipeline that cannot interleave at this v (a group of one block) absorbs what is freed.
  spec::Plan mixed;
  mixed.pipelines = {OneChunkPipeline({2, 2}, 5), OneChunkPipeline({3, 1}, 5)};
  const spec::Plan to_other = MicroBatchesForInterleaving(mixed, {1.0, 1.0}, 2);
  EXPECT_EQ(to_other.pipelines[0].micro_batches, 4);
  EXPECT_EQ(to_other.pipelines[1].micro_batches, 6);
}

// The planner at TP 1 and micro-batch size 1, with the default interleaving degrees and without
// any (one chunk per group).
struct WithAndWithout {
  PlannerOptions options;
  Result<PlanReport> with = Err("not planned");
  Result<PlanReport> without = Err("not planned");
};
WithAndWithout PlanWithAndWithoutInterleaving(const perf::Predictor& predictor) {
  WithAndWithout out;
  out.options.tp_degrees = {1};
  out.options.micro_batch_sizes = {1};
  out.options.baselines = false;
  out.options.exhaustive_max_units = 0;
  if (kSanitizedBuild) out.options.recompute = {spec::Recompute::kNone};
  PlannerOptions one_chunk = out.options;
  one_chunk.interleave_chunks = {};
  out.with = PlanCluster(predictor, out.options);
  out.without = PlanCluster(predictor, one_chunk);
  return out;
}

// A node of 8 A100s over NVLink with a model that needs a pipeline at TP 1, and few micro-batches:
// the pipeline bubble is large and messages are cheap, where Narayanan et al. interleave.
TEST(InterleaveTest, PlannerInterleavesWhereItPaysAndTheSimulatorAgrees) {
  auto w =
      MakeWorld({{"n", "a100-80g", 1, 8, "nvlink", "ib-hdr"}}, "ib-hdr", "llama2-13b", 16, 2048);
  const WithAndWithout planned = PlanWithAndWithoutInterleaving(*w->predictor);
  const Result<PlanReport>& with = planned.with;
  const Result<PlanReport>& without = planned.without;
  ASSERT_TRUE(with.ok()) << with.status().message();
  ASSERT_TRUE(without.ok()) << without.status().message();
  const spec::Plan& plan = with->best.plan;
  std::printf("with interleaving: %s: %.4f s predicted, %.4f s simulated\n",
              with->best.description.c_str(), with->best.prediction.iteration_s,
              with->best.simulated_s);
  std::printf("one chunk: %s: %.4f s predicted, %.4f s simulated\n",
              without->best.description.c_str(), without->best.prediction.iteration_s,
              without->best.simulated_s);
  int most = 1;
  for (const spec::PipelinePlan& pipe : plan.pipelines) most = std::max(most, pipe.chunks);
  EXPECT_GT(most, 1) << with->best.description;
  const Status valid = spec::ValidatePlan(plan, w->cluster, w->model, w->train);
  EXPECT_TRUE(valid.ok()) << valid.message();
  EXPECT_TRUE(with->best.prediction.fits_memory);
  EXPECT_LT(with->best.prediction.iteration_s, without->best.prediction.iteration_s);
  EXPECT_LT(with->best.simulated_s, without->best.simulated_s);
}

// Interleaving is kept only where it is faster: over a slow link between single-device nodes it
// multiplies the pipeline messages, so the planner keeps one chunk, and its answer is never
// slower than the one-chunk search's.
TEST(InterleaveTest, PlannerNeverPicksASlowerInterleavedPlan) {
  auto w = MakeWorld({{"n", "a100-80g", 8, 1, "", "eth-25g"}}, "eth-25g", "llama2-7b", 16, 4096);
  const WithAndWithout planned = PlanWithAndWithoutInterleaving(*w->predictor);
  const Result<PlanReport>& with = planned.with;
  const Result<PlanReport>& without = planned.without;
  ASSERT_TRUE(with.ok()) << with.status().message();
  ASSERT_TRUE(without.ok()) << without.status().message();
  std::printf("with interleaving: %s: %.4f s; one chunk: %s: %.4f s\n",
              with->best.description.c_str(), with->best.prediction.iteration_s,
              without->best.description.c_str(), without->best.prediction.iteration_s);
  EXPECT_LE(with->ranked.front().prediction.iteration_s,
            without->ranked.front().prediction.iteration_s * (1 + 1e-12));
  EXPECT_LE(with->best.simulated_s, without->best.simulated_s * (1 + 1e-12));
  // The chosen pipeline could interleave, and that would be slower.
  const spec::Plan& plan = with->best.plan;
  ASSERT_EQ(InterleaveNote(plan), "") << with->best.description;
  for (int v : planned.options.interleave_chunks) {
    spec::Plan interleaved;
    ASSERT_TRUE(InterleavedWhereAllowed(plan, v, &interleaved)) << "v=" << v;
    EXPECT_GT(w->predictor->Predict(interleaved).iteration_s, with->best.prediction.iteration_s)
        << "v=" << v;
  }
}

}  // namespace
}  // namespace motley::plan
