// The hybrid-parallel training loop: runs a run file under a Plan (pipelines of uneven stages,
// per-stage TP degrees, uneven micro-batches). Two launches:
//  - TrainParallel: every rank a thread of this process over the `local` communicator, OpenBLAS
//    set to one thread process-wide (docs/architecture.md §6);
//  - TrainParallelProcess: this process runs ONE rank over a communicator the caller connects
//    (the mpi backend under mpiexec: world rank r drives the plan's r-th device, world_layout.h).
// Each rank is a parallel::ParallelRank with one backend thread; the math is plan-invariant
// (docs/architecture.md §4), so the per-step losses equal those of the serial loop (trainer.h) up
// to floating-point reassociation.
//
// Emulated clusters (docs/architecture.md §6): when the plan's devices are of emulated device
// types, each rank gets its own VirtualClock and an EmulatedBackend with its device type's profile
// and memory capacity, and the communicator charges every transfer on that clock over the link
// class the cluster spec puts between the two devices (ClusterSpec::LinkBetween). Clock `virtual`
// (the default) sleeps nowhere and makes every reported time exact and repeatable; `wall` paces
// each rank to its emulated time. Step times and tokens/s are then on the emulated clock (virtual:
// the step's makespan, max over ranks of its end minus min of its start; wall: rank 0's wall time).
// Devices of non-emulated types run on a CpuBackend, timed by the steady clock (clock `host`).
//
// Validation (as in the serial loop, trainer.h): every train.val_every steps and after the last
// step, every rank runs the same train.val_batches fixed global batches of the validation split
// forward only through its pipeline (ParallelRank::Evaluate); the loss goes to the step's metrics
// line (`val_loss`), the progress output and the summary. Its time is outside every step time.
//
// Progress (progress.h, rank 0 only): one line per step on a terminal, plain lines every
// log_every steps otherwise, with wall-clock tokens/s, the emulated rate on the virtual clock,
// and the ETA.
//
// Per step, rank 0 gathers every rank's times and writes one JSONL line (docs/formats/
// parallel-metrics.md): loss, lr, grad norm, tokens/s, MFU, a `skipped` flag, the clock, and
// per-rank and per-stage forward, backward, pipeline-transfer, TP, DP-sync and optimizer times. A
// step whose
// loss or gradient norm is not finite is skipped on every rank and reported (not an error); a
// loss far above its recent trend is flagged as a spike (loss_spike.h). With
// a trace path, the actions of chosen steps of every rank go to a Chrome trace (Perfetto JSON,
// docs/formats/parallel-metrics.md, "Chrome trace").
//
// Checkpoints (trainer_checkpoint.h; both launches): with train.checkpoint.dir set, after every
// `every_steps` steps, after the last step and at the step boundary after a SIGTERM or a first
// SIGINT to any rank's process (every rank stops at the same step: the stop flag travels with the
// step's metrics gather; a second SIGINT aborts), pipeline 0's stages each write their files and
// rank 0 commits; the last `keep_last` are kept. The run life cycle is the serial loop's
// (trainer.h): a fresh run refuses a folder holding checkpoints unless Options::overwrite,
// Options::init_from starts from weights, a resume appends to the metrics file. The save goes by
// messages over the world communicator (parallel_checkpoint.h: the TP rank 0 of a stage receives
// its group's shards and assembles the whole tensors; the outcome of each phase is agreed by all
// ranks), so threads and processes share it; under a launcher the writers and rank 0 must see ROOT
// on one file system. Options::resume loads a checkpoint written under any plan (or serially) into
// every rank and continues at its step + 1.
//
// Plan switches (docs/architecture.md §9; the entry point of the re-plan controller): after each
// step, rank 0 asks Options::plan_switch (or looks the step up in Options::plan_switches) for a new
// plan; the answer is broadcast to every rank. A new plan must pass CheckPlanForRun and use only
// devices of the world (Options::world_devices; its size never changes); a device it leaves out
// idles (it joins the world's collectives and runs the probe op, trains nothing) until a later
// plan takes it back. The first plan may leave devices idle too. On a switch every rank snapshots
// its state to host memory, frees its old stage, builds the new one (TP and DP groups, schedule,
// executor) and receives its parameters and AdamW moments directly from their old holders
// (parallel/migration.h); the next step's data assignment follows the new plan, so the loss
// trajectory is unchanged. The step's metrics line gets a `migration` record (bytes, time, old and
// new plan), the progress line says it, and the summary lists every migration. With
// Options::check_migrations each replica's state checksum (parallel::ChecksumState) is taken just
// before and just after, and a difference is an error. Trace rows keep the labels of the first
// plan.
//
// Errors (Result): a plan rejected by CheckPlanForRun (before any rank starts), a plan mixing
// emulated and non-emulated device types, an emulated device's memory capacity exceeded (names
// the device and the bytes), unreadable data, unwritable metrics or trace files, and any rank's
// failure (the world is aborted so that no rank waits forever; the first failure is returned).
// Thread safety: one call at a time per process (it sets OpenBLAS's process-wide thread count).
#pragma once

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "comm/communicator.h"
#include "comm/link_model.h"
#include "core/status.h"
#include "parallel/migration.h"
#include "parallel/stage_executor.h"
#include "spec/plan.h"
#include "spec/run_file.h"

