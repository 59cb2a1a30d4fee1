// The runtime does what the step program says (sched/step_program.h): a recording communicator
// wrapped around each rank's world logs every Split and every collective of ParallelRank::Create
// and one ParallelRank::Step, on threads, and each rank's log equals, entry for entry, its
// RankStep: the TP group's split and one split per gradient layer (the group's size and the
// rank's place in it, or none), then the step's messages in order: the pipeline's sends and
// receives (bytes, peer) as its action list and peers say, the TP all-reduces of every forward and
// backward ("tp-" calls, as RankStep::tp_members and tp_all_reduces say), and the collectives
// (kind, bytes in, group size): layer all-reduces or ZeRO-1 reduce-scatters, the world's loss-norm
// all-reduce, ZeRO-1 all-gathers. Sixteen plans: uniform and mixed TP degrees, uneven stages,
// GPipe, ZeRO-1 (uneven chunks, mixed groups, idle rank), an idle rank in a world larger than the
// plan, a single pipeline, TP with full and selective recompute. A mutated program (one collective
// dropped, one byte count changed, a TP all-reduce count or group changed) fails the comparison.
// The training loop (train::TrainParallelProcess, ranks as threads) is recorded too: over two
// steps its world log is the set-up's splits, step 1, the metrics all-gather and the plan
// agreement the program lists between steps, step 2 and its metrics all-gather (no plan switch
// is asked after the last step).
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "comm/local_world.h"
#include "parallel/parallel_rank.h"
#include "parallel/world_layout.h"
#include "parallel_test_util.h"
#include "sched/step_program.h"
#include "step_program_recording.h"
#include "train/parallel_trainer.h"

