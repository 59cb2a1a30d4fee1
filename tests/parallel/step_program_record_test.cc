// The runtime does what the step program says (sched/step_program.h): a recording communicator
// wrapped around each rank's world logs every Split and every collective of ParallelRank::Create
// and one ParallelRank::Step, on threads, and each rank's log equals, entry for entry, its
// RankStep: one split per gradient layer (the group's size and the rank's place in it, or none),
// then the step's collectives in order (kind, bytes in, group size): layer all-reduces or ZeRO-1
// reduce-scatters, the world's loss-norm all-reduce, ZeRO-1 all-gathers. Fifteen plans: uniform
// and mixed TP degrees, uneven stages, GPipe, ZeRO-1 (uneven chunks, mixed groups, idle rank), an
// idle rank in a world larger than the plan, a single pipeline. A mutated program (one collective
// dropped, one byte count changed) fails the comparison.
// Not recorded here: the pipeline's point-to-point messages and the TP group's collectives inside
// forward and backward (the program lists the action list, not the TP calls), and the metrics
// all-gather and plan agreement, which the training loop sends between steps.
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

namespace motley::parallel {
namespace {

using testing::MakePlan;
using testing::Pipeline;
using testing::Stage;

// One logged call: a split (child size and this rank's rank in it; -1, -1 when it joins none) or
// a collective (bytes of the tensor passed in, group size).
struct Call {
  std::string kind;
  int64_t a = 0;
  int64_t b = 0;
  bool operator==(const Call& o) const { return kind == o.kind && a == o.a && b == o.b; }
};

std::string ToString(const std::vector<Call>& calls) {
  std::string out;
  for (const Call& c : calls) out += fmt::format("{}({}, {}) ", c.kind, c.a, c.b);
  return out;
}

// Where a rank's calls go: `current` is switched from the set-up log to the step log; calls on a
// communicator marked `ignored` (the TP group) are not logged.
struct Log {
  std::vector<Call> setup;
  std::vector<Call> step;
  std::vector<Call>* current = &setup;
};

// Forwards every call to `inner` and logs splits and collectives (not point-to-point).
class RecordingCommunicator final : public comm::Communicator {
 public:
  RecordingCommunicator(std::unique_ptr<comm::Communicator> inner, Log* log, bool ignored,
                        bool is_world)
      : inner_(std::move(inner)), log_(log), ignored_(ignored), is_world_(is_world) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  Status AllReduce(tensor::Tensor& data, comm::ReduceOp op) override {
    Add("allreduce", static_cast<int64_t>(data.bytes()));
    return inner_->AllReduce(data, op);
  }
  Status ReduceScatter(tensor::Tensor& out, const tensor::Tensor& in,
                       const std::vector<int64_t>& counts, comm::ReduceOp op) override {
    Add("reducescatter", static_cast<int64_t>(in.bytes()));
    return inner_->ReduceScatter(out, in, counts, op);
  }
  Status AllGather(tensor::Tensor& out, const tensor::Tensor& in,
                   const std::vector<int64_t>& counts) override {
    Add("allgather", static_cast<int64_t>(in.bytes()));
    return inner_->AllGather(out, in, counts);
  }
  Status Broadcast(tensor::Tensor& data, int root) override {
    Add("broadcast", static_cast<int64_t>(data.bytes()));
    return inner_->Broadcast(data, root);
  }
  Status Send(const tensor::Tensor& data, int peer, int tag) override {
    return inner_->Send(data, peer, tag);
  }
  Status Recv(tensor::Tensor& data, int peer, int tag) override {
    return inner_->Recv(data, peer, tag);
  }
  Result<comm::Request> ISend(const tensor::Tensor& data, int peer, int tag) override {
    return inner_->ISend(data, peer, tag);
  }
  Result<comm::Request> IRecv(tensor::Tensor& data, int peer, int tag) override {
    return inner_->IRecv(data, peer, tag);
  }
  Status Wait(comm::Request& request) override { return inner_->Wait(request); }
  Status Barrier() override { return inner_->Barrier(); }
  void Abort(const std::string& reason) override { inner_->Abort(reason); }
  Result<std::unique_ptr<comm::Communicator>> Split(int color, int key) override {
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> child, inner_->Split(color, key));
    // The world's first split is the TP group's (ParallelRank::Create): logged, its calls not.
    const bool tp = is_world_ && splits_++ == 0;
    if (!ignored_ && !tp) {
      log_->current->push_back(child == nullptr ? Call{"split", -1, -1}
                                                : Call{"split", child->size(), child->rank()});
    }
    if (child == nullptr) return child;
    return std::unique_ptr<comm::Communicator>(
        std::make_unique<RecordingCommunicator>(std::move(child), log_, ignored_ || tp, false));
  }

