// The runtime's data-parallel gradient sync does what the predictor times: a recording
// communicator wrapped around each rank's world logs every Split and every all-reduce that
// GradientSync makes, and each rank's log equals, entry for entry, what spec/plan_topology.h says
// (DataParallelGroups: which group the rank joins per layer, its size and the rank's place in it;
// LayerParamsPerTpRank: the f32 bytes each group sums). Uniform and mixed TP degrees, uneven
// stage splits, and an idle rank in a world larger than the plan.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "comm/local_world.h"
#include "model/parameters.h"
#include "parallel/grad_sync.h"
#include "parallel/world_layout.h"
#include "parallel_test_util.h"
#include "spec/plan_topology.h"

namespace motley::parallel {
namespace {

using testing::Pipeline;
using testing::Stage;

// One logged call: a Split (the child's size and this rank's rank in it; -1, -1 when the rank
// joins no group) or an all-reduce (its bytes) on a group.
struct Call {
  std::string kind;
  int64_t a = 0;
  int64_t b = 0;
  bool operator==(const Call& o) const { return kind == o.kind && a == o.a && b == o.b; }
};

std::ostream& operator<<(std::ostream& os, const Call& c) {
  return os << c.kind << "(" << c.a << ", " << c.b << ")";
}

// Forwards every call to `inner` and logs Split and AllReduce into `log` (shared with the
// communicators it splits off).
class RecordingCommunicator final : public comm::Communicator {
 public:
  RecordingCommunicator(std::unique_ptr<comm::Communicator> inner, std::vector<Call>* log)
      : inner_(std::move(inner)), log_(log) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  Status AllReduce(tensor::Tensor& data, comm::ReduceOp op) override {
    log_->push_back(Call{"allreduce", static_cast<int64_t>(data.bytes()), 0});
    return inner_->AllReduce(data, op);
  }
  Status ReduceScatter(tensor::Tensor& out, const tensor::Tensor& in,
                       const std::vector<int64_t>& counts, comm::ReduceOp op) override {
    log_->push_back(Call{"reducescatter", static_cast<int64_t>(in.bytes()), 0});
    return inner_->ReduceScatter(out, in, counts, op);
  }
  Status AllGather(tensor::Tensor& out, const tensor::Tensor& in,
                   const std::vector<int64_t>& counts) override {
    log_->push_back(Call{"allgather", static_cast<int64_t>(in.bytes()), 0});
    return inner_->AllGather(out, in, counts);
  }
  Status Broadcast(tensor::Tensor& data, int root) override {
    log_->push_back(Call{"broadcast", static_cast<int64_t>(data.bytes()), root});
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
    if (child == nullptr) {
      log_->push_back(Call{"split", -1, -1});
      return child;
    }
    log_->push_back(Call{"split", child->size(), child->rank()});
    return std::unique_ptr<comm::Communicator>(
        std::make_unique<RecordingCommunicator>(std::move(child), log_));
  }

