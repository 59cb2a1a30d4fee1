// Internal to the parallel trainer (parallel_trainer.h), shared by its parts: set-up
// (parallel_setup.cc), the rank loop (parallel_rank_loop.cc), the per-step reports
// (parallel_step_report.cc) and the entry points (parallel_trainer.cc). Not a public interface:
// only those files include it.
//
// RunContext is what every rank of one run shares: read-only during the run, except the guarded
// first error and the summary, which only the summary rank fills. Every rank all-gathers
// RunContext::gather_stride doubles per step: kStepFields (PackTimes), then, with
// Options::straggler_reports on an emulated cluster, its link traffic (PackLinks); the report and
// the plan-switch decision read them.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "comm/communicator.h"
#include "comm/link_model.h"
#include "core/clock.h"
#include "core/status.h"
#include "parallel/parallel_rank.h"
#include "parallel/stage_executor.h"
#include "parallel/world_layout.h"
#include "sched/step_messages.h"
#include "spec/run_file.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"
#include "train/checkpoint/checkpoint.h"
#include "train/dataset.h"
#include "train/loss_spike.h"
#include "train/metrics.h"
#include "train/parallel_trainer.h"
#include "train/progress.h"

namespace motley::train::internal {

using Clock = std::chrono::steady_clock;
using parallel::RankInfo;
using parallel::StageTimes;
using parallel::TraceEvent;
using parallel::WorldLayout;

// Per-rank values gathered every step: the StageTimes fields, the skipped flag, the rank clock
// at the step's start and end, whether the rank saw a stop request (SIGTERM), and the probe op
// (measured and expected seconds; 0 when it ran none; expected 0 when no profile gives it).
constexpr int64_t kStepFields = sched::kStepMetricsDoubles;
constexpr int kSkippedField = 7;
constexpr int kStartField = 8;
constexpr int kEndField = 9;
constexpr int kStopField = 10;
constexpr int kProbeField = 11;
constexpr int kProbeExpectedField = 12;

struct Probe {
  double measured_s = 0.0;
  double expected_s = 0.0;
};

// Packs one rank's step fields into out[0, kStepFields).
void PackTimes(const StageTimes& t, bool skipped, double start_s, double end_s, bool stop,
               const Probe& probe, double* out);
// Packs a rank's link traffic (world_size destinations) into out[0, 3 * world_size): bytes,
// then transfers, then seconds, each by destination world rank.
void PackLinks(const comm::LinkTraffic& traffic, int world_size, double* out);

constexpr const char* kTimeNames[] = {"forward_s",  "backward_s",  "p2p_s", "tp_comm_s",
                                      "dp_sync_s", "optimizer_s", "step_s"};
constexpr int kNumTimes = 7;

// What every rank shares (read-only during the run, except the guarded error and the outputs of
// the summary rank).
struct RunContext {
  const spec::RunFile* run = nullptr;
  const ParallelTrainerOptions* options = nullptr;
  const WorldLayout* layout = nullptr;  // the first plan's; its devices are the world's
  const TokenSplits* data = nullptr;
  MetricsWriter* metrics = nullptr;  // rank 0 writes
  double flops_per_token = 0.0;
  double peak_flops = 0.0;       // sum of the plan's devices' fp32 peaks
  bool emulated = false;         // the plan's devices are of emulated types
  VirtualClock::Mode clock_mode = VirtualClock::Mode::kVirtual;  // when emulated
  std::unique_ptr<comm::LinkMatrix> links;                       // when emulated, by world rank
  // Doubles each rank all-gathers per step: kStepFields, plus 3 per world rank when link traffic
  // is reported (report_links: Options::straggler_reports on an emulated cluster).
  int64_t gather_stride = kStepFields;
  bool report_links = false;
  std::vector<std::vector<TraceEvent>> traces;  // per rank (each rank writes its own)
  int summary_rank = 0;                         // the rank that fills `summary`
  ParallelTrainSummary summary;
  LossSpikeDetector loss_spikes;  // the summary rank's
  Clock::time_point origin;
  // Rank 0's progress display (when options->out is set), created at its first step report;
  // progress_start is when that step began (the ETA's origin).
  std::optional<ProgressReporter> progress;
  Clock::time_point progress_start;

  // Checkpoints. first_step: 1, or the resumed checkpoint's step + 1. start_from: the checkpoint
  // (or Hugging Face folder) every rank loads before the first step, opened and checked once:
  // with its AdamW moments on resume, weights only with Options::init_from.
  int64_t first_step = 1;
  std::shared_ptr<const CheckpointReader> start_from;
  bool start_with_moments = false;
  std::optional<MetricsResume> metrics_resume;  // set on resume
  std::string resume_dir;  // the resumed checkpoint's folder (empty: not a resume)
  std::string start_note;         // the resume or init-from lines rank 0 prints before training
  std::string init_from_dir;      // Options::init_from, resolved (weights loaded on every rank)
  bool save_checkpoints = false;  // train.checkpoint.dir is set (parallel_checkpoint.h)
  bool stop_enabled = false;      // a StopSignalGuard is installed

