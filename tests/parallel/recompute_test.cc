// Activation recompute in the runtime (issue 12; model/block.h, model/stage.h), on ranks as
// threads:
//  - each mode (full, selective, and a mix per stage) trains the tiny model 20 steps with the
//    serial single-device losses within 1e-5 relative, under pipeline, tensor and data
//    parallelism, on CPU and emulated devices;
//  - on emulated devices, the FLOPs each rank's backend charges per step rise by exactly what
//    the op inventory predicts (spec/block_costs.h: per micro-batch and block, one
//    AttentionForward for selective, the whole block forward for full), so a recompute that
//    does nothing fails;
//  - and each rank's peak memory, as its emulated backend counts it, drops by exactly the
//    activations recompute does not keep (see ExpectedSavedBytes).
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/emulated/emulated_backend.h"
#include "comm/local_world.h"
#include "parallel/parallel_rank.h"
#include "parallel/world_layout.h"
#include "emulated_ranks.h"
#include "parallel_test_util.h"
#include "sched/schedule.h"
#include "spec/block_costs.h"
#include "train/batch_sampler.h"
#include "train/dataset.h"
#include "train/parallel_trainer.h"

namespace motley::testing {
namespace {

using spec::Recompute;

constexpr int64_t kSteps = 20;
constexpr double kRelTol = 1e-5;

const std::vector<double>& Oracle() {
  static const std::vector<double> losses = SerialLosses(TinyRun(kSteps));
  return losses;
}

spec::Plan WithRecompute(spec::Plan plan, Recompute r) {
  plan.SetRecompute(r);
  plan.source += std::string("-") + std::string(spec::RecomputeName(r));
  return plan;
}

void ExpectSerialTrajectory(const spec::Plan& plan, const spec::RunFile& run) {
  const std::vector<double>& serial = Oracle();
  ASSERT_EQ(serial.size(), static_cast<size_t>(kSteps));
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  auto summary = train::TrainParallel(run, plan, options);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  ASSERT_EQ(summary->losses.size(), serial.size());
  double worst = 0.0;
  for (size_t k = 0; k < serial.size(); ++k) {
    const double rel = std::abs(summary->losses[k] - serial[k]) / std::abs(serial[k]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, kRelTol) << plan.source << ": step " << k + 1 << " loss " << summary->losses[k]
                            << " vs serial " << serial[k];
  }
  EXPECT_TRUE(summary->skipped_steps.empty());
  EXPECT_LT(summary->losses.back(), summary->losses.front() - 0.5);
  std::printf("%s: %d ranks, worst relative loss difference to serial over %lld steps: %.3g\n",
              plan.source.c_str(), summary->ranks, static_cast<long long>(kSteps), worst);
}

// 3 uneven stages, 4 micro-batches in 1F1B order (stage 0 holds 3 in flight).
spec::Plan UnevenPipeline() {
  return MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 2, false, false, {1}),
                             Stage(3, 1, false, true, {2})},
                            4, 3)},
                  "pp3-uneven");
}

// 2 replicas x 2 stages x TP 2 (8 ranks), uneven batches.
spec::Plan TensorPipelineData() {
  return MakePlan(
      {Pipeline({Stage(0, 2, true, false, {0, 1}), Stage(2, 2, false, true, {2, 3})}, 2, 3),
       Pipeline({Stage(0, 3, true, false, {4, 5}), Stage(3, 1, false, true, {6, 7})}, 3, 2)},
      "tp2-pp2-dp2");
}

// Replicas of different stage counts and TP degrees, each stage with its own recompute mode.
spec::Plan MixedPerStage() {
  spec::Plan plan =
      MakePlan({Pipeline({Stage(0, 3, true, false, {0, 1}), Stage(3, 1, false, true, {2})}, 3, 2),
                Pipeline({Stage(0, 1, true, false, {4}), Stage(1, 2, false, false, {5}),
                          Stage(3, 1, false, true, {6, 7})},
                         3, 2)},
               "mixed-per-stage");
  plan.pipelines[0].stages[0].recompute = Recompute::kFull;
  plan.pipelines[0].stages[1].recompute = Recompute::kSelective;
  plan.pipelines[1].stages[0].recompute = Recompute::kSelective;
  plan.pipelines[1].stages[1].recompute = Recompute::kNone;
  plan.pipelines[1].stages[2].recompute = Recompute::kFull;
  return plan;
}