namespace motley::parallel {
namespace {

using recording::Call;
using recording::CompareRank;
using recording::GPipe;
using recording::InterleavedTp;
using recording::Log;
using recording::MixedDepths;
using recording::MixedThreeReplicas;
using recording::ProgramOf;
using recording::RecordingCommunicator;
using recording::ThreeReplicas;
using recording::TwoByTwo;
using recording::UniformTpUneven;
using recording::Zero1;
using testing::MakePlan;
using testing::Pipeline;
using testing::Stage;

// Runs ParallelRank::Create and one Step on every rank of the world (one thread per rank) and
// returns each rank's log; the set-up log keeps only splits (ZeRO-1's layout check is set-up).
std::vector<Log> Record(const spec::Plan& plan, const std::vector<int>& world_devices) {
  const spec::RunFile run = testing::TinyRun(1);
  Result<WorldLayout> layout = WorldLayout::Build(plan, world_devices);
  EXPECT_TRUE(layout.ok()) << layout.status().message();
  if (!layout.ok()) return {};
  const int n = layout->size();
  std::shared_ptr<comm::LocalWorld> world = comm::LocalWorld::Create(n);
  std::vector<Log> logs(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& s) {
        errors[static_cast<size_t>(r)] = s.message();
        world->Abort(s.message());
      };
      Result<std::unique_ptr<comm::Communicator>> connected = world->Connect(r);
      if (!connected.ok()) return fail(connected.status());
      Log& log = logs[static_cast<size_t>(r)];
      RecordingCommunicator recording(std::move(*connected), &log, "", true);
      backend::CpuBackend backend(1, r);
      auto rank = ParallelRank::Create(*layout, r, run.model, run.train, backend, recording);
      if (!rank.ok()) return fail(rank.status());
      recording::KeepSetupSplits(log);
      log.current = &log.step;
      int64_t samples = 0;
      if (!layout->rank(r).idle()) samples = layout->pipeline_of(r).samples_per_step();
      const std::vector<int32_t> tokens(static_cast<size_t>(samples * run.train.seq_len), 1);
      auto result = (*rank)->Step(1, tokens, tokens);
      if (!result.ok()) return fail(result.status());
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  return logs;
}

// Runs `steps` steps of the training loop on every rank of the world (one thread per rank, each
// through TrainParallelProcess over a recording LocalWorld rank) and returns each rank's whole
// log, set-up and steps in one list (in Log::setup).
std::vector<Log> RecordTraining(const spec::Plan& plan, const std::vector<int>& world_devices,
                                int64_t steps) {
  spec::RunFile run = testing::TinyRun(steps);
  run.train.global_batch = 0;  // the plan's samples per step
  for (const spec::PipelinePlan& pipe : plan.pipelines) {
    run.train.global_batch += pipe.micro_batches * pipe.micro_batch_size;
  }
  const int n = static_cast<int>(world_devices.size());
  std::shared_ptr<comm::LocalWorld> world = comm::LocalWorld::Create(n);
  std::vector<Log> logs(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      train::ParallelTrainerOptions options;
      options.out = nullptr;
      options.world_devices = world_devices;
      const train::ConnectWorld connect =
          [&, r](const comm::Emulation& emulation) -> Result<std::unique_ptr<comm::Communicator>> {
        MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> inner,
                                world->Connect(r, options.comm, emulation));
        return std::unique_ptr<comm::Communicator>(std::make_unique<RecordingCommunicator>(
            std::move(inner), &logs[static_cast<size_t>(r)], "", true));
      };
      Result<train::ParallelTrainSummary> summary =
          train::TrainParallelProcess(run, plan, options, connect);
      if (!summary.ok()) errors[static_cast<size_t>(r)] = summary.status().message();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  return logs;
}

// What the program says the loop logs over `steps` steps: the set-up's splits, then every step's
// calls, each followed by the metrics all-gather (every rank's packed metrics, f64) and, but after
// the last step, the plan agreement (a broadcast from rank 0).
std::vector<Call> ExpectedTraining(const sched::StepProgram& program, int r, int64_t num_layers,
                                   int64_t steps) {
  const Log one = recording::Expected(program, r, num_layers);
  std::vector<Call> want = one.setup;
  for (int64_t step = 1; step <= steps; ++step) {
    want.insert(want.end(), one.step.begin(), one.step.end());
    for (const sched::StepOp& op : program.ranks[static_cast<size_t>(r)].ops) {
      if (!sched::IsBetweenSteps(op.kind)) continue;
      if (op.kind == sched::StepOpKind::kPlanAgreement && step == steps) continue;
      const sched::Collective& c = program.collectives[static_cast<size_t>(op.collective)];
      const auto q = static_cast<size_t>(std::find(c.members.begin(), c.members.end(), r) -
                                         c.members.begin());
      want.push_back(Call{op.kind == sched::StepOpKind::kMetricsAllGather ? "allgather"
                                                                          : "broadcast",
                          c.InputBytes(q), static_cast<int64_t>(c.members.size())});
    }
  }
  return want;
}

void ExpectTrainingLoopFollowsTheProgram(const spec::Plan& plan, const std::vector<int>& world) {
  const sched::StepProgram program = ProgramOf(plan, world);
  ASSERT_TRUE(sched::CheckStepProgram(program).ok());
  constexpr int64_t kSteps = 2;
  const std::vector<Log> logs = RecordTraining(plan, world, kSteps);
  ASSERT_EQ(logs.size(), world.size());
  for (size_t r = 0; r < logs.size(); ++r) {
    const std::vector<Call> want = ExpectedTraining(
        program, static_cast<int>(r), testing::TinyModel().num_blocks + 2, kSteps);
    EXPECT_TRUE(logs[r].setup == want) << "rank " << r << ": logged " << ToString(logs[r].setup)
                                       << "\nprogram " << ToString(want);
  }
}

// Differences between the logs and the program, one line per rank that differs; "" when equal.
std::string Compare(const std::vector<Log>& logs, const sched::StepProgram& program,
                    int64_t num_layers) {
  std::string out;
  for (size_t r = 0; r < logs.size(); ++r) {
    out += CompareRank(logs[r], program, static_cast<int>(r), num_layers);
  }
  return out;
}

void ExpectRuntimeFollowsTheProgram(const spec::Plan& plan, const std::vector<int>& world) {
  const sched::StepProgram program = ProgramOf(plan, world);
  ASSERT_TRUE(sched::CheckStepProgram(program).ok());
  const std::vector<Log> logs = Record(plan, world);
  ASSERT_EQ(logs.size(), world.size());
  EXPECT_EQ(Compare(logs, program, testing::TinyModel().num_blocks + 2), "");
}

TEST(StepProgramRecordTest, UniformTpOverUnevenSplits) {
  ExpectRuntimeFollowsTheProgram(UniformTpUneven(), {0, 1, 2, 3, 4, 5, 6, 7});
}
TEST(StepProgramRecordTest, MixedTpDegreesAndThreeReplicas) {
  ExpectRuntimeFollowsTheProgram(MixedThreeReplicas(), {0, 1, 2, 3, 4, 5, 6});
}
TEST(StepProgramRecordTest, MixedTpAcrossPipelinesOfDifferentDepth) {
  ExpectRuntimeFollowsTheProgram(MixedDepths(), {0, 1, 2, 4, 5, 6, 7});
}
TEST(StepProgramRecordTest, DataAndPipelineParallel) {
  ExpectRuntimeFollowsTheProgram(TwoByTwo(), {0, 1, 2, 3});
}
TEST(StepProgramRecordTest, InterleavedWithTensorParallelism) {
  ExpectRuntimeFollowsTheProgram(InterleavedTp(), {0, 1, 2, 3, 4});
}
TEST(StepProgramRecordTest, InterleavedZeroOne) {
  ExpectRuntimeFollowsTheProgram(Zero1(InterleavedTp()), {0, 1, 2, 3, 4});
}
TEST(StepProgramRecordTest, GPipe) {
  ExpectRuntimeFollowsTheProgram(GPipe(TwoByTwo()), {0, 1, 2, 3});
}
TEST(StepProgramRecordTest, GPipeMixedTp) {
  ExpectRuntimeFollowsTheProgram(GPipe(MixedDepths()), {0, 1, 2, 4, 5, 6, 7});
}
TEST(StepProgramRecordTest, ASinglePipelineHasOnlyWorldCollectives) {
  ExpectRuntimeFollowsTheProgram(
      MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 3, false, true, {1, 2})}, 4,
                         3)},
               "pp2"),
      {0, 1, 2});
}
TEST(StepProgramRecordTest, AnIdleRankSplitsButJoinsNoGroup) {
  ExpectRuntimeFollowsTheProgram(
      MakePlan({Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 2, 1),
                Pipeline({Stage(0, 4, true, true, {3})}, 2, 1)},
               "idle"),
      {0, 1, 2, 3});  // device 2 is idle
}
TEST(StepProgramRecordTest, ZeroOneDataParallel) {
  ExpectRuntimeFollowsTheProgram(Zero1(TwoByTwo()), {0, 1, 2, 3});
}
TEST(StepProgramRecordTest, ZeroOneUnevenChunks) {
  ExpectRuntimeFollowsTheProgram(Zero1(ThreeReplicas()), {0, 1, 2});
}
TEST(StepProgramRecordTest, ZeroOneWithTensorParallelism) {
  ExpectRuntimeFollowsTheProgram(Zero1(UniformTpUneven()), {0, 1, 2, 3, 4, 5, 6, 7});
}
TEST(StepProgramRecordTest, ZeroOneKeepsMixedGroupsReplicated) {
  ExpectRuntimeFollowsTheProgram(Zero1(MixedThreeReplicas()), {0, 1, 2, 3, 4, 5, 6});
}
TEST(StepProgramRecordTest, ZeroOneWithAnIdleRank) {
  ExpectRuntimeFollowsTheProgram(Zero1(TwoByTwo()), {0, 1, 2, 3, 5});
}
TEST(StepProgramRecordTest, ZeroOneGPipe) {
  ExpectRuntimeFollowsTheProgram(GPipe(Zero1(MixedDepths())), {0, 1, 2, 4, 5, 6, 7});
}
TEST(StepProgramRecordTest, TensorParallelismWithFullAndSelectiveRecompute) {
  ExpectRuntimeFollowsTheProgram(recording::TpWithRecompute(), {0, 1, 2, 3});
}
TEST(StepProgramRecordTest, FourReplicasOfOneStage) {
  ExpectRuntimeFollowsTheProgram(
      MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 1, 3),
                Pipeline({Stage(0, 4, true, true, {1})}, 1, 3),
                Pipeline({Stage(0, 4, true, true, {2})}, 1, 3),
                Pipeline({Stage(0, 4, true, true, {3})}, 1, 3)},
               "dp4"),
      {0, 1, 2, 3});
}

