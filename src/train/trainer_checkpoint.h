// Checkpointing shared by the single-device loop (trainer.h) and the parallel loop
// (parallel_trainer.h): when a save is due, the SIGTERM stop flag, the sidecar metadata and the
// resolution of a --resume source. The checkpoint format itself is checkpoint/checkpoint.h.
//
// Resume is exact because the data position is plan-independent: step k's global batch depends
// only on (seed, k) (batch_sampler.h), so after loading the parameters and AdamW moments of step
// k, training continues at step k + 1 with the same batches, learning rates and bias corrections.
//
// Thread safety: the stop flag is a lock-free atomic set from the signal handler; StopSignalGuard
// installs the process-wide SIGTERM handler (one guard at a time per process). The other
// functions touch only their arguments and the file system.
#pragma once

#include <signal.h>

#include <csignal>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "spec/model_spec.h"
#include "spec/train_spec.h"
#include "train/checkpoint/checkpoint.h"

namespace motley::train {

// Installs a SIGTERM handler that only sets the stop flag (StopRequested) for its lifetime, and
// restores the previous handler on destruction. The loops check the flag at each step boundary,
// save a checkpoint and return normally.
class StopSignalGuard {
 public:
  StopSignalGuard();
  ~StopSignalGuard();
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

 private:
  struct sigaction previous_ {};
  bool installed_ = false;
};

// Whether SIGTERM arrived since the last ClearStopRequest (StopSignalGuard clears on install).
bool StopRequested();
void ClearStopRequest();

// A save is due after `step` when checkpoints are on (dir set) and the step is a multiple of
// every_steps (> 0), the last step of the run, or a stop was requested.
bool CheckpointDue(const spec::CheckpointSpec& ckpt, int64_t step, int64_t last_step,
                   bool stopping);

// SHA-256 of the model spec and the training fields that define the trajectory (seed, batch,
// sequence length, steps, optimizer): recorded in the sidecar; a resume under a different hash
// is allowed (e.g. more steps) but reported.
std::string TrainConfigHash(const spec::ModelSpec& model, const spec::TrainSpec& train);

// The sidecar metadata after `step` steps of `global_batch` sequences; `plan` is the writing
// plan's JSON (null when serial).
CheckpointMetadata MakeCheckpointMetadata(const spec::ModelSpec& model,
                                          const spec::TrainSpec& train, int64_t step,
                                          int64_t global_batch, nlohmann::json plan);

// What a resume starts from: the checkpoint folder and its metadata.
struct ResumePoint {
  std::string dir;
  CheckpointMetadata metadata;
};
// Resolves `path` (a checkpoint folder, or a ROOT: its latest complete checkpoint), opens and
// verifies it, and checks that it leaves steps to train (its step < train.steps). Errors name the
// path and the reason.
Result<ResumePoint> ResolveResume(const std::string& path, const spec::TrainSpec& train);

}  // namespace motley::train
