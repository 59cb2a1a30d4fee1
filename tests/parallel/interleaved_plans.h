// Interleaved 1F1B plans of the runtime tests (issue 12) and one rank's training loop over
// parallel::ParallelRank, shared by the threaded test (interleaved_rank_test.cc) and the one under
// mpiexec (mpi_interleaved_test.cc): every rank returns the per-step losses (the same on every
// rank) and the validation loss sum of the first step's batch, taken before training.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "comm/communicator.h"
#include "parallel/parallel_rank.h"
#include "parallel/world_layout.h"
#include "parallel_test_util.h"
#include "train/batch_sampler.h"
#include "train/dataset.h"

namespace motley::testing::interleaved {

// The tiny run with a 6-block model (room for 2 groups x 3 chunks).
inline spec::RunFile SixBlockRun(int64_t steps) {
  spec::RunFile run = TinyRun(steps);
  run.model.num_blocks = 6;
  return run;
}

// The tiny 4-block model, 2 device groups of 2 chunks of one block each (devices 0, 1).
inline spec::Plan TwoChunks() {
  return MakePlan({InterleavedPipeline({{0}, {1}}, {1, 1, 1, 1}, 6, 2)}, "p2-v2");
}
// The 6-block model: 2 groups of 3 chunks (devices 0, 1).
inline spec::Plan ThreeChunks() {
  return MakePlan({InterleavedPipeline({{0}, {1}}, {1, 1, 1, 1, 1, 1}, 4, 3)}, "p2-v3");
}
// The 6-block model: chunks of 2, 1, 1 and 2 blocks; group 0 is a TP-2 group (devices 0, 1),
// group 1 one device (2); 3 micro-batches (below 2p, the interleaved schedule's other accepted
// range).
inline spec::Plan UnevenChunksTp() {
  return MakePlan({InterleavedPipeline({{0, 1}, {2}}, {2, 1, 1, 2}, 3, 4)}, "uneven-tp");
}
// The 6-block model: replica 0 interleaves 3 chunks over 2 groups, replica 1 runs 2 plain stages,
// replica 2 two uneven chunks over 2 groups (devices 0-5): the gradient groups join layers held by
// differently chunked ranks.
inline spec::Plan MixedChunkCounts() {
  return MakePlan({InterleavedPipeline({{0}, {1}}, {1, 1, 1, 1, 1, 1}, 2, 2),
                   InterleavedPipeline({{2}, {3}}, {3, 3}, 2, 2),
                   InterleavedPipeline({{4}, {5}}, {1, 2, 2, 1}, 2, 2)},
                  "mixed-v");
}

struct RankRun {
  std::vector<double> losses;   // per step, the global batch's mean loss
  double validation_sum = 0.0;  // before training, the first step's batch
};

// Rank r of `layout` over `world` (its rank r): validation on step 1's batch, then
// run.train.steps training steps on the run's data, on the CPU backend.
inline Result<RankRun> TrainRank(const spec::RunFile& run, const parallel::WorldLayout& layout,
                                 int r, comm::Communicator& world) {
  MOTLEY_ASSIGN_OR_RETURN(
      const train::TokenSplits data,
      train::LoadTokenSplits(run.train.data, run.model.vocab_size, run.train.seq_len));
  backend::CpuBackend backend(1, r);
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<parallel::ParallelRank> rank,
      parallel::ParallelRank::Create(layout, r, run.model, run.train, backend, world));
  int64_t begin = 0;
  int64_t count = 0;
  if (!rank->idle()) {
    const auto& slices = layout.samples()[static_cast<size_t>(rank->info().pipeline)];
    begin = slices.front().begin;
    count = static_cast<int64_t>(slices.size()) * slices.front().count;
  }
  const int64_t T = run.train.seq_len;
  std::vector<int32_t> inputs(static_cast<size_t>(count * T)), targets(inputs.size());
  auto gather = [&](int64_t step) {
    const auto offsets = train::TrainBatchOffsets(run.train.seed, step - 1, run.train.global_batch,
                                                  T, static_cast<int64_t>(data.train.size()));
    train::GatherSamples(
        data.train, std::span<const int64_t>(offsets.data() + begin, static_cast<size_t>(count)), T,
        inputs, targets);
  };
  RankRun out;
  gather(1);
  MOTLEY_ASSIGN_OR_RETURN(out.validation_sum, rank->Evaluate(inputs, targets));
  for (int64_t step = 1; step <= run.train.steps; ++step) {
    gather(step);
    MOTLEY_ASSIGN_OR_RETURN(const parallel::RankStepResult result,
                            rank->Step(step, inputs, targets));
    if (result.skipped) return Err("rank {}: step {} skipped", r, step);
    out.losses.push_back(result.loss);
  }
  return out;
}

// The plan passes the one plan rule (every command accepts it).
inline void ExpectValid(const spec::RunFile& run, const spec::Plan& plan) {
  const Status s = spec::ValidatePlan(plan, run.cluster, run.model, run.train);
  EXPECT_TRUE(s.ok()) << plan.source << ": " << s.message();
}

// Every step's loss against the serial loop's within `rel_tol` relative; prints the worst.
inline void ExpectSerialLosses(const std::string& what, const std::vector<double>& losses,
                               const std::vector<double>& serial, double rel_tol = 1e-5) {
  ASSERT_EQ(losses.size(), serial.size()) << what;
  double worst = 0.0;
  for (size_t k = 0; k < serial.size(); ++k) {
    const double rel = std::abs(losses[k] - serial[k]) / std::abs(serial[k]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, rel_tol) << what << ": step " << k + 1 << " loss " << losses[k] << " vs serial "
                            << serial[k];
  }
  EXPECT_LT(losses.back(), losses.front() - 0.5) << what << ": it trained";
  std::printf("%s: worst relative loss difference to serial over %zu steps: %.3g\n", what.c_str(),
              serial.size(), worst);
}

}  // namespace motley::testing::interleaved
