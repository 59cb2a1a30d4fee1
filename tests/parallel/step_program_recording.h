// The recording test's pieces, shared by the threads test (step_program_record_test.cc) and the
// mpiexec test (mpi_step_program_record_test.cc): a communicator that logs every split and
// collective below the runtime, what a rank's step program says it logs, and the comparison.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "comm/communicator.h"
#include "parallel_test_util.h"
#include "sched/step_program.h"

namespace motley::parallel::recording {

// One logged call: a split (child size and this rank's rank in it; -1, -1 when it joins none), a
// collective (bytes of the tensor passed in, group size) or a point-to-point message on the
// world (bytes, peer). The TP group's split and collectives are prefixed "tp-".
struct Call {
  std::string kind;
  int64_t a = 0;
  int64_t b = 0;
  bool operator==(const Call& o) const { return kind == o.kind && a == o.a && b == o.b; }
};

inline std::string ToString(const std::vector<Call>& calls) {
  std::string out;
  for (const Call& c : calls) out += fmt::format("{}({}, {}) ", c.kind, c.a, c.b);
  return out;
}

// Where a rank's calls go: `current` is switched from the set-up log to the step log.
struct Log {
  std::vector<Call> setup;
  std::vector<Call> step;
  std::vector<Call>* current = &setup;
};

// Forwards every call to `inner` and logs splits, collectives and non-blocking point-to-point
// messages (the pipeline's; blocking Send/Recv are not part of a step). The world's first split
// is the TP group's (ParallelRank::Create): it and its child's calls are logged with `prefix`
// "tp-".
class RecordingCommunicator final : public comm::Communicator {
 public:
  RecordingCommunicator(std::unique_ptr<comm::Communicator> inner, Log* log, std::string prefix,
                        bool is_world)
      : inner_(std::move(inner)), log_(log), prefix_(std::move(prefix)), is_world_(is_world) {}
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
    log_->current->push_back(Call{prefix_ + "isend", static_cast<int64_t>(data.bytes()), peer});
    return inner_->ISend(data, peer, tag);
  }
  Result<comm::Request> IRecv(tensor::Tensor& data, int peer, int tag) override {
    log_->current->push_back(Call{prefix_ + "irecv", static_cast<int64_t>(data.bytes()), peer});
    return inner_->IRecv(data, peer, tag);
  }
  Status Wait(comm::Request& request) override { return inner_->Wait(request); }
  Status Barrier() override { return inner_->Barrier(); }
  void Abort(const std::string& reason) override { inner_->Abort(reason); }
  Result<std::unique_ptr<comm::Communicator>> Split(int color, int key) override {
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> child, inner_->Split(color, key));
    const std::string prefix = is_world_ && splits_++ == 0 ? "tp-" : prefix_;
    log_->current->push_back(child == nullptr
                                 ? Call{prefix + "split", -1, -1}
                                 : Call{prefix + "split", child->size(), child->rank()});
    if (child == nullptr) return child;
    return std::unique_ptr<comm::Communicator>(
        std::make_unique<RecordingCommunicator>(std::move(child), log_, prefix, false));
  }

 private:
  void Add(const char* kind, int64_t bytes) {
    log_->current->push_back(Call{prefix_ + kind, bytes, inner_->size()});
  }
  std::unique_ptr<comm::Communicator> inner_;
  Log* log_;
  std::string prefix_;
  bool is_world_;
  int splits_ = 0;
};

// What rank `r`'s step program says it logs: the set-up's TP and layer splits, the step's
// messages and collectives (with the TP all-reduces of every forward and backward).
inline Log Expected(const sched::StepProgram& program, int r, int64_t num_layers) {
  Log want;
  const sched::RankStep& rs = program.ranks[static_cast<size_t>(r)];
  want.setup.push_back(
      rs.tp_members.empty()
          ? Call{"tp-split", -1, -1}
          : Call{"tp-split", static_cast<int64_t>(rs.tp_members.size()), rs.tp_rank});
  auto tp_all_reduces = [&](int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      want.step.push_back(
          Call{"tp-allreduce", rs.message_bytes, static_cast<int64_t>(rs.tp_members.size())});
    }
  };
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
    if (op.kind == sched::StepOpKind::kPipeline) {  // its messages, in action order
      for (const sched::Action& a : rs.actions) {
        const sched::ChunkStep& ch = rs.chunks.at(static_cast<size_t>(a.chunk));
        switch (a.kind) {
          case sched::ActionKind::kSendForward:
            for (int dst : ch.forward_destinations) {
              want.step.push_back(Call{"isend", rs.message_bytes, dst});
            }
            break;
          case sched::ActionKind::kRecvForward:
            want.step.push_back(Call{"irecv", rs.message_bytes, ch.forward_source});
            break;
          case sched::ActionKind::kSendBackward:
            for (int dst : ch.backward_destinations) {
              want.step.push_back(Call{"isend", rs.message_bytes, dst});
            }
            break;
          case sched::ActionKind::kRecvBackward:
            want.step.push_back(Call{"irecv", rs.message_bytes, ch.backward_source});
            break;
          case sched::ActionKind::kForward: tp_all_reduces(ch.tp_all_reduces.forward); break;
          case sched::ActionKind::kBackward: tp_all_reduces(ch.tp_all_reduces.backward); break;
          default: break;
        }
      }
      continue;
    }
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

// Keeps only the set-up's splits (the TP group's and the gradient layers'), once Create returned:
// ZeRO-1's layout check also communicates during set-up.
inline void KeepSetupSplits(Log& log) {
  std::vector<Call> splits;
  for (const Call& c : log.setup) {
    if (c.kind == "split" || c.kind == "tp-split") splits.push_back(c);
  }
  log.setup = std::move(splits);
}