 private:
  void Add(const char* kind, int64_t bytes) {
    if (!ignored_) log_->current->push_back(Call{kind, bytes, inner_->size()});
  }
  std::unique_ptr<comm::Communicator> inner_;
  Log* log_;
  bool ignored_;
  bool is_world_;
  int splits_ = 0;
};

// What rank `r`'s step program says it logs: the set-up's layer splits, the step's collectives.
Log Expected(const sched::StepProgram& program, int r, int64_t num_layers) {
  Log want;
  const sched::RankStep& rs = program.ranks[static_cast<size_t>(r)];
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    Call split{"split", -1, -1};
    for (const sched::StepOp& op : rs.ops) {
      if (op.layer != layer || (op.kind != sched::StepOpKind::kLayerAllReduce &&
                                op.kind != sched::StepOpKind::kLayerReduceScatter)) {
        continue;
      }
      const sched::Collective& c = program.collectives[static_cast<size_t>(op.collective)];
      const auto q = std::find(c.members.begin(), c.members.end(), r) - c.members.begin();
      split = Call{"split", static_cast<int64_t>(c.members.size()), q};
    }
    want.setup.push_back(split);
  }
  for (const sched::StepOp& op : rs.ops) {
    if (!sched::IsCollective(op.kind) || sched::IsBetweenSteps(op.kind)) continue;
    const sched::Collective& c = program.collectives[static_cast<size_t>(op.collective)];
    const auto q = static_cast<size_t>(std::find(c.members.begin(), c.members.end(), r) -
                                       c.members.begin());
    const char* kind = op.kind == sched::StepOpKind::kLayerReduceScatter ? "reducescatter"
                       : op.kind == sched::StepOpKind::kLayerAllGather   ? "allgather"
                                                                         : "allreduce";
    want.step.push_back(Call{kind, c.InputBytes(q), static_cast<int64_t>(c.members.size())});
  }
  return want;
}

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
      RecordingCommunicator recording(std::move(*connected), &log, false, true);
      backend::CpuBackend backend(1, r);
      auto rank = ParallelRank::Create(*layout, r, run.model, run.train, backend, recording);
      if (!rank.ok()) return fail(rank.status());
      std::vector<Call> splits;
      for (const Call& c : log.setup) {
        if (c.kind == "split") splits.push_back(c);
      }
      log.setup = splits;
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

// Differences between the logs and the program, one line per rank that differs; "" when equal.
std::string Compare(const std::vector<Log>& logs, const sched::StepProgram& program,
                    int64_t num_layers) {
  std::string out;
  for (size_t r = 0; r < logs.size(); ++r) {
    const Log want = Expected(program, static_cast<int>(r), num_layers);
    if (logs[r].setup != want.setup) {
      out += fmt::format("rank {} set-up: logged {}, program {}\n", r, ToString(logs[r].setup),
                         ToString(want.setup));
    }
    if (logs[r].step != want.step) {
      out += fmt::format("rank {} step: logged {}, program {}\n", r, ToString(logs[r].step),
                         ToString(want.step));
    }
  }
  return out;
}

sched::StepProgram ProgramOf(const spec::Plan& plan, const std::vector<int>& world_devices) {
  sched::StepProgramOptions options;
  options.world_devices = world_devices;
  Result<sched::StepProgram> program =
      sched::BuildStepProgram(plan, testing::TinyModel(), options);
  EXPECT_TRUE(program.ok()) << program.status().message();
  return program.ok() ? *program : sched::StepProgram{};
}

void ExpectRuntimeFollowsTheProgram(const spec::Plan& plan, const std::vector<int>& world) {
  const sched::StepProgram program = ProgramOf(plan, world);
  ASSERT_TRUE(sched::CheckStepProgram(program).ok());
  const std::vector<Log> logs = Record(plan, world);
  ASSERT_EQ(logs.size(), world.size());
  EXPECT_EQ(Compare(logs, program, testing::TinyModel().num_blocks + 2), "");
}

spec::Plan Zero1(spec::Plan plan) {
  plan.optimizer_sharding = spec::OptimizerSharding::kZero1;
  return plan;
}
spec::Plan GPipe(spec::Plan plan) {
  plan.schedule = spec::PipelineSchedule::kGPipe;
  return plan;
}

// Two TP-2 pipelines of two stages with uneven splits, on devices 0-7.
spec::Plan UniformTpUneven() {
  return MakePlan(
      {Pipeline({Stage(0, 2, true, false, {0, 1}), Stage(2, 2, false, true, {2, 3})}, 2, 1),
       Pipeline({Stage(0, 1, true, false, {4, 5}), Stage(1, 3, false, true, {6, 7})}, 2, 1)},
      "uniform-tp-uneven");
}
// Three replicas of TP degrees 2, 1 + 2 and 1 + 1 on devices 0-6.
spec::Plan MixedThreeReplicas() {
  return MakePlan({Pipeline({Stage(0, 4, true, true, {4, 5})}, 2, 1),
                   Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {3, 2})}, 2,
                            1),
                   Pipeline({Stage(0, 3, true, false, {1}), Stage(3, 1, false, true, {6})}, 2, 1)},
                  "mixed-three");
}
// TP 2 -> 1 and 1 -> 1 -> 2 (parallel_rank_test's mixed plan) on devices 0-2, 4-7.
spec::Plan MixedDepths() {
  return MakePlan(
      {Pipeline({Stage(0, 3, true, false, {0, 1}), Stage(3, 1, false, true, {2})}, 3, 2),
       Pipeline({Stage(0, 1, true, false, {4}), Stage(1, 2, false, false, {5}),
                 Stage(3, 1, false, true, {6, 7})},
                3, 2)},
      "mixed-depths");
}
// Two pipelines of two TP-1 stages on devices 0-3.
spec::Plan TwoByTwo() {
  return MakePlan(
      {Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 3, 2),
       Pipeline({Stage(0, 2, true, false, {2}), Stage(2, 2, false, true, {3})}, 3, 2)},
      "dp2-pp2");
}
// Three single-stage replicas (uneven ZeRO-1 chunks: 9,280 / 3 is not whole).
spec::Plan ThreeReplicas() {
  return MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 2),
                   Pipeline({Stage(0, 4, true, true, {1})}, 2, 2),
                   Pipeline({Stage(0, 4, true, true, {2})}, 2, 2)},
                  "dp3");
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

}  // namespace
}  // namespace motley::parallel