namespace motley::train {

// The clock of an emulated run. kAuto: kVirtual on an emulated cluster (and the steady clock on a
// non-emulated one, where kVirtual and kWall are errors).
enum class ClockChoice : uint8_t { kAuto, kVirtual, kWall };
// Parses "auto" | "virtual" | "wall".
Result<ClockChoice> ParseClockChoice(const std::string& text);

// One step as rank 0 sees it once every rank reported (the input of a plan-switch decision).
struct StepReport {
  int64_t step = 0;
  double loss = 0.0;
  double grad_norm = 0.0;
  bool skipped = false;
  double step_time_s = 0.0;  // on `clock` (see the top of this file)
  std::string clock;         // "virtual", "wall" or "host"
  const spec::Plan* plan = nullptr;  // the plan the step ran under; valid during the call only
  struct Rank {
    int rank = 0;
    int device = 0;
    bool idle = false;          // left out of the plan
    parallel::StageTimes times;  // on the rank's clock
    // The probe op (a small matmul) after the step: an idle rank runs it every step, and with
    // Options::straggler_reports every rank on a real (non-emulated) device does too, so that
    // its peers of the same type give an idle device's expected time. Its time on the rank's
    // clock, and the time the device type's emulated profile gives it (0 on a real device, or
    // when none ran).
    double probe_s = 0.0;
    double probe_expected_s = 0.0;
    // With Options::straggler_reports on an emulated cluster: what the rank sent over its link to
    // each other world rank since its previous report (comm::LinkTraffic); empty otherwise.
    struct Link {
      int to_rank = 0;
      int to_device = 0;
      double bytes = 0.0;
      int64_t transfers = 0;
      double seconds = 0.0;  // on the wire (not waiting for the peer)
    };
    std::vector<Link> links;
  };
  std::vector<Rank> ranks;  // every world rank, by rank
};

// Called on rank 0 after each step but the last (not after a SIGTERM stop); a plan returned is
// adopted before the next step (see the top of this file); std::nullopt keeps the current plan.
using PlanSwitchFn =
    std::function<std::optional<spec::Plan>(int64_t step, const StepReport& report)>;

// A scheduled switch: after step `step`, adopt `plan`.
struct PlanSwitch {
  int64_t step = 0;
  spec::Plan plan;
};

struct ParallelTrainerOptions {
  // The world (docs/architecture.md §9): the devices the launched ranks drive, world rank r driving
  // world_devices[r] (distinct, ascending, devices of the run's cluster). Empty: the devices of
  // the plan the run starts with. `motley train` passes every device of the cluster
  // (ClusterWorld): any plan may then use any subset, and a device it leaves out idles (it joins
  // the world's collectives and runs the probe op, trains nothing). TrainParallel starts one
  // thread per world device; under TrainParallelProcess the launcher must have started exactly
  // that many processes.
  std::vector<int> world_devices;
  std::FILE* out = stdout;    // progress lines and summary; nullptr: silent
  int64_t log_every = 0;      // plain progress line every N steps; 0: steps / 20, at least 1
  std::optional<bool> interactive;  // progress bar with '\r'; unset: whether `out` is a terminal
  std::string metrics_path;   // JSONL; empty: train.metrics_path (empty too: none)
  std::string trace_path;     // Chrome trace JSON; empty: none
  std::vector<int64_t> trace_steps;  // steps to trace (1-based); empty with trace_path: step 1
  comm::CommOptions comm;
  ClockChoice clock = ClockChoice::kAuto;
  // Fault injection for tests: rank `poison_rank` writes NaN into a gradient on this step.
  int64_t poison_gradient_step = 0;
  int poison_rank = 0;
  // A checkpoint folder or ROOT (its latest complete checkpoint) to continue from; empty: start
  // from the seeded initialisation. The metrics file is appended to (metrics.h).
  std::string resume;
  // A checkpoint folder or ROOT, or a Hugging Face folder, whose weights the run starts from (a
  // fresh optimizer, step 1); empty: the seeded initialisation. Not with `resume`.
  std::string init_from;
  // A fresh run (no resume) into a checkpoint folder that holds checkpoints removes them first
  // (rank 0); without it such a run is refused (trainer_checkpoint.h PrepareCheckpointDir).
  bool overwrite = false;
  // Test hook: rank `sigterm_rank` raises `test_signal` (SIGTERM or SIGINT) in its process at the
  // end of this step (0: never). Only with checkpoints on (train.checkpoint.dir), whose handler
  // turns it into a stop.
  int64_t sigterm_at_step = 0;
  int sigterm_rank = 0;
  int test_signal = SIGTERM;
  // Plan switches: the callback is asked first; when it is unset or returns std::nullopt, a
  // plan_switches entry for the step (the first one) applies.
  PlanSwitchFn plan_switch;
  std::vector<PlanSwitch> plan_switches;
  // Checksum every replica's state before and after each migration; a difference is an error.
  bool check_migrations = false;
  // A straggler loop listens (`motley train --replan`): every rank's link traffic goes into the
  // step report (emulated links; StepReport::Rank::links), and ranks on real devices run the
  // probe op every step. It sizes the per-step all-gather: set it on every rank alike.
  bool straggler_reports = false;
  // Ranks on devices of vendor `cuda` (a CudaBackend, docs/backend-cuda.md): false runs them in
  // fp32; true rounds matmul operands to bf16 (fp32 accumulation, fp32 master weights).
  bool cuda_bf16 = false;
  // Straggler injection (emulated clusters only; `motley train --inject`, docs/formats/
  // scenario.md): a schedule is a list of (first step, rate), the rate a fraction of nominal speed
  // (0.33: three times slower, 1: healthy). device_rates[d]: device d's emulated backend (empty:
  // nominal); link_rates(a, b): the link between devices a and b, both directions (unset: none).
  using RateSteps = std::vector<std::pair<int64_t, double>>;
  std::vector<RateSteps> device_rates;
  std::function<RateSteps(int device_a, int device_b)> link_rates;
  // Under a launcher, after a rank was lost (a silent peer, comm liveness; parallel_liveness.h):
  // called on every survivor with the error it is about to return (kUnavailable), before the
  // survivors' last barrier, so that each has reported it before any ends the job (MPI_Abort
  // ends every process at once). Unset: nothing is called.
  std::function<void(const Status&)> report_lost_peer;
  // Called on rank 0 with each step's metrics line before it is written, to add records (e.g. the
  // straggler loop's `straggler` record, docs/formats/parallel-metrics.md). Unset: nothing added.
  std::function<void(int64_t step, nlohmann::ordered_json& line)> annotate_metrics;
};

// One plan switch as it happened.
struct MigrationRecord {
  int64_t step = 0;             // after this step (the next one ran under `to`)
  std::string from, to;         // plan names (Plan::source, or "plan")
  int64_t bytes = 0;            // network bytes moved, all ranks together
  int64_t local_bytes = 0;      // bytes ranks kept (copied in place, not transferred)
  // On the run's clock: the virtual makespan over ranks (virtual clock), else the slowest rank.
  double time_s = 0.0;          // the whole switch: snapshot, rebuild, transfer, write-back
  double transfer_s = 0.0;      // its transfer part (parallel::Migrate), slowest rank
  std::vector<int64_t> sent_bytes;      // per world rank
  std::vector<int64_t> received_bytes;  // per world rank
  // With check_migrations: per replica, just before (old plan) and just after (new plan).
  std::vector<parallel::StateChecksum> before, after;
};

struct ParallelTrainSummary {
  int64_t steps = 0;                   // steps trained by this call
  int64_t first_step = 1;              // the first of them (checkpoint step + 1 on resume)
  int ranks = 0;
  std::vector<double> losses;          // per step, index step - first_step
  // (step, validation loss) every train.val_every steps and after the last step (val_every 0:
  // none); the loss over train.val_batches fixed batches of the validation split, as serially.
  std::vector<std::pair<int64_t, double>> val_history;
  std::string last_checkpoint;         // folder of the last checkpoint saved; empty: none
  bool stopped = false;                // ended early on SIGTERM or SIGINT (after saving)
  std::string stop_signal;             // "SIGTERM" or "SIGINT" when stopped
  std::vector<double> grad_norms;      // per step
  std::vector<int64_t> skipped_steps;  // steps whose update was skipped (non-finite)
  std::vector<int64_t> loss_spike_steps;  // steps flagged by LossSpikeDetector (loss_spike.h)
  int64_t tokens = 0;
  // "virtual" or "wall" (emulated devices), "host" (non-emulated: the steady clock).
  std::string clock;
  std::vector<double> step_times_s;    // per step, on `clock` (see the top of this file)
  double train_time_s = 0.0;           // sum of step_times_s plus migration_time_s
  double wall_time_s = 0.0;            // sum of rank 0's wall step times
  double tokens_per_s = 0.0;           // tokens / train_time_s (on `clock`)
  double gflops = 0.0;                 // achieved GFLOP/s (spec/model_flops.h)
  double mfu = 0.0;                    // gflops / sum of the plan's devices' fp32 peak
  std::vector<MigrationRecord> migrations;  // plan switches, in order
  int64_t migration_bytes = 0;         // sum of their network bytes
  double migration_time_s = 0.0;       // sum of their time_s (on `clock`)
  std::string final_plan;              // name of the plan of the last step
};

// Every device of the cluster, ascending: the world `motley train` launches (one rank per device).
std::vector<int> ClusterWorld(const spec::ClusterSpec& cluster);

// The checks `motley train --plan` runs before starting any rank: spec::ValidatePlan, the one plan
// rule every command applies (spec/plan.h; every error names the pipeline, stage and field,
// prefixed with the plan's source), then spec::CheckRuntimeRunsKernels on the run file's train
// section (a run, not a plan, asking for kernels the runtime does not run: bf16, fused attention,
// sequence parallelism, attention dropout; `predict` and `simulate` model them).
// optimizer_sharding 'zero1' shards the AdamW moments of every uniform data-parallel layer group
// (parallel/grad_sync.h); checkpoints gather them whole first. Each stage's recompute (none,
// selective, full) runs in model::Stage.
Status CheckPlanForRun(const spec::RunFile& run, const spec::Plan& plan);

// All ranks as threads of this process over a LocalWorld.
Result<ParallelTrainSummary> TrainParallel(const spec::RunFile& run, const spec::Plan& plan,
                                           const ParallelTrainerOptions& options = {});

// Connects this process's world communicator, charging transfers to `emulation` (disabled on a
// non-emulated cluster). Called once, before any training; e.g. comm::MpiWorld::Connect.
using ConnectWorld =
    std::function<Result<std::unique_ptr<comm::Communicator>>(const comm::Emulation& emulation)>;

// One rank per process: runs the rank the connected communicator names (its size must equal the
// world's: Options::world_devices, or the plan's devices when that is empty). Rank 0 prints and
// writes the metrics and trace (its own rank's actions); the summary's losses are filled on every
// rank. On a rank's failure it aborts the world.
Result<ParallelTrainSummary> TrainParallelProcess(const spec::RunFile& run, const spec::Plan& plan,
                                                  const ParallelTrainerOptions& options,
                                                  const ConnectWorld& connect);

// Summary block printed at the end (several lines, newline-terminated).
std::string FormatParallelSummary(const ParallelTrainSummary& summary);

// A side-by-side table of runs of the same job under several plans (labels[i] names summaries[i])
// with step time and tokens/s on each run's clock, and each run's speed-up over the last one.
std::string FormatPlanComparison(const std::vector<std::string>& labels,
                                 const std::vector<ParallelTrainSummary>& summaries);

}  // namespace motley::train