  std::mutex mu;
  Status first_error;
  void Record(int rank, const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.ok()) first_error = s.WithContext(fmt::format("rank {}", rank));
  }
};

// "virtual", "wall" or "host".
const char* ClockName(const RunContext& ctx);
// Whether step `step` goes to the trace (Options::trace_path, trace_steps).
bool Traced(const ParallelTrainerOptions& o, int64_t step);
// The step time on the run's clock (see parallel_trainer.h) from every rank's gathered fields;
// wall_s is this rank's wall time of the step. Sets *virtual_s to the makespan over the ranks.
double StepTime(const RunContext& ctx, const tensor::Tensor& all, double wall_s,
                double* virtual_s);

// ---- set-up (parallel_setup.cc)

// The backend of rank r: a CudaBackend for a device type of vendor `cuda` (not emulated), an
// EmulatedBackend on `clock` for an emulated device type, else a CPU backend with one thread.
Result<std::unique_ptr<tensor::Backend>> MakeBackend(const RunContext& ctx, int r,
                                                     VirtualClock* clock);
// Ok, or the out-of-memory error of an emulated or CUDA device (names the device and the bytes).
Status MemoryStatus(const tensor::Backend& backend, int device);
// Before set-up (train/memory_check.h): every rank's stage against its device's memory, and the
// host's memory against the stages of CPU and emulated devices this process runs: all of them
// when `all_ranks_here` (ranks as threads), else the largest one (one rank per process). The
// outcome is the same in every process of a launch.
Status CheckStagesFit(const spec::RunFile& run, const WorldLayout& layout, bool all_ranks_here);

// Everything TrainParallel and TrainParallelProcess share before any rank starts: the checks,
// the layout, the data, the emulation (clock mode and link matrix) and the metrics file.
struct Prepared {
  std::unique_ptr<WorldLayout> layout;
  std::unique_ptr<TokenSplits> data;
  std::unique_ptr<RunContext> ctx;
  std::unique_ptr<MetricsWriter> metrics;  // on the heap: ctx->metrics points at it
};

// The checks, the layout, the data, the emulation, the resume or init-from source, and, with
// `rank0` (the threads launch, or rank 0 of a process launch once it knows its rank: see
// PrepareRankZero), the checkpoint folder and the metrics file.
Result<Prepared> Prepare(const spec::RunFile& run, const spec::Plan& plan,
                         const ParallelTrainerOptions& options, bool rank0);
// Rank 0's part of the preparation: the checkpoint folder (PrepareCheckpointDir, which may
// remove checkpoints under Options::overwrite) and the metrics file (appended on resume).
Status PrepareRankZero(Prepared& p, const spec::RunFile& run,
                       const ParallelTrainerOptions& options);
// The run's header line (and the note on distorted wall-clock timings); `launch` says how ranks
// run ("as threads", "as processes").
void PrintHeader(const RunContext& ctx, const spec::Plan& plan, const char* launch);

// ---- the rank loop (parallel_rank_loop.cc)

// Trains rank r of the plan over `world`; `clock` is the rank's emulated clock (nullptr when the
// cluster is not emulated), already charged by `world`. The rank's plan may change at a step
// boundary (see the top of parallel_trainer.h).
// `traffic` (nullptr unless ctx.report_links) is what `world` counts this rank's transfers in.
Status RunRank(RunContext& ctx, int r, comm::Communicator& host_world, VirtualClock* clock,
               std::atomic<int64_t>* step_counter, comm::LinkTraffic* traffic);

// ---- reports (parallel_step_report.cc)

// Rank `r` (the summary rank) records step `step`, run under `layout`, in the summary; rank 0
// also writes the metrics line and the progress line. `all` holds every rank's gathered fields;
// `val_loss` the validation loss measured after the step (when it was); `migration` (may be
// nullptr) is the plan switch that followed the step.
Status ReportStep(RunContext& ctx, int r, const WorldLayout& layout, int64_t step, double wall_s,
                  const parallel::RankStepResult& result, const tensor::Tensor& all,
                  std::optional<double> val_loss, const MigrationRecord* migration);
// A line of its own on rank 0's output (through the progress display, which clears its bar).
void Note(RunContext& ctx, const std::string& line);
// The summary of the run (and the trace file, and the printed summary, on rank 0).
Result<ParallelTrainSummary> Finish(RunContext& ctx);

}  // namespace motley::train::internal