// The comparison is not vacuous: a program with one collective dropped, or one byte count
// changed, differs from what the runtime did.
TEST(StepProgramRecordTest, AMutatedProgramFailsTheComparison) {
  const spec::Plan plan = Zero1(TwoByTwo());
  const std::vector<int> world = {0, 1, 2, 3};
  const std::vector<Log> logs = Record(plan, world);
  const int64_t layers = testing::TinyModel().num_blocks + 2;
  ASSERT_EQ(Compare(logs, ProgramOf(plan, world), layers), "");

  sched::StepProgram dropped = ProgramOf(plan, world);
  ASSERT_EQ(dropped.ranks[1].ops[2].kind, sched::StepOpKind::kLayerReduceScatter);
  dropped.ranks[1].ops.erase(dropped.ranks[1].ops.begin() + 2);  // its first reduce-scatter
  EXPECT_NE(Compare(logs, dropped, layers).find("rank 1"), std::string::npos);

  sched::StepProgram resized = ProgramOf(plan, world);
  resized.collectives[0].chunks[1] += 1;  // rank 2's share of layer 0's all-gather input
  resized.collectives[0].elements += 1;
  EXPECT_NE(Compare(logs, resized, layers), "");
}

// The TP all-reduces inside forward and backward are compared too: a program that forgets the
// rerun forward's all-reduces under full recompute, or names another TP group size, differs.
TEST(StepProgramRecordTest, AMutatedTensorParallelCountFailsTheComparison) {
  const spec::Plan plan = recording::TpWithRecompute();
  const std::vector<int> world = {0, 1, 2, 3};
  const std::vector<Log> logs = Record(plan, world);
  const int64_t layers = testing::TinyModel().num_blocks + 2;
  ASSERT_EQ(Compare(logs, ProgramOf(plan, world), layers), "");

  sched::StepProgram fewer = ProgramOf(plan, world);
  ASSERT_EQ(fewer.ranks[0].chunks[0].tp_all_reduces.backward, 8);  // 2 blocks x (2 + 2 rerun)
  fewer.ranks[0].chunks[0].tp_all_reduces.backward = 4;
  EXPECT_NE(Compare(logs, fewer, layers).find("rank 0 step"), std::string::npos);

  sched::StepProgram alone = ProgramOf(plan, world);
  alone.ranks[3].tp_members = {};
  EXPECT_NE(Compare(logs, alone, layers).find("rank 3 set-up"), std::string::npos);
}

