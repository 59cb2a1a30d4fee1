// The step program built from a plan, with hand-computed element counts on a 4-block model
// (hidden 32, 4 heads, 2 kv heads, ffn 64, vocab 256: a block 9,280 parameters of which 64 norm
// weights, the embedding 8,192, the head 8,224): ordinary data parallelism over two pipelines,
// ZeRO-1's reduce-scatter and all-gather, an idle rank, mixed TP degrees, link reports, and the
// consistency check rejecting broken programs, and an interleaved pipeline's chunks.
#include "sched/step_program.h"

#include <gtest/gtest.h>

#include "spec/plan_test_util.h"

namespace motley::sched {
namespace {

using spec::test_util::Stage;

spec::ModelSpec Model() { return spec::test_util::TinyFourBlockModel(); }

constexpr int64_t kBlock = 9280;
constexpr int64_t kEmbedding = 8192;
constexpr int64_t kHead = 8224;

spec::PipelinePlan Pipe(std::vector<spec::StagePlan> stages, int64_t m = 2) {
  spec::PipelinePlan p;
  p.stages = std::move(stages);
  p.micro_batches = m;
  p.micro_batch_size = 1;
  return p;
}

// Two pipelines of two stages: devices {0, 1} and {2, 3}.
spec::Plan TwoByTwo() {
  spec::Plan plan;
  plan.pipelines = {Pipe({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}),
                    Pipe({Stage(0, 2, true, false, {2}), Stage(2, 2, false, true, {3})})};
  return plan;
}

StepProgram Build(const spec::Plan& plan, const StepProgramOptions& options = {}) {
  Result<StepProgram> p = BuildStepProgram(plan, Model(), 16, options);
  EXPECT_TRUE(p.ok()) << p.status().message();
  if (!p.ok()) return {};
  const Status check = CheckStepProgram(*p);
  EXPECT_TRUE(check.ok()) << check.message();
  return *p;
}

std::string Kinds(const RankStep& rs) {
  std::string out;
  for (const StepOp& op : rs.ops) {
    out += (out.empty() ? "" : " ") + std::string(StepOpKindName(op.kind));
    if (op.layer >= 0) out += std::to_string(op.layer);
  }
  return out;
}

TEST(StepProgramTest, DataParallelOverTwoPipelines) {
  const StepProgram p = Build(TwoByTwo());
  ASSERT_EQ(p.ranks.size(), 4u);
  EXPECT_EQ(Kinds(p.ranks[0]),
            "zero-grads pipeline all-reduce0 all-reduce1 all-reduce2 grad-norm loss-norm "
            "optimizer metrics plan-agreement");
  EXPECT_EQ(Kinds(p.ranks[3]),
            "zero-grads pipeline all-reduce3 all-reduce4 all-reduce5 grad-norm loss-norm "
            "optimizer metrics plan-agreement");
  // Local ops: every parameter zeroed and updated; pipeline 0 squares all, pipeline 1 none.
  EXPECT_EQ(p.ranks[0].ops[0].elements, kEmbedding + 2 * kBlock);
  EXPECT_EQ(p.ranks[1].ops[0].elements, 2 * kBlock + kHead);
  EXPECT_EQ(p.ranks[0].ops[5].elements, kEmbedding + 2 * kBlock);  // grad-norm
  EXPECT_EQ(p.ranks[2].ops[5].elements, 0);
  EXPECT_EQ(p.ranks[2].ops[7].elements, kEmbedding + 2 * kBlock);  // optimizer
  // 6 layer all-reduces (f32) then the world's three (f64).
  ASSERT_EQ(p.collectives.size(), 9u);
  EXPECT_EQ(p.collectives[0].members, (std::vector<int>{0, 2}));
  EXPECT_EQ(p.collectives[0].InputBytes(0), 4 * kEmbedding);
  EXPECT_EQ(p.collectives[5].members, (std::vector<int>{1, 3}));
  EXPECT_EQ(p.collectives[5].InputBytes(1), 4 * kHead);
  EXPECT_EQ(p.collectives[6].kind, StepOpKind::kLossNormAllReduce);
  EXPECT_EQ(p.collectives[6].InputBytes(0), 16);
  EXPECT_EQ(p.collectives[7].kind, StepOpKind::kMetricsAllGather);
  EXPECT_EQ(p.collectives[7].InputBytes(3), 8 * 13);
  EXPECT_EQ(p.collectives[7].elements, 4 * 13);
  EXPECT_EQ(p.collectives[8].InputBytes(0), 8);
  // The pipeline op carries the stage's action list without step actions.
  EXPECT_EQ(ActionToString(p.ranks[1].actions.front()), "RF0");
  EXPECT_EQ(p.ranks[1].actions.size(), 8u);
}

TEST(StepProgramTest, ZeroOneReduceScattersThenAllGathersAfterTheUpdate) {
  spec::Plan plan = TwoByTwo();
  plan.optimizer_sharding = spec::OptimizerSharding::kZero1;
  const StepProgram p = Build(plan);
  EXPECT_EQ(Kinds(p.ranks[2]),
            "zero-grads pipeline reduce-scatter0 reduce-scatter1 reduce-scatter2 grad-norm "
            "loss-norm optimizer optimizer0 all-gather0 optimizer1 all-gather1 optimizer2 "
            "all-gather2 metrics plan-agreement");
  const Collective& rs = p.collectives[0];
  EXPECT_EQ(rs.kind, StepOpKind::kLayerReduceScatter);
  EXPECT_EQ(rs.chunks, (std::vector<int64_t>{kEmbedding / 2, kEmbedding / 2}));
  EXPECT_EQ(rs.InputBytes(1), 4 * kEmbedding);
  // The block's 9,280 split evenly; the head's 8,224 too.
  const Collective& ag = p.collectives[p.ranks[2].ops[11].collective];
  EXPECT_EQ(ag.kind, StepOpKind::kLayerAllGather);
  EXPECT_EQ(ag.InputBytes(1), 4 * kBlock / 2);
  // Every layer is sharded: the whole-tensor optimizer has nothing left, each chunk's update
  // comes before its all-gather; the norm is summed on the host for ZeRO-1.
  EXPECT_EQ(p.ranks[2].ops[7].elements, 0);
  EXPECT_EQ(p.ranks[2].ops[8].elements, kEmbedding / 2);
  EXPECT_EQ(p.ranks[2].ops[10].elements, kBlock / 2);
  EXPECT_EQ(p.ranks[0].ops[5].elements, 0);
}

TEST(StepProgramTest, AnIdleRankJoinsOnlyTheWorldCollectives) {
  StepProgramOptions options;
  options.world_devices = {0, 1, 2, 3, 7};
  const StepProgram p = Build(TwoByTwo(), options);
  ASSERT_EQ(p.ranks.size(), 5u);
  EXPECT_TRUE(p.ranks[4].idle());
  EXPECT_EQ(p.ranks[4].device, 7);
  EXPECT_EQ(Kinds(p.ranks[4]), "loss-norm metrics plan-agreement");
  EXPECT_EQ(p.collectives.back().members.size(), 5u);
}

TEST(StepProgramTest, MixedTpDegreesSumFullSizeBuffers) {
  spec::Plan plan;
  plan.pipelines = {Pipe({Stage(0, 4, true, true, {0, 1})}),
                    Pipe({Stage(0, 2, true, false, {2}), Stage(2, 2, false, true, {3})})};
  const StepProgram p = Build(plan);
  // Layer 0 over all holders, full size; rank 1 (TP rank 1 of degree 2) joins it too.
  const Collective& emb = p.collectives[0];
  EXPECT_TRUE(emb.mixed);
  EXPECT_EQ(emb.members, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(emb.InputBytes(1), 4 * kEmbedding);
  const Collective& block = p.collectives[1];
  EXPECT_EQ(block.InputBytes(0), 4 * kBlock);
  // Rank 1 zeroes a TP-2 shard of four blocks plus the replicated embedding and head.
  EXPECT_EQ(p.ranks[1].ops[0].elements, kEmbedding + kHead + 4 * ((kBlock - 64) / 2 + 64));
  // Pipeline 0's TP rank 1 squares only its shards.
  EXPECT_EQ(p.ranks[1].ops[2 + 6].elements, 4 * (kBlock - 64) / 2);
}

// Peers over a TP 2 -> TP 1 -> TP 2 pipeline (spec::BoundaryPeer, BoundaryReceivers): only TP
// rank 0 sends to the single rank, which sends gradients back to both; it sends its output to
// both ranks of the next stage, of which only TP rank 0 sends the gradient back.
TEST(StepProgramTest, PipelinePeersAcrossDifferentTpDegrees) {
  spec::Plan plan;
  plan.pipelines = {Pipe({Stage(0, 2, true, false, {0, 1}), Stage(2, 1, false, false, {2}),
                          Stage(3, 1, false, true, {3, 4})})};
  const StepProgram p = Build(plan);
  EXPECT_EQ(p.ranks[0].chunks[0].forward_destinations, (std::vector<int>{2}));
  EXPECT_TRUE(p.ranks[1].chunks[0].forward_destinations.empty());
  EXPECT_EQ(p.ranks[0].chunks[0].backward_source, 2);
  EXPECT_EQ(p.ranks[1].chunks[0].backward_source, 2);
  EXPECT_EQ(p.ranks[2].chunks[0].forward_source, 0);
  EXPECT_EQ(p.ranks[2].chunks[0].backward_destinations, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.ranks[2].chunks[0].forward_destinations, (std::vector<int>{3, 4}));
  EXPECT_EQ(p.ranks[2].chunks[0].backward_source, 3);
  EXPECT_EQ(p.ranks[4].chunks[0].forward_source, 2);
  EXPECT_TRUE(p.ranks[4].chunks[0].backward_destinations.empty());
  EXPECT_EQ(p.ranks[3].chunks[0].backward_destinations, (std::vector<int>{2}));
  EXPECT_EQ(p.ranks[0].chunks[0].forward_source, -1);
  EXPECT_EQ(p.ranks[4].chunks[0].backward_source, -1);
  EXPECT_EQ(p.ranks[0].message_bytes, 4 * 16 * 32);
}

// Every TP rank of a stage lists the group (world ranks in TP-rank order) and the all-reduces its
// forwards and backwards run: 2 per block each way, 2 more per block in a full-recompute backward;
// a TP-1 stage lists none. The check rejects a group that disagrees between its members.
TEST(StepProgramTest, TensorParallelGroupsAndTheirAllReducesPerMicroBatch) {
  spec::Plan plan;
  plan.pipelines = {Pipe({Stage(0, 3, true, false, {3, 1}), Stage(3, 1, false, true, {2})}),
                    Pipe({Stage(0, 4, true, true, {0, 4})})};
  plan.pipelines[0].stages[0].recompute = spec::Recompute::kFull;
  plan.pipelines[1].stages[0].recompute = spec::Recompute::kSelective;
  const StepProgram p = Build(plan);
  EXPECT_EQ(p.ranks[3].tp_members, (std::vector<int>{3, 1}));
  EXPECT_EQ(p.ranks[1].tp_members, (std::vector<int>{3, 1}));
  EXPECT_EQ(p.ranks[1].chunks[0].tp_all_reduces.forward, 6);
  EXPECT_EQ(p.ranks[1].chunks[0].tp_all_reduces.backward, 12);
  EXPECT_TRUE(p.ranks[2].tp_members.empty());
  EXPECT_EQ(p.ranks[2].chunks[0].tp_all_reduces.forward, 0);
  EXPECT_EQ(p.ranks[4].chunks[0].tp_all_reduces.forward, 8);
  EXPECT_EQ(p.ranks[4].chunks[0].tp_all_reduces.backward, 8);  // selective recomputes no matmul
  EXPECT_NE(StepProgramToString(p).find("    tp all-reduces [0 4]: 8 per forward, 8 per "
                                        "backward, 2048 B\n"),
            std::string::npos);

  StepProgram wrong = p;
  wrong.ranks[1].chunks[0].tp_all_reduces.backward = 6;
  const Status s = CheckStepProgram(wrong);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("TP group differs"), std::string::npos) << s.message();
}

// Interleaved 1F1B: device groups {0, 1} (TP 2) and {2}, two chunks each (virtual stages
// {0,1} | {2} | {0,1} | {2}, one block each), beside a plain pipeline {3} | {4}. Each rank of the
// interleaved pipeline has a chunk per virtual stage it runs, with that stage's peers (chunk 1 of
// group 0 receives from group 1's chunk 0, across the wrap) and TP all-reduces; its actions name
// both chunks; its holdings are both chunks' layers, in the data-parallel groups of each layer.
TEST(StepProgramTest, InterleavedPipelineHasAChunkPerVirtualStage) {
  spec::Plan plan;
  plan.pipelines = {Pipe({Stage(0, 1, true, false, {0, 1}), Stage(1, 1, false, false, {2}),
                          Stage(2, 1, false, false, {0, 1}), Stage(3, 1, false, true, {2})}),
                    Pipe({Stage(0, 2, true, false, {3}), Stage(2, 2, false, true, {4})})};
  plan.pipelines[0].chunks = 2;
  const StepProgram p = Build(plan);
  ASSERT_EQ(p.ranks[0].chunks.size(), 2u);
  ASSERT_EQ(p.ranks[2].chunks.size(), 2u);
  ASSERT_EQ(p.ranks[3].chunks.size(), 1u);
  EXPECT_EQ(p.ranks[2].stage, 1);
  const ChunkStep& r0c0 = p.ranks[0].chunks[0];
  const ChunkStep& r0c1 = p.ranks[0].chunks[1];
  const ChunkStep& r2c0 = p.ranks[2].chunks[0];
  const ChunkStep& r2c1 = p.ranks[2].chunks[1];
  EXPECT_EQ(r0c0.virtual_stage, 0);
  EXPECT_EQ(r0c1.virtual_stage, 2);
  EXPECT_EQ(r2c0.virtual_stage, 1);
  EXPECT_EQ(r2c1.virtual_stage, 3);
  EXPECT_EQ(r0c0.forward_source, -1);
  EXPECT_EQ(r0c0.forward_destinations, (std::vector<int>{2}));
  EXPECT_EQ(r0c1.forward_source, 2);  // across the wrap
  EXPECT_EQ(r0c1.forward_destinations, (std::vector<int>{2}));
  EXPECT_EQ(r0c1.backward_destinations, (std::vector<int>{2}));
  EXPECT_TRUE(p.ranks[1].chunks[1].backward_destinations.empty());
  EXPECT_EQ(p.ranks[1].chunks[1].forward_source, 2);
  EXPECT_EQ(r2c0.forward_destinations, (std::vector<int>{0, 1}));
  EXPECT_EQ(r2c0.backward_source, 0);
  EXPECT_EQ(r2c1.forward_source, 0);
  EXPECT_TRUE(r2c1.forward_destinations.empty());
  EXPECT_EQ(r2c1.backward_source, -1);
  EXPECT_EQ(r2c1.backward_destinations, (std::vector<int>{0, 1}));
  EXPECT_EQ(r0c0.tp_all_reduces.forward, 2);
  EXPECT_EQ(r0c1.tp_all_reduces.backward, 2);
  EXPECT_EQ(r2c0.tp_all_reduces.forward, 0);
  bool chunk_one = false;
  for (const Action& a : p.ranks[0].actions) chunk_one = chunk_one || a.chunk == 1;
  EXPECT_TRUE(chunk_one);
  // Rank 2 holds blocks 1 and 3 and the head; rank 0 the embedding and TP shards of blocks 0, 2.
  EXPECT_EQ(p.ranks[2].ops[0].elements, 2 * kBlock + kHead);
  EXPECT_EQ(p.ranks[0].ops[0].elements, kEmbedding + 2 * ((kBlock - 64) / 2 + 64));
  // Block 2 (layer 3): group 0's chunk 1 and the plain pipeline's device 4, mixed TP degrees.
  bool found = false;
  for (const Collective& c : p.collectives) {
    if (c.layer != 3) continue;
    found = true;
    EXPECT_TRUE(c.mixed);
    EXPECT_EQ(c.members, (std::vector<int>{0, 1, 4}));
  }
  EXPECT_TRUE(found);
  EXPECT_NE(StepProgramToString(p).find("chunk 1: from 2"), std::string::npos)
      << StepProgramToString(p);
  // A virtual stage off its device group (spec::ValidatePlan refuses it) is an error here too.
  spec::Plan off = plan;
  off.pipelines[0].stages[3].devices = {3};
  EXPECT_EQ(BuildStepProgram(off, Model(), 16).status().message(),
            "step program: pipelines[0].stages[3] uses device 3, which is not in its device "
            "group 1");
}

TEST(StepProgramTest, LinkReportsWidenTheMetrics) {
  StepProgramOptions options;
  options.link_reports = true;
  const StepProgram p = Build(TwoByTwo(), options);
  const Collective& metrics = p.collectives[7];
  EXPECT_EQ(metrics.InputBytes(0), 8 * (13 + 3 * 4));
}

TEST(StepProgramTest, BuildRejectsADeviceOutsideTheWorld) {
  StepProgramOptions options;
  options.world_devices = {0, 1, 2};
  Result<StepProgram> p = BuildStepProgram(TwoByTwo(), Model(), 16, options);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("device 3"), std::string::npos) << p.status().message();
}

TEST(StepProgramTest, CheckRejectsADroppedCollectiveAndABadOrder) {
  StepProgram dropped = Build(TwoByTwo());
  dropped.ranks[2].ops.erase(dropped.ranks[2].ops.begin() + 3);  // all-reduce of layer 1
  Status s = CheckStepProgram(dropped);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("collective 1"), std::string::npos) << s.message();

  StepProgram swapped = Build(TwoByTwo());
  std::swap(swapped.ranks[0].ops[2], swapped.ranks[0].ops[3]);
  s = CheckStepProgram(swapped);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 0 op 3"), std::string::npos) << s.message();
}

TEST(StepProgramTest, PrintsOneBlockPerRank) {
  const std::string text = StepProgramToString(Build(TwoByTwo()), 3);
  EXPECT_NE(text.find("rank 1 (device 1): pipeline 0 stage 1, tp 0 of 1\n"
                      "  zero-grads 26784\n"
                      "  pipeline RF0 F0 B0 ... (5 more) (from 0; gradients to [0]; 2048 B)\n"
                      "  all-reduce layer 3 [1 3] 37120 B\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  loss-norm [world] 16 B\n  optimizer 26784\n  metrics [world] 104 B\n"
                      "  plan-agreement [world] 8 B\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace motley::sched
