// The run life cycle shared by the single-device loop (trainer.h) and the parallel loop
// (parallel_trainer.h), docs/formats/checkpoint.md "Run life cycle": when a save is due, the stop
// signals (SIGTERM and SIGINT), the config record in the sidecar, the preparation of the
// checkpoint folder (a fresh run into a folder holding checkpoints is refused unless it
// overwrites them), and resuming (the checkpoint must be for the run's model; differing training
// settings are named; the learning-rate schedule's continuation is stated). The checkpoint
// format itself is checkpoint/checkpoint.h.
//
// Resume is exact because the data position is plan-independent: step k's global batch depends
// only on (seed, k) (batch_sampler.h), so after loading the parameters and AdamW moments of step
// k, training continues at step k + 1 with the same batches, learning rates and bias corrections
// (when train.steps and the optimizer settings are those of the run that wrote it).
//
// Thread safety: the stop flag is a lock-free atomic set from the signal handler; StopSignalGuard
// installs the process-wide SIGTERM and SIGINT handlers (one guard at a time per process). The
// other functions touch only their arguments and the file system.
#pragma once

#include <signal.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "spec/model_spec.h"
#include "spec/train_spec.h"
#include "train/checkpoint/checkpoint.h"

namespace motley::train {

// Installs handlers for SIGTERM and SIGINT for its lifetime and restores the previous ones on
// destruction. The first SIGTERM or SIGINT only sets the stop flag (StopRequested; a note goes to
// stderr): the loops save a checkpoint at the next step boundary and return normally. A SIGINT
// after that (a second Ctrl-C) restores the default action and re-raises it: the process ends at
// once without saving. Further SIGTERMs are ignored (the stop is already under way).
class StopSignalGuard {
 public:
  StopSignalGuard();
  ~StopSignalGuard();
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

 private:
  struct sigaction previous_term_ {};
  struct sigaction previous_int_ {};
  bool installed_ = false;
};

// Whether a stop signal arrived since the last ClearStopRequest (StopSignalGuard clears on
// install), and which ("SIGTERM", "SIGINT"; "" when none).
bool StopRequested();
const char* StopSignalName();
void ClearStopRequest();

// A save is due after `step` when checkpoints are on (dir set) and the step is a multiple of
// every_steps (> 0), the last step of the run, or a stop was requested.
bool CheckpointDue(const spec::CheckpointSpec& ckpt, int64_t step, int64_t last_step,
                   bool stopping);

// SHA-256 of the model spec and the training fields that define the trajectory: recorded in the
// sidecar for information (the config record is what is compared).
std::string TrainConfigHash(const spec::ModelSpec& model, const spec::TrainSpec& train);

// The training half of the config record: seed, global_batch, seq_len, steps and optimizer (lr,
// min_lr, warmup_steps, weight_decay, beta1, beta2, eps, grad_clip).
nlohmann::json TrainConfigToJson(const spec::TrainSpec& train);

// The sidecar metadata after `step` steps of `global_batch` sequences, with the config record of
// `model` and `train`; `plan` is the writing plan's JSON (null when serial).
CheckpointMetadata MakeCheckpointMetadata(const spec::ModelSpec& model,
                                          const spec::TrainSpec& train, int64_t step,
                                          int64_t global_batch, nlohmann::json plan);

// Prepares train.checkpoint.dir for a run (nothing when it is empty). Refuses `/` and the home
// directory (kInvalidArgument). A run that does not resume (`resumed_step` unset) into a folder
// that holds checkpoints is refused (kFailedPrecondition) unless `overwrite`: then, when
// `may_modify`, the folders motley wrote (marker file) and `latest` are removed first, said on
// `out`; a checkpoint without the marker is never removed, and the run is refused. A resumed run
// is refused when the folder's `latest` is newer than the checkpoint it resumes (`latest` never
// moves backwards). `may_modify` false (the other processes of a launch): checks only.
Status PrepareCheckpointDir(const spec::CheckpointSpec& ckpt, std::optional<int64_t> resumed_step,
                            bool overwrite, bool may_modify, std::FILE* out);

// What a resume starts from.
struct ResumePoint {
  std::string dir;  // the checkpoint folder
  CheckpointMetadata metadata;
  // The opened, verified checkpoint, to load from without reading it again (its const methods
  // may be called from several threads at once: they only read files).
  std::shared_ptr<const CheckpointReader> reader;
  // One line per training setting that differs from the run that wrote the checkpoint
  // ("train.optimizer.lr: 0.001 in the checkpoint's run, 0.002 now"); train.steps is not one
  // (raising it is how a run is extended).
  std::vector<std::string> differences;
  std::string lr_schedule;  // how the learning-rate schedule continues (one line)
};
// Resolves `path` (a checkpoint folder, or a ROOT: its latest complete checkpoint), opens and
// verifies it for `model` (CheckpointReader::OpenFor: another model is refused naming each
// differing field), and checks that it holds optimizer state and leaves steps to train (its step
// < train.steps). Errors name the path and the reason.
Result<ResumePoint> ResolveResume(const std::string& path, const spec::ModelSpec& model,
                                  const spec::TrainSpec& train);
// The lines a loop prints on resume: where from and at which step it continues, each difference
// as a note, and the learning-rate line.
std::string FormatResume(const ResumePoint& point);

// Opens `path` (a checkpoint folder or ROOT of motley, or a Hugging Face folder) for `model`
// (CheckpointReader::OpenFor), for `motley train --init-from` (weights only: a fresh optimizer
// and step 0). The load message is reader.Describe().
Result<CheckpointReader> OpenInitFrom(const std::string& path, const spec::ModelSpec& model);

}  // namespace motley::train