TEST(RecomputeInvarianceTest, FullRecomputeOnAnUnevenPipeline) {
  ExpectSerialTrajectory(WithRecompute(UnevenPipeline(), Recompute::kFull), TinyRun(kSteps));
}

TEST(RecomputeInvarianceTest, SelectiveRecomputeOnAnUnevenPipeline) {
  ExpectSerialTrajectory(WithRecompute(UnevenPipeline(), Recompute::kSelective), TinyRun(kSteps));
}

TEST(RecomputeInvarianceTest, FullRecomputeWithTensorPipelineAndDataParallel) {
  ExpectSerialTrajectory(WithRecompute(TensorPipelineData(), Recompute::kFull), TinyRun(kSteps));
}

TEST(RecomputeInvarianceTest, SelectiveRecomputeWithTensorPipelineAndDataParallel) {
  ExpectSerialTrajectory(WithRecompute(TensorPipelineData(), Recompute::kSelective),
                         TinyRun(kSteps));
}

TEST(RecomputeInvarianceTest, MixedPerStageWithDifferentReplicas) {
  ExpectSerialTrajectory(MixedPerStage(), TinyRun(kSteps));
}

// --- the emulated backend's counts ---------------------------------------------------------

// An emulated plan on EmulatedClusterYaml (fast devices 0-1, slow 2-5): a TP-2 stage and a
// pipeline of three stages, 1F1B with up to 3 micro-batches in flight.
spec::Plan EmulatedPlan() {
  return MakePlan(
      {Pipeline({Stage(0, 2, true, false, {0, 1}), Stage(2, 2, false, true, {2})}, 3, 2),
       Pipeline({Stage(0, 1, true, false, {3}), Stage(1, 2, false, false, {4}),
                 Stage(3, 1, false, true, {5})},
                3, 2)},
      "emulated-recompute");
}

// One block's shapes on a TP rank of degree tp, for micro-batches of b sequences.
spec::costs::BlockShape ShapeOf(const spec::RunFile& run, int64_t b, int tp) {
  const spec::ModelSpec& m = run.model;
  return {b,
          run.train.seq_len,
          m.hidden,
          m.num_heads / tp,
          m.num_kv_heads / tp,
          m.head_size(),
          m.ffn_hidden / tp};
}

// The bytes recompute `r` saves on a stage of `blocks` blocks holding `in_flight` micro-batches
// at once. The block keeps, per micro-batch (f32, model/block.h BlockActivations), ln1, x2, ln2
// (N x C each), rstd1 and rstd2 (N), q and the attention output (N x NH*HS each), k and v
// (N x NKV*HS each), the softmax probabilities (B x NH x T x T) and gate, up and their SwiGLU
// product (N x F each); the stage keeps each block's input and output (N x C) in every mode.
// Selective drops the probabilities per block and micro-batch and holds one probabilities
// buffer for the stage instead (Korthikanti et al. 2022: the 5as^2b term goes); full drops every
// block activation and holds one block's worth for the stage, in which each block's forward is
// rerun (their 2sbh per block remains: the kept inputs).
int64_t ExpectedSavedBytes(Recompute r, const spec::costs::BlockShape& s, int64_t blocks,
                           int64_t in_flight) {
  const int64_t n = s.n();
  const int64_t probabilities = s.b * s.nh * s.t * s.t;
  const int64_t block_activations = 3 * n * s.c + 2 * n + 2 * n * s.nh * s.hs +
                                    2 * n * s.nkv * s.hs + probabilities + 3 * n * s.f;
  int64_t elements = 0;
  if (r == Recompute::kSelective) elements = (in_flight * blocks - 1) * probabilities;
  if (r == Recompute::kFull) elements = (in_flight * blocks - 1) * block_activations;
  if (blocks == 0) elements = 0;
  return 4 * elements;
}