 private:
  std::unique_ptr<comm::Communicator> inner_;
  std::vector<Call>* log_;
};

// What spec/plan_topology.h says rank `device` does in Create and one Reduce.
std::vector<Call> Expected(const spec::Plan& plan, const spec::ModelSpec& model, int device) {
  const std::vector<spec::LayerGroup> groups = spec::DataParallelGroups(plan, model.num_blocks);
  std::vector<Call> splits;
  std::vector<Call> reduces;
  for (int64_t layer = 0; layer < spec::NumGradientLayers(model.num_blocks); ++layer) {
    Call split{"split", -1, -1};
    for (const spec::LayerGroup& g : groups) {
      if (g.layer != layer) continue;
      for (size_t i = 0; i < g.devices.size(); ++i) {
        if (g.devices[i] != device) continue;
        split = Call{"split", static_cast<int64_t>(g.devices.size()), static_cast<int64_t>(i)};
        if (g.devices.size() > 1) {
          const int64_t numel = spec::LayerParamsPerTpRank(model, layer, g.tp_degree).total();
          reduces.push_back(Call{"allreduce", numel * 4, 0});  // f32 staging buffer
        }
      }
    }
    splits.push_back(split);
  }
  splits.insert(splits.end(), reduces.begin(), reduces.end());
  return splits;
}

// Runs GradientSync::Create and one Reduce on every rank of a world of `world_devices` (one
// thread per rank) and returns each rank's log.
std::vector<std::vector<Call>> Record(const spec::Plan& plan, const spec::ModelSpec& model,
                                      const std::vector<int>& world_devices) {
  Result<WorldLayout> layout = WorldLayout::Build(plan, world_devices);
  EXPECT_TRUE(layout.ok()) << layout.status().message();
  const int n = layout->size();
  std::shared_ptr<comm::LocalWorld> world = comm::LocalWorld::Create(n);
  std::vector<std::vector<Call>> logs(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      backend::CpuBackend backend;
      const RankInfo& me = layout->rank(r);
      model::StageLayout stage;  // an idle rank holds nothing
      if (!me.idle()) {
        const spec::StagePlan& sp = layout->stage_of(r);
        stage.first_block = sp.first_block;
        stage.num_blocks = sp.num_blocks;
        stage.has_embedding = sp.has_embedding;
        stage.has_head = sp.has_head;
        stage.tp_rank = me.tp_rank;
        stage.tp_degree = me.tp_degree;
      }
      model::ParameterSet params =
          model::ParameterSet::Allocate(backend, model::StageParamInfos(model, stage));
      Result<std::unique_ptr<comm::Communicator>> connected = world->Connect(r);
      if (!connected.ok()) {
        errors[static_cast<size_t>(r)] = connected.status().message();
        return;
      }
      RecordingCommunicator recording(std::move(*connected), &logs[static_cast<size_t>(r)]);
      auto sync = GradientSync::Create(*layout, r, model, recording, backend, params,
                                       RankClock(), /*zero1=*/false);
      if (!sync.ok()) {
        errors[static_cast<size_t>(r)] = sync.status().message();
        return;
      }
      const Status reduced = (*sync)->Reduce();
      if (!reduced.ok()) errors[static_cast<size_t>(r)] = reduced.message();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  return logs;
}

void ExpectLogsMatchTheTopology(const spec::Plan& plan, const std::vector<int>& world_devices) {
  spec::ModelSpec model = *spec::ModelPreset("tiny");
  model.num_blocks = 4;
  const std::vector<std::vector<Call>> logs = Record(plan, model, world_devices);
  for (size_t r = 0; r < logs.size(); ++r) {
    SCOPED_TRACE(::testing::Message() << "rank " << r << " (device " << world_devices[r] << ")");
    EXPECT_EQ(logs[r], Expected(plan, model, world_devices[r]));
  }
}

TEST(GradSyncRecordTest, UniformTpOverUnevenSplits) {
  spec::Plan plan;
  plan.pipelines = {
      Pipeline({Stage(0, 2, true, false, {0, 1}), Stage(2, 2, false, true, {2, 3})}, 2, 1),
      Pipeline({Stage(0, 1, true, false, {4, 5}), Stage(1, 3, false, true, {6, 7})}, 2, 1)};
  ExpectLogsMatchTheTopology(plan, {0, 1, 2, 3, 4, 5, 6, 7});
}

TEST(GradSyncRecordTest, MixedTpDegreesAndThreeReplicas) {
  spec::Plan plan;
  plan.pipelines = {Pipeline({Stage(0, 4, true, true, {4, 5})}, 2, 1),
                    Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {3, 2})},
                             2, 1),
                    Pipeline({Stage(0, 3, true, false, {1}), Stage(3, 1, false, true, {6})}, 2, 1)};
  ExpectLogsMatchTheTopology(plan, {0, 1, 2, 3, 4, 5, 6});
}

TEST(GradSyncRecordTest, AnIdleRankSplitsButJoinsNoGroup) {
  spec::Plan plan;
  plan.pipelines = {Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 2, 1),
                    Pipeline({Stage(0, 4, true, true, {3})}, 2, 1)};
  ExpectLogsMatchTheTopology(plan, {0, 1, 2, 3});  // device 2 is idle
}

}  // namespace
}  // namespace motley::parallel
