// ParallelRank: everything one rank of a hybrid-parallel run owns — its model::Stage per model
// chunk (one TP shard of one stage of one pipeline; v stages of one device group under interleaved
// 1F1B), AdamW on its own copy of the parameters (all chunks' as one set), the TP group, the
// per-layer data-parallel gradient groups and the stage executor — and one training step:
//
//   zero gradients; run the stage's 1F1B (or GPipe) action list over the communicator;
//   DpSync:        sum gradients over each layer's holders (grad_sync.h);
//   OptimizerStep: one world all-reduce of (loss sum, squared-norm share); if the loss or the
//                  norm is not finite the update is skipped on every rank (reported); otherwise
//                  clip by the global norm and take the AdamW step on every holder alike.
// The loss is sum(token losses) / tokens in the global batch and the data assignment follows the
// plan (world_layout.h), so every plan gives the serial trajectory (docs/architecture.md §4).
//
// A rank the plan leaves out (RankInfo::idle(), a layout over a fixed world after a plan switch)
// owns no stage: Create only joins the group splits and Step only joins the world all-reduce of
// (loss, norm), so it returns the step's loss and norm like every other rank. Evaluate runs the
// validation loss the same way: forward only, then one world all-reduce of the loss sum.
//
// Ownership: references the layout, Backend and world communicator (must outlive it).
// Thread safety: one rank's thread. Create and Step are collective: every rank of the layout
// calls them in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/optimizer.h"
#include "model/stage.h"
#include "parallel/comm_tp_group.h"
#include "parallel/grad_sync.h"
#include "parallel/rank_clock.h"
#include "parallel/stage_executor.h"
#include "parallel/world_layout.h"
#include "spec/model_spec.h"
#include "spec/train_spec.h"
#include "tensor/backend.h"

namespace motley::parallel {

struct ParallelRankOptions {
  // Fault injection for tests: on this (1-based) step, this rank writes NaN into its first
  // gradient before the data-parallel sync. 0: never.
  int64_t poison_gradient_step = 0;
  // Times every measurement (StageTimes, trace events): the rank's VirtualClock on an emulated
  // cluster, the steady clock from the run's origin otherwise.
  RankClock clock;
};

struct RankStepResult {
  double loss = 0.0;       // mean token loss of the global batch (same on every rank)
  double grad_norm = 0.0;  // global gradient norm before clipping (same on every rank)
  float lr = 0.0F;         // learning rate of this step's schedule
  bool skipped = false;    // update skipped: non-finite loss or gradient norm
  StageTimes times;  // on options.clock
};

class ParallelRank {
 public:
  static Result<std::unique_ptr<ParallelRank>> Create(const WorldLayout& layout, int rank,
                                                      const spec::ModelSpec& model,
                                                      const spec::TrainSpec& train,
                                                      tensor::Backend& backend,
                                                      comm::Communicator& world,
                                                      const ParallelRankOptions& options = {});

  // One training step (1-based). inputs / targets: this rank's pipeline's samples, (m * b, T) i32
  // in micro-batch order (needed on the first / last stage; pass them everywhere for simplicity).
  // `trace` (may be nullptr) receives this rank's actions, timed on options.clock.
  Result<RankStepResult> Step(int64_t step, std::span<const int32_t> inputs,
                              std::span<const int32_t> targets,
                              std::vector<TraceEvent>* trace = nullptr);

  // Validation: one global batch forward only (no gradients, no update) through this rank's
  // pipeline (StageExecutor::Evaluate). Returns the sum of token losses of the whole global batch,
  // summed over the world (the same on every rank; divide by its tokens for the mean). inputs /
  // targets as for Step. Collective: every rank of the layout calls it, an idle rank too.
  Result<double> Evaluate(std::span<const int32_t> inputs, std::span<const int32_t> targets);

  // ZeRO-1 plans (optimizer_sharding 'zero1', grad_sync.h): makes every AdamW moment of this
  // rank's stage whole again, before a checkpoint is written or state migrates. Collective over
  // the data-parallel groups (every rank calls it at the same step boundary); a no-op otherwise.
  Status GatherOptimizerState();

  const RankInfo& info() const { return info_; }
  bool idle() const { return info_.idle(); }
  // Model chunks of a non-idle rank (1 without interleaving), and chunk c's stage.
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  model::Stage& stage(int chunk = 0) { return *chunks_.at(static_cast<size_t>(chunk)); }
  // The rank's parameters (values, gradients, AdamW moments), every chunk's in chunk order;
  // nullptr on an idle rank. Read the rank's state here, not through stage(c).params(): the
  // ZeRO-1 moments are allocated in this set only.
  model::ParameterSet* params() { return chunks_.empty() ? nullptr : &params_; }

 private:
  ParallelRank(const WorldLayout& layout, int rank, const spec::TrainSpec& train,
               tensor::Backend& backend, comm::Communicator& world,
               const ParallelRankOptions& options)
      : layout_(layout),
        info_(layout.rank(rank)),
        train_(train),
        backend_(backend),
        world_(world),
        options_(options) {}

  const WorldLayout& layout_;
  RankInfo info_;
  spec::TrainSpec train_;
  tensor::Backend& backend_;
  comm::Communicator& world_;
  ParallelRankOptions options_;
  std::unique_ptr<CommTpGroup> tp_;
  std::vector<std::unique_ptr<model::Stage>> chunks_;  // by model chunk
  model::ParameterSet params_;                         // aliases every chunk's parameters
  std::unique_ptr<model::Optimizer> optimizer_;
  std::unique_ptr<GradientSync> grad_sync_;
  std::unique_ptr<StageExecutor> executor_;
};

}  // namespace motley::parallel
