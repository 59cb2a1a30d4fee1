// Saving a checkpoint from a running parallel job (parallel_trainer.h), by messages only, so that
// the same code serves ranks as threads (`local`) and one rank per process under mpiexec (`mpi`):
// the files, the atomic commit and keep-last of checkpoint/checkpoint.h, written by pipeline 0.
//
// Protocol (collective over the world communicator; every rank calls it after the same step):
//  1. ZeRO-1 plans gather their AdamW moments whole (ParallelRank::GatherOptimizerState).
//  2. Rank 0 calls BeginCheckpoint; the temporary folder, or the failure, goes to every rank.
//  3. In each stage of pipeline 0, every TP rank but the first sends the tensor-parallel shards it
//     holds (values, m and v of each sharded tensor, model::ParamInfo::sharded) to the stage's TP
//     rank 0 (point-to-point over the world, tag kCheckpointTag).
//  4. The TP rank 0 of each stage of pipeline 0 assembles the whole tensors and writes the stage's
//     files (WriteStageFiles); every writer's StageFiles JSON, or its failure, goes to every rank.
//  5. Rank 0 commits (CommitCheckpoint); the final folder, or the failure, goes to every rank.
// After each phase every rank knows the outcome, so a failure (an unwritable folder, a full disk)
// ends the save on every rank at the same point with the same error, and no rank waits for a
// message that will never come. A lost or aborted peer is a communication error (the caller
// aborts the world). Writers and rank 0 must see the same file system at ROOT (one host, or a
// shared file system).
//
// Ownership: borrows its arguments for the call; the shards received are held in host memory
// during the call only. Thread safety: one call per rank's thread, every rank at the same step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "parallel/parallel_rank.h"
#include "parallel/world_layout.h"
#include "spec/model_spec.h"
#include "spec/train_spec.h"
#include "tensor/backend.h"

namespace motley::train {

// The tag of the shard messages (parallel/migration.h uses comm::kMaxUserTag).
inline constexpr int kCheckpointTag = comm::kMaxUserTag - 1;

// Who saves: stage s is written by stage s of pipeline stage_pipeline[s] (empty: pipeline 0 for
// every stage, as in a healthy job; after a lost rank, stages of the replicas that survived,
// parallel_liveness.h: those pipelines have the same stages, block for block), and
// `comm_rank_of[q]` is layout world rank q's rank in the communicator the save runs over (empty:
// the same rank; -1: not in it). The communicator's rank 0 begins and commits.
struct CheckpointWriters {
  std::vector<int> stage_pipeline;
  std::vector<int> comm_rank_of;
  // The pipeline that writes stage `stage`.
  int PipelineOf(int stage) const {
    return stage_pipeline.empty() ? 0 : stage_pipeline.at(static_cast<size_t>(stage));
  }
};

// Saves the checkpoint of step `step` under train.checkpoint.dir (keep_last from it) for rank
// `rank` (running `layout`'s plan on `backend`, rank world.rank() of `world`). Returns the
// committed folder on every rank, or the same error on every rank (communication errors
// excepted). With `writers` other than the default, ZeRO-1 moments are not gathered (the caller
// refuses ZeRO-1 plans).
Result<std::string> SaveParallelCheckpoint(comm::Communicator& world,
                                           const parallel::WorldLayout& layout,
                                           parallel::ParallelRank& rank, tensor::Backend& backend,
                                           const spec::ModelSpec& model,
                                           const spec::TrainSpec& train, int64_t step,
                                           const CheckpointWriters& writers = {});

// Every rank's `mine`, in rank order (collective: two all-gathers, lengths then bytes).
Result<std::vector<std::string>> AllGatherStrings(comm::Communicator& world,
                                                  const std::string& mine);

}  // namespace motley::train