TEST(StepProgramRecordTest, TheTrainingLoopSendsTheBetweenStepMessages) {
  ExpectTrainingLoopFollowsTheProgram(TwoByTwo(), {0, 1, 2, 3});
}
// A program whose between-step messages differ from the loop's (the metrics a rank packs, the
// plan agreement's size) fails the comparison.
TEST(StepProgramRecordTest, ABetweenStepMessageOfTheWrongSizeFails) {
  const std::vector<int> world = {0, 1, 2, 3};
  const std::vector<Log> logs = RecordTraining(TwoByTwo(), world, 2);
  ASSERT_EQ(logs.size(), world.size());
  const int64_t layers = testing::TinyModel().num_blocks + 2;
  const sched::StepProgram program = ProgramOf(TwoByTwo(), world);
  EXPECT_TRUE(logs[0].setup == ExpectedTraining(program, 0, layers, 2));
  for (sched::StepOpKind kind :
       {sched::StepOpKind::kMetricsAllGather, sched::StepOpKind::kPlanAgreement}) {
    sched::StepProgram mutated = program;
    for (sched::Collective& c : mutated.collectives) {
      if (c.kind != kind) continue;
      c.elements += static_cast<int64_t>(c.members.size());
      for (int64_t& chunk : c.chunks) chunk += 1;
    }
    EXPECT_FALSE(logs[0].setup == ExpectedTraining(mutated, 0, layers, 2))
        << sched::StepOpKindName(kind);
  }
}
TEST(StepProgramRecordTest, TheTrainingLoopWithMixedTpAndAnIdleRank) {
  ExpectTrainingLoopFollowsTheProgram(MixedThreeReplicas(), {0, 1, 2, 3, 4, 5, 6});
  ExpectTrainingLoopFollowsTheProgram(
      MakePlan({Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 2, 1),
                Pipeline({Stage(0, 4, true, true, {3})}, 2, 1)},
               "idle"),
      {0, 1, 2, 3});  // device 2 is idle
}

}  // namespace
}  // namespace motley::parallel