// One rank's differences from the program ("" when equal).
inline std::string CompareRank(const Log& log, const sched::StepProgram& program, int r,
                               int64_t num_layers) {
  std::string out;
  const Log want = Expected(program, r, num_layers);
  if (log.setup != want.setup) {
    out += fmt::format("rank {} set-up: logged {}, program {}\n", r, ToString(log.setup),
                       ToString(want.setup));
  }
  if (log.step != want.step) {
    out += fmt::format("rank {} step: logged {}, program {}\n", r, ToString(log.step),
                       ToString(want.step));
  }
  return out;
}

inline sched::StepProgram ProgramOf(const spec::Plan& plan, const std::vector<int>& world_devices) {
  sched::StepProgramOptions options;
  options.world_devices = world_devices;
  Result<sched::StepProgram> program =
      sched::BuildStepProgram(plan, testing::TinyModel(), testing::TinyTrain(1).seq_len, options);
  EXPECT_TRUE(program.ok()) << program.status().message();
  return program.ok() ? *program : sched::StepProgram{};
}

// Plans both tests record (the tiny 4-block model, devices as noted).
inline spec::Plan Zero1(spec::Plan plan) {
  plan.optimizer_sharding = spec::OptimizerSharding::kZero1;
  return plan;
}
inline spec::Plan GPipe(spec::Plan plan) {
  plan.schedule = spec::PipelineSchedule::kGPipe;
  return plan;
}

// Two TP-2 pipelines of two stages with uneven splits, on devices 0-7.
inline spec::Plan UniformTpUneven() {
  return testing::MakePlan(
      {testing::Pipeline({testing::Stage(0, 2, true, false, {0, 1}), testing::Stage(2, 2, false, true, {2, 3})}, 2, 1),
       testing::Pipeline({testing::Stage(0, 1, true, false, {4, 5}), testing::Stage(1, 3, false, true, {6, 7})}, 2, 1)},
      "uniform-tp-uneven");
}
// Three replicas of TP degrees 2, 1 + 2 and 1 + 1 on devices 0-6.
inline spec::Plan MixedThreeReplicas() {
  return testing::MakePlan({testing::Pipeline({testing::Stage(0, 4, true, true, {4, 5})}, 2, 1),
                   testing::Pipeline({testing::Stage(0, 2, true, false, {0}), testing::Stage(2, 2, false, true, {3, 2})}, 2,
                            1),
                   testing::Pipeline({testing::Stage(0, 3, true, false, {1}), testing::Stage(3, 1, false, true, {6})}, 2, 1)},
                  "mixed-three");
}
// TP 2 -> 1 and 1 -> 1 -> 2 (parallel_rank_test's mixed plan) on devices 0-2, 4-7.
inline spec::Plan MixedDepths() {
  return testing::MakePlan(
      {testing::Pipeline({testing::Stage(0, 3, true, false, {0, 1}), testing::Stage(3, 1, false, true, {2})}, 3, 2),
       testing::Pipeline({testing::Stage(0, 1, true, false, {4}), testing::Stage(1, 2, false, false, {5}),
                 testing::Stage(3, 1, false, true, {6, 7})},
                3, 2)},
      "mixed-depths");
}
// Two pipelines of two TP-1 stages on devices 0-3.
inline spec::Plan TwoByTwo() {
  return testing::MakePlan(
      {testing::Pipeline({testing::Stage(0, 2, true, false, {0}), testing::Stage(2, 2, false, true, {1})}, 3, 2),
       testing::Pipeline({testing::Stage(0, 2, true, false, {2}), testing::Stage(2, 2, false, true, {3})}, 3, 2)},
      "dp2-pp2");
}
// A TP-2 pipeline of two stages, the first with full recompute (its backward reruns the forward's
// TP all-reduces) and the second selective, on devices 0-3.
inline spec::Plan TpWithRecompute() {
  spec::Plan plan = testing::MakePlan(
      {testing::Pipeline(
          {testing::Stage(0, 2, true, false, {0, 1}), testing::Stage(2, 2, false, true, {2, 3})}, 2,
          1)},
      "tp2-pp2-recompute");
  plan.pipelines[0].stages[0].recompute = spec::Recompute::kFull;
  plan.pipelines[0].stages[1].recompute = spec::Recompute::kSelective;
  return plan;
}
// Interleaved 1F1B: a pipeline of a TP-2 group (devices 0, 1) and a single device (2), two
// one-block chunks each, beside a plain two-stage replica (devices 3, 4).
inline spec::Plan InterleavedTp() {
  spec::Plan plan = testing::MakePlan(
      {testing::Pipeline(
           {testing::Stage(0, 1, true, false, {0, 1}), testing::Stage(1, 1, false, false, {2}),
            testing::Stage(2, 1, false, false, {0, 1}), testing::Stage(3, 1, false, true, {2})},
           2, 1),
       testing::Pipeline(
           {testing::Stage(0, 2, true, false, {3}), testing::Stage(2, 2, false, true, {4})}, 2, 1)},
      "interleaved-tp");
  plan.pipelines[0].chunks = 2;
  return plan;
}
// Three single-stage replicas (uneven ZeRO-1 chunks: 9,280 / 3 is not whole).
inline spec::Plan ThreeReplicas() {
  return testing::MakePlan({testing::Pipeline({testing::Stage(0, 4, true, true, {0})}, 2, 2),
                   testing::Pipeline({testing::Stage(0, 4, true, true, {1})}, 2, 2),
                   testing::Pipeline({testing::Stage(0, 4, true, true, {2})}, 2, 2)},
                  "dp3");
}

}  // namespace motley::parallel::recording
