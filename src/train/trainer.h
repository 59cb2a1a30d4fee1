// The single-device training loop: one CpuBackend with the run's thread count, one model Stage
// holding every block plus the embedding and the head, and AdamW. Each step samples the step's
// global batch from (seed, step) (batch_sampler.h), runs it as `micro_batches` forward/backward
// passes that accumulate gradients with loss scale 1 / (B*T) (docs/architecture.md §4), clips by
// global norm and takes one AdamW step on the warm-up + cosine schedule. Validation loss on fixed
// batches of the validation split every train.val_every steps and after the last step. Per-step
// metrics go to the JSONL file train.metrics_path (docs/formats/metrics.md); progress and a final
// summary go to `out`. This loop is the oracle that every parallel plan's trajectory is compared
// with.
//
// Checkpoints (trainer_checkpoint.h, when train.checkpoint.dir is set): saved after every
// `every_steps` steps, after the last step, and at the step boundary after a SIGTERM or a first
// SIGINT (the loop then returns normally with `stopped` set; a second SIGINT aborts); the last
// `keep_last` are kept. TrainerOptions::resume loads a checkpoint written under any plan for the
// same model (parameters and AdamW moments) and continues at its step + 1, appending to the
// metrics file; TrainerOptions::init_from starts from the weights of a checkpoint or a Hugging
// Face folder (fresh optimizer, step 1). A run that does neither refuses a checkpoint folder that
// already holds checkpoints unless TrainerOptions::overwrite (docs/formats/checkpoint.md, "Run
// life cycle").
//
// Errors (Result): unreadable or invalid data (naming the file or field), a global batch that the
// micro-batch count does not divide, an unwritable metrics file, a checkpoint for another model,
// a refused checkpoint folder, and a non-finite loss or gradient norm (naming the step). Thread
// safety: one call per thread; it sets OpenBLAS's process-wide thread count to the run's thread
// count.
#pragma once

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "spec/model_spec.h"
#include "spec/train_spec.h"

namespace motley::train {

struct TrainerOptions {
  int64_t micro_batches = 1;        // the global batch is split into this many equal micro-batches
  std::FILE* out = stdout;          // progress, validation lines and summary; nullptr: silent
  std::optional<bool> interactive;  // progress bar with '\r'; unset: whether `out` is a terminal
  int64_t log_every = 0;            // plain progress line every N steps; 0: steps / 20, at least 1
  // A checkpoint folder or ROOT (its latest complete checkpoint) to continue from; empty: start
  // from the seeded initialisation.
  std::string resume;
  // A checkpoint folder or ROOT, or a Hugging Face folder, whose weights the run starts from
  // (a fresh optimizer, step 1); empty: the seeded initialisation. Not with `resume`.
  std::string init_from;
  // A fresh run (no resume) into a checkpoint folder holding checkpoints removes them first;
  // without it such a run is refused.
  bool overwrite = false;
  // Test hook: raise `test_signal` (SIGTERM or SIGINT) in this process at the end of this step
  // (0: never).
  int64_t sigterm_at_step = 0;
  int test_signal = SIGTERM;
};

struct TrainSummary {
  int64_t steps = 0;                     // steps trained by this call
  int64_t first_step = 1;                // the first of them (checkpoint step + 1 on resume)
  std::vector<double> losses;            // mean train loss per step, index step - first_step
  std::vector<int64_t> loss_spike_steps;  // steps flagged by LossSpikeDetector (loss_spike.h)
  std::string last_checkpoint;           // folder of the last checkpoint saved; empty: none
  bool stopped = false;                  // ended early on SIGTERM or SIGINT (after saving)
  std::string stop_signal;               // "SIGTERM" or "SIGINT" when stopped
  int64_t tokens = 0;                    // tokens trained on (steps * B * T)
  double first_train_loss = 0.0;         // mean loss of step 1
  double final_train_loss = 0.0;         // mean loss of the last step
  std::optional<double> final_val_loss;  // after the last step (unset when val_every == 0)
  std::vector<std::pair<int64_t, double>> val_history;  // (step, val_loss)
  double train_time_s = 0.0;                            // sum of step times (validation excluded)
  double tokens_per_s = 0.0;                            // tokens / train_time_s
  double flops_per_token = 0.0;                         // spec::ModelFlopsPerToken
  double gflops = 0.0;               // achieved GFLOP/s: flops_per_token * tokens_per_s / 1e9
  int64_t params = 0;                // all parameters
  int64_t non_embedding_params = 0;  // N of the FLOP count
  int threads = 1;
};

// Trains `model` as `train` says. The data comes from train.data (LoadTokenSplits).
Result<TrainSummary> Train(const spec::ModelSpec& model, const spec::TrainSpec& train,
                           const TrainerOptions& options = {});

// The summary block printed at the end of a run (several lines, newline-terminated).
std::string FormatSummary(const TrainSummary& summary);

}  // namespace motley::train
