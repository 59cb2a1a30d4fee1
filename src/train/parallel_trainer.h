// The hybrid-parallel training loop: runs a run file under a Plan (pipelines of uneven stages,
// per-stage TP degrees, uneven micro-batches) with every rank as a thread of this process over the
// `local` communicator, one CpuBackend with one thread per rank and OpenBLAS set to one thread
// process-wide (DESIGN.md §6). Each rank is a parallel::ParallelRank; the math is plan-invariant
// (DESIGN.md §4), so the per-step losses equal those of the serial loop (trainer.h) up to
// floating-point reassociation.
//
// Per step, rank 0 gathers every rank's times and writes one JSONL line (docs/formats/
// parallel-metrics.md): loss, lr, grad norm, tokens/s, MFU, a `skipped` flag, and per-rank and
// per-stage forward, backward, pipeline-transfer, TP, DP-sync and optimizer times. A step whose
// loss or gradient norm is not finite is skipped on every rank and reported (not an error). With
// a trace path, the actions of chosen steps of every rank go to a Chrome trace (Perfetto JSON,
// docs/formats/trace.md).
//
// Errors (Result): a plan rejected by CheckPlanForRun (before any rank starts), unreadable data,
// unwritable metrics or trace files, and any rank's failure (the world is aborted so that no rank
// waits forever; the first failure is returned). Thread safety: one call at a time per process
// (it sets OpenBLAS's process-wide thread count).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "spec/plan.h"
#include "spec/run_file.h"

namespace motley::train {

struct ParallelTrainerOptions {
  std::FILE* out = stdout;    // progress lines and summary; nullptr: silent
  int64_t log_every = 0;      // progress line every N steps; 0: steps / 20, at least 1
  std::string metrics_path;   // JSONL; empty: train.metrics_path (empty too: none)
  std::string trace_path;     // Chrome trace JSON; empty: none
  std::vector<int64_t> trace_steps;  // steps to trace (1-based); empty with trace_path: step 1
  comm::CommOptions comm;
  // Fault injection for tests: rank `poison_rank` writes NaN into a gradient on this step.
  int64_t poison_gradient_step = 0;
  int poison_rank = 0;
};

struct ParallelTrainSummary {
  int64_t steps = 0;
  int ranks = 0;
  std::vector<double> losses;          // per step, index step - 1
  std::vector<double> grad_norms;      // per step
  std::vector<int64_t> skipped_steps;  // steps whose update was skipped (non-finite)
  int64_t tokens = 0;
  double train_time_s = 0.0;           // sum of step wall times
  double tokens_per_s = 0.0;
  double gflops = 0.0;                 // achieved GFLOP/s (flops.h accounting)
  double mfu = 0.0;                    // gflops / sum of the plan's devices' fp32 peak
};

// The checks `motley train --plan` runs before starting any rank: spec::ValidatePlan (every
// error names the pipeline, stage and field) plus what this runtime does not implement
// (optimizer_sharding 'zero1'). Errors are prefixed with the plan's source.
Status CheckPlanForRun(const spec::RunFile& run, const spec::Plan& plan);

Result<ParallelTrainSummary> TrainParallel(const spec::RunFile& run, const spec::Plan& plan,
                                           const ParallelTrainerOptions& options = {});

// Summary block printed at the end (several lines, newline-terminated).
std::string FormatParallelSummary(const ParallelTrainSummary& summary);

}  // namespace motley::train
