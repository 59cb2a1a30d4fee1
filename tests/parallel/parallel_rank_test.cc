// Unit tests of the runtime pieces under the trainer: the plan -> ranks / samples mapping, the
// step program's pipeline peers, parameter names -> gradient-group layers, TP sharding of the
// plan-independent initialisation, and (multi-rank) that after a few steps every holder of a
// parameter, whatever its replica's stage split and TP degree, holds bitwise the same values (the
// DP groups sum the right gradients and every holder applies the same update).
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "comm/local_world.h"
#include "model/parameters.h"
#include "model/stage.h"
#include "parallel/grad_sync.h"
#include "parallel/parallel_rank.h"
#include "parallel/world_layout.h"
#include "parallel_test_util.h"
#include "sched/step_program.h"
#include "train/batch_sampler.h"
#include "train/dataset.h"

namespace motley::testing {
namespace {

using parallel::WorldLayout;

spec::Plan MixedPlan() {
  return MakePlan(
      {Pipeline({Stage(0, 3, true, false, {0, 1}), Stage(3, 1, false, true, {2})}, 3, 2),
       Pipeline({Stage(0, 1, true, false, {4}), Stage(1, 2, false, false, {5}),
                 Stage(3, 1, false, true, {6, 7})},
                3, 2)},
      "mixed");
}

TEST(WorldLayoutTest, RanksFollowDeviceIdsAndSamplesTileTheBatch) {
  auto layout = WorldLayout::Build(MixedPlan());
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  ASSERT_EQ(layout->size(), 7);
  // Devices 0 1 2 4 5 6 7 -> ranks 0..6.
  EXPECT_EQ(layout->rank(3).device, 4);
  EXPECT_EQ(layout->rank(3).pipeline, 1);
  EXPECT_EQ(layout->rank(6).tp_rank, 1);
  EXPECT_EQ(layout->rank(6).tp_degree, 2);
  EXPECT_EQ(layout->global_batch(), 12);
  ASSERT_EQ(layout->samples().size(), 2U);
  EXPECT_EQ(layout->samples()[1][0].begin, 6);
  EXPECT_EQ(layout->samples()[1][2].begin, 10);
  EXPECT_EQ(layout->samples()[1][2].count, 2);
}

// The executor's pipeline peers are the step program's (sched::ChunkStep).
TEST(StepProgramPeersTest, TransfersBetweenStagesOfDifferentTpDegrees) {
  auto program = sched::BuildStepProgram(MixedPlan(), TinyModel(), 16);
  ASSERT_TRUE(program.ok()) << program.status().message();
  auto peers = [&](int r) -> const sched::ChunkStep& {
    return program->ranks[static_cast<size_t>(r)].chunks.at(0);
  };
  // Pipeline 0: TP 2 (ranks 0, 1) -> TP 1 (rank 2): only TP rank 0 sends, rank 2 answers it.
  EXPECT_EQ(peers(0).forward_destinations, std::vector<int>{2});
  EXPECT_TRUE(peers(1).forward_destinations.empty());
  EXPECT_EQ(peers(2).forward_source, 0);
  EXPECT_EQ(peers(2).backward_destinations, (std::vector<int>{0, 1}));
  EXPECT_EQ(peers(0).backward_source, 2);
  EXPECT_EQ(peers(1).backward_source, 2);
  // Pipeline 1: TP 1 (rank 4) -> TP 2 (ranks 5, 6).
  EXPECT_EQ(peers(4).forward_destinations, (std::vector<int>{5, 6}));
  EXPECT_EQ(peers(6).forward_source, 4);
  EXPECT_EQ(peers(5).backward_destinations, std::vector<int>{4});
  EXPECT_TRUE(peers(6).backward_destinations.empty());
  EXPECT_EQ(peers(3).forward_source, -1);
  EXPECT_EQ(peers(6).backward_source, -1);
}

TEST(GradSyncTest, LayerOfParameterNames) {
  EXPECT_EQ(parallel::LayerOfParameter("model.embed_tokens.weight", 4), 0);
  EXPECT_EQ(parallel::LayerOfParameter("model.layers.0.mlp.up_proj.weight", 4), 1);
  EXPECT_EQ(parallel::LayerOfParameter("model.layers.3.input_layernorm.weight", 4), 4);
  EXPECT_EQ(parallel::LayerOfParameter("model.norm.weight", 4), 5);
  EXPECT_EQ(parallel::LayerOfParameter("lm_head.weight", 4), 5);
  EXPECT_EQ(parallel::LayerOfParameter("model.layers.4.mlp.up_proj.weight", 4), -1);
  EXPECT_EQ(parallel::LayerOfParameter("model.layers.x.mlp", 4), -1);
  EXPECT_EQ(parallel::LayerOfParameter("other", 4), -1);
}

// Host copy of a tensor.
std::vector<float> Host(tensor::Backend& backend, const tensor::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  backend.CopyToHost(out.data(), t, t.bytes());
  return out;
}

// Writes `shard` into its place in `full` (row-major, full shape of the parameter).
void Place(const model::ParamInfo& info, const std::vector<float>& shard,
           std::vector<float>& full) {
  if (!info.sharded()) {
    full = shard;
    return;
  }
  const int64_t cols_full = info.full_shape[1];
  const int64_t rows = info.shape[0], cols = info.shape[1];
  const int64_t row0 = info.shard_dim == 0 ? info.shard_offset : 0;
  const int64_t col0 = info.shard_dim == 1 ? info.shard_offset : 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(full.data() + (row0 + r) * cols_full + col0, shard.data() + r * cols,
                static_cast<size_t>(cols) * sizeof(float));
  }
}

TEST(ShardedInitTest, TpShardsTileTheFullTensor) {
  const spec::ModelSpec model = TinyModel();
  backend::CpuBackend backend(1);
  model::StageLayout full_layout{0, 1, false, false};
  model::ParameterSet full = model::ParameterSet::Allocate(
      backend, model::StageParamInfos(model, full_layout));
  full.Initialize(backend, 9);
  std::map<std::string, std::vector<float>> assembled;
  for (int r = 0; r < 2; ++r) {
    model::StageLayout layout = full_layout;
    layout.tp_rank = r;
    layout.tp_degree = 2;
    model::ParameterSet shard =
        model::ParameterSet::Allocate(backend, model::StageParamInfos(model, layout));
    shard.Initialize(backend, 9);
    for (const model::Parameter& p : shard) {
      auto& buf = assembled[p.name()];
      buf.resize(static_cast<size_t>(p.info.FullShape().numel()));
      Place(p.info, Host(backend, p.value), buf);
    }
  }
  for (const model::Parameter& p : full) {
    EXPECT_EQ(assembled[p.name()], Host(backend, p.value)) << p.name();
  }
  model::StageLayout bad = full_layout;
  bad.tp_degree = 3;
  EXPECT_FALSE(model::ValidateStageLayout(model, bad, "t").ok());
}

TEST(ParallelRankTest, EveryHolderOfAParameterHoldsTheSameValuesAfterTraining) {
  const spec::RunFile run = TinyRun(3);
  auto layout = WorldLayout::Build(MixedPlan());
  ASSERT_TRUE(layout.ok());
  auto data = train::LoadTokenSplits(run.train.data, run.model.vocab_size, run.train.seq_len);
  ASSERT_TRUE(data.ok()) << data.status().message();
  backend::SetBlasThreads(1);
  auto world = comm::LocalWorld::Create(layout->size());
  // (pipeline, name) -> full tensor assembled from that replica's holders.
  std::mutex mu;
  std::map<std::pair<int, std::string>, std::vector<float>> values;
  std::map<std::pair<int, std::string>, std::vector<float>> replicated_on_tp1;
  std::vector<Status> status(static_cast<size_t>(layout->size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < layout->size(); ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& s) {
        status[static_cast<size_t>(r)] = s;
        world->Abort(s.message());
      };
      auto comm = world->Connect(r);
      if (!comm.ok()) return fail(comm.status());
      backend::CpuBackend backend(1, r);
      auto rank = parallel::ParallelRank::Create(*layout, r, run.model, run.train, backend, **comm);
      if (!rank.ok()) return fail(rank.status());
      const auto& me = (*rank)->info();
      const auto& slices = layout->samples()[static_cast<size_t>(me.pipeline)];
      const int64_t begin = slices.front().begin;
      const int64_t count = static_cast<int64_t>(slices.size()) * slices.front().count;
      const int64_t T = run.train.seq_len;
      std::vector<int32_t> inputs(static_cast<size_t>(count * T)), targets(inputs.size());
      for (int64_t step = 1; step <= run.train.steps; ++step) {
        const auto offsets = train::TrainBatchOffsets(run.train.seed, step - 1, 12, T,
                                                      static_cast<int64_t>(data->train.size()));
        train::GatherSamples(data->train,
                             std::span<const int64_t>(offsets.data() + begin,
                                                      static_cast<size_t>(count)),
                             T, inputs, targets);
        auto result = (*rank)->Step(step, inputs, targets);
        if (!result.ok()) return fail(result.status());
        if (result->skipped) return fail(Err("step {} skipped", step));
      }
      std::lock_guard<std::mutex> lock(mu);
      const model::ParameterSet* held = (*rank)->params();
      if (held == nullptr) return fail(Err("rank {} holds no parameters", r));
      for (const model::Parameter& p : *held) {
        const auto key = std::make_pair(me.pipeline, p.name());
        auto& buf = values[key];
        buf.resize(static_cast<size_t>(p.info.FullShape().numel()));
        const std::vector<float> host = Host(backend, p.value);
        if (!p.info.sharded() && me.tp_rank == 1) {
          replicated_on_tp1[key] = host;
        } else {
          Place(p.info, host, buf);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : status) ASSERT_TRUE(s.ok()) << s.message();

  // 9 tensors per block, embedding, final norm, LM head; once per replica.
  ASSERT_EQ(values.size(), 2U * (4 * 9 + 3));
  int compared = 0;
  for (const auto& [key, v] : values) {
    if (key.first != 0) continue;
    const auto other = values.find(std::make_pair(1, key.second));
    ASSERT_NE(other, values.end()) << key.second;
    EXPECT_EQ(v, other->second) << key.second << " differs between the replicas";
    ++compared;
  }
  EXPECT_EQ(compared, 4 * 9 + 3);
  // Replicated tensors (norms, embedding, head) agree across the TP ranks of a stage.
  EXPECT_FALSE(replicated_on_tp1.empty());
  for (const auto& [key, v] : replicated_on_tp1) EXPECT_EQ(v, values[key]) << key.second;
  // And training moved them away from the initialisation.
  backend::CpuBackend backend(1);
  model::ParameterSet init = model::ParameterSet::Allocate(
      backend, model::StageParamInfos(run.model, model::StageLayout::Full(run.model)));
  init.Initialize(backend, run.train.seed);
  EXPECT_NE(Host(backend, init.Find("model.layers.1.mlp.down_proj.weight")->value),
            values[std::make_pair(0, std::string("model.layers.1.mlp.down_proj.weight"))]);
}

// ZeRO-1 is really on: blocks 0-1 are held by both replicas (one uniform group of 2), so their
// moments live only in the shards between steps; the head (held by replica 0's last stage and
// replica 1's only stage) too. GatherOptimizerState makes them whole and equal on both replicas.
TEST(ParallelRankTest, ZeroOneShardsMomentsAndGathersThemWhole) {
  const spec::RunFile run = TinyRun(2);
  spec::Plan plan = MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 3),
                              Pipeline({Stage(0, 4, true, true, {1})}, 3, 2)},
                             "zero1-dp2");
  plan.optimizer_sharding = spec::OptimizerSharding::kZero1;
  auto layout = WorldLayout::Build(plan);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  auto data = train::LoadTokenSplits(run.train.data, run.model.vocab_size, run.train.seq_len);
  ASSERT_TRUE(data.ok()) << data.status().message();
  backend::SetBlasThreads(1);
  auto world = comm::LocalWorld::Create(2);
  std::mutex mu;
  std::map<std::string, std::vector<float>> moments[2];  // per rank: name -> m after gathering
  int undefined[2] = {0, 0};  // per rank: tensors whose moments were sharded after the steps
  std::vector<Status> status(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& st) {
        status[static_cast<size_t>(r)] = st;
        world->Abort(st.message());
      };
      auto comm = world->Connect(r);
      if (!comm.ok()) return fail(comm.status());
      backend::CpuBackend backend(1, r);
      auto rank = parallel::ParallelRank::Create(*layout, r, run.model, run.train, backend, **comm);
      if (!rank.ok()) return fail(rank.status());
      const int64_t count = 6, T = run.train.seq_len;
      std::vector<int32_t> inputs(static_cast<size_t>(count * T)), targets(inputs.size());
      for (int64_t step = 1; step <= run.train.steps; ++step) {
        const auto offsets = train::TrainBatchOffsets(run.train.seed, step - 1, 12, T,
                                                      static_cast<int64_t>(data->train.size()));
        train::GatherSamples(data->train,
                             std::span<const int64_t>(offsets.data() + 6 * r,
                                                      static_cast<size_t>(count)),
                             T, inputs, targets);
        auto result = (*rank)->Step(step, inputs, targets);
        if (!result.ok()) return fail(result.status());
      }
      const model::ParameterSet* held = (*rank)->params();
      if (held == nullptr) return fail(Err("rank {} holds no parameters", r));
      int sharded = 0;
      for (const model::Parameter& p : *held) sharded += !p.m.defined();
      const Status gathered = (*rank)->GatherOptimizerState();
      if (!gathered.ok()) return fail(gathered);
      std::lock_guard<std::mutex> lock(mu);
      undefined[r] = sharded;
      for (const model::Parameter& p : *held) {
        if (!p.m.defined()) return fail(Err("{}: moments not gathered", p.name()));
        moments[r][p.name()] = Host(backend, p.m);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& st : status) ASSERT_TRUE(st.ok()) << st.message();
  // Every tensor of the model: 4 blocks x 9 + embedding, final norm, LM head.
  EXPECT_EQ(undefined[0], 4 * 9 + 3);
  EXPECT_EQ(undefined[1], 4 * 9 + 3);
  ASSERT_EQ(moments[0].size(), moments[1].size());
  for (const auto& [name, m] : moments[0]) {
    EXPECT_EQ(m, moments[1][name]) << name;
    double sum = 0.0;
    for (float x : m) sum += std::fabs(static_cast<double>(x));
    EXPECT_GT(sum, 0.0) << name << ": gathered moments are zero";
  }
}

}  // namespace
}  // namespace motley::testing