TEST(RecomputeEmulatedTest, FlopsRiseAndPeakMemoryDropsByThePredictedAmounts) {
  const spec::RunFile run = TinyEmulatedRun(2);
  const spec::Plan base = EmulatedPlan();
  const std::vector<RankCounts> none = RunEmulated(run, base, run.train.steps);
  auto layout = parallel::WorldLayout::Build(base);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(none.size(), static_cast<size_t>(layout->size()));

  std::vector<spec::Plan> plans = {WithRecompute(base, Recompute::kSelective),
                                   WithRecompute(base, Recompute::kFull)};
  spec::Plan mixed = base;
  mixed.source += "-mixed";
  mixed.pipelines[0].stages[0].recompute = Recompute::kSelective;
  mixed.pipelines[0].stages[1].recompute = Recompute::kFull;
  mixed.pipelines[1].stages[0].recompute = Recompute::kFull;
  mixed.pipelines[1].stages[2].recompute = Recompute::kSelective;  // stages[1]: none
  plans.push_back(mixed);
  for (const spec::Plan& plan : plans) {
    SCOPED_TRACE(plan.source);
    const std::vector<RankCounts> got = RunEmulated(run, plan, run.train.steps);
    ASSERT_EQ(got.size(), none.size());
    for (int r = 0; r < layout->size(); ++r) {
      const parallel::RankInfo& info = layout->rank(r);
      const spec::PipelinePlan& pipe = plan.pipelines[static_cast<size_t>(info.pipeline)];
      const spec::StagePlan& stage = pipe.stages[static_cast<size_t>(info.stage)];
      const spec::costs::BlockShape shape = ShapeOf(run, pipe.micro_batch_size, info.tp_degree);
      const double per_step =
          static_cast<double>(pipe.micro_batches * stage.num_blocks) *
          spec::costs::Total(spec::costs::BlockRecomputeOps(stage.recompute, shape)).flops;
      const auto& g = got[static_cast<size_t>(r)];
      const auto& n = none[static_cast<size_t>(r)];
      // FLOPs are integers far below 2^53: the sums are exact.
      EXPECT_EQ(g.flops - n.flops, static_cast<double>(run.train.steps) * per_step)
          << "rank " << r << " (" << spec::RecomputeName(stage.recompute) << ")";
      const int64_t in_flight =
          sched::OneFOneBInFlight(pipe.num_stages(), info.stage, pipe.micro_batches);
      EXPECT_EQ(g.activation_slots, in_flight) << "rank " << r;
      EXPECT_EQ(n.peak_bytes - g.peak_bytes,
                ExpectedSavedBytes(stage.recompute, shape, stage.num_blocks, in_flight))
          << "rank " << r << " (" << spec::RecomputeName(stage.recompute) << ")";
      if (stage.recompute != Recompute::kNone && stage.num_blocks > 0) {
        EXPECT_GT(g.flops, n.flops) << "rank " << r;
        // One block with one micro-batch in flight keeps as much as the stage's shared buffer.
        if (in_flight * stage.num_blocks > 1) {
          EXPECT_LT(g.peak_bytes, n.peak_bytes) << "rank " << r;
        }
      }
      std::printf(
          "%s rank %d (%s, %lld blocks, %lld in flight): +%.4g FLOP/step, peak %lld -> "
          "%lld bytes\n",
          plan.source.c_str(), r, std::string(spec::RecomputeName(stage.recompute)).c_str(),
          static_cast<long long>(stage.num_blocks), static_cast<long long>(in_flight),
          (g.flops - n.flops) / static_cast<double>(run.train.steps),
          static_cast<long long>(n.peak_bytes), static_cast<long long>(g.peak_bytes));
    }
  }
}

TEST(RecomputeEmulatedTest, RecomputeOnEmulatedDevicesKeepsTheSerialTrajectory) {
  spec::Plan plan = EmulatedPlan();
  plan.pipelines[0].stages[0].recompute = Recompute::kFull;
  plan.pipelines[1].stages[1].recompute = Recompute::kSelective;
  plan.pipelines[1].stages[2].recompute = Recompute::kFull;
  ExpectSerialTrajectory(plan, TinyEmulatedRun(kSteps));
}

}  // namespace
}  // namespace motley::testing
