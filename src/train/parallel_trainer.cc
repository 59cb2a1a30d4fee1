// See parallel_trainer.h.
#include "train/parallel_trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "backend/emulated/emulated_backend.h"
#include "comm/local_world.h"
#include "core/clock.h"
#include "core/file_util.h"
#include "parallel/parallel_rank.h"
#include "parallel/world_layout.h"
#include "spec/op_costs.h"
#include "train/batch_sampler.h"
#include "train/dataset.h"
#include "train/flops.h"
#include "train/loss_spike.h"
#include "train/parallel_checkpoint.h"
#include "train/plan_switch.h"
#include "train/trainer_checkpoint.h"
#include "train/staged_communicator.h"
#if MOTLEY_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace motley::train {
namespace {

using Clock = std::chrono::steady_clock;
using parallel::RankInfo;
using parallel::StageTimes;
using parallel::TraceEvent;
using parallel::WorldLayout;

// Per-rank values gathered every step: the StageTimes fields, the skipped flag, the rank clock
// at the step's start and end, whether the rank saw a stop request (SIGTERM), and an idle rank's
// probe (measured and expected seconds; 0 when it ran none).
constexpr int64_t kGatherFields = 13;
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

void PackTimes(const StageTimes& t, bool skipped, double start_s, double end_s, bool stop,
               const Probe& probe, double* out) {
  const double values[kGatherFields] = {t.forward_s,  t.backward_s, t.p2p_s,
                                        t.tp_comm_s,  t.dp_sync_s,  t.optimizer_s,
                                        t.step_s,     skipped ? 1.0 : 0.0, start_s,
                                        end_s,        stop ? 1.0 : 0.0, probe.measured_s,
                                        probe.expected_s};
  std::copy(values, values + kGatherFields, out);
}

// The probe op of a rank the plan leaves out (DESIGN.md §9: a dropped device is measured so that
// its recovery is seen): one (16 x 128) @ (128 x 128)^T matmul on its emulated backend, timed on
// its clock, against the time the device type's emulated profile gives it at nominal speed.
class ProbeOp {
 public:
  Probe Run(backend::EmulatedBackend& backend, const parallel::RankClock& clock) {
    constexpr int64_t kN = 16, kC = 128;
    if (!out_.defined()) {
      out_ = backend.Zeros(tensor::Shape{kN, kC}, tensor::DType::kF32);
      inp_ = backend.Zeros(tensor::Shape{kN, kC}, tensor::DType::kF32);
      weight_ = backend.Zeros(tensor::Shape{kC, kC}, tensor::DType::kF32);
    }
    const Seconds start = clock.Now();
    backend.MatmulForward(out_, inp_, weight_);
    Probe p;
    p.measured_s = clock.Since(start);
    const spec::costs::OpCost cost = spec::costs::MatmulForward(kN, kC, kC);
    const spec::EmulatedProfile& nominal = *backend.device_type().emulated;
    p.expected_s =
        std::max(cost.flops / nominal.flops_per_s, cost.bytes / nominal.memory_bandwidth);
    return p;
  }

 private:
  tensor::Tensor out_, inp_, weight_;
};

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
  std::FILE* metrics = nullptr;  // rank 0 writes
  double flops_per_token = 0.0;
  double peak_flops = 0.0;       // sum of the plan's devices' fp32 peaks
  bool emulated = false;         // the plan's devices are of emulated types
  VirtualClock::Mode clock_mode = VirtualClock::Mode::kVirtual;  // when emulated
  std::unique_ptr<comm::LinkMatrix> links;                       // when emulated, by world rank
  std::vector<std::vector<TraceEvent>> traces;  // per rank (each rank writes its own)
  int summary_rank = 0;                         // the rank that fills `summary`
  ParallelTrainSummary summary;
  LossSpikeDetector loss_spikes;  // the summary rank's
  Clock::time_point origin;

  // Checkpoints. first_step: 1, or the resumed checkpoint's step + 1 (resume_dir).
  int64_t first_step = 1;
  std::string resume_dir;
  bool save_checkpoints = false;  // train.checkpoint.dir is set (parallel_checkpoint.h)
  bool stop_enabled = false;      // a StopSignalGuard is installed

  std::mutex mu;
  Status first_error;
  void Record(int rank, const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.ok()) first_error = s.WithContext(fmt::format("rank {}", rank));
  }
};

const char* ClockName(const RunContext& ctx) {
  if (!ctx.emulated) return "host";
  return ctx.clock_mode == VirtualClock::Mode::kVirtual ? "virtual" : "wall";
}

bool Traced(const ParallelTrainerOptions& o, int64_t step) {
  if (o.trace_path.empty()) return false;
  if (o.trace_steps.empty()) return step == 1;
  return std::find(o.trace_steps.begin(), o.trace_steps.end(), step) != o.trace_steps.end();
}

nlohmann::ordered_json MigrationJson(const MigrationRecord& m) {
  nlohmann::ordered_json j;
  j["from"] = m.from;
  j["to"] = m.to;
  j["bytes"] = m.bytes;
  j["local_bytes"] = m.local_bytes;
  j["time_s"] = m.time_s;
  j["transfer_s"] = m.transfer_s;
  j["sent_bytes"] = m.sent_bytes;
  j["received_bytes"] = m.received_bytes;
  if (!m.after.empty()) {
    j["checksum_before"] = fmt::format("{:016x}", m.before.front().hash);
    j["checksum_after"] = fmt::format("{:016x}", m.after.front().hash);
  }
  return j;
}

// The metrics line of one step (docs/formats/parallel-metrics.md) run under `layout`, with the
// record of the plan switch that followed it (nullptr: none).
std::string MetricsLine(const RunContext& ctx, const WorldLayout& layout, int64_t step,
                        const parallel::RankStepResult& r, bool loss_spike,
                        const std::vector<double>& all, double step_time_s, double wall_s,
                        double virtual_s, const MigrationRecord* migration) {
  const int64_t tokens = layout.global_batch() * ctx.run->train.seq_len;
  nlohmann::ordered_json j;
  j["step"] = step;
  j["loss"] = r.loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  j["tokens"] = tokens;
  j["clock"] = ClockName(ctx);
  j["step_time_s"] = step_time_s;
  j["wall_step_time_s"] = wall_s;
  if (ctx.emulated) j["virtual_step_time_s"] = virtual_s;
  const double tps = static_cast<double>(tokens) / step_time_s;
  j["tokens_per_s"] = tps;
  j["gflops"] = ctx.flops_per_token * tps / 1e9;
  if (ctx.peak_flops > 0) j["mfu"] = ctx.flops_per_token * tps / ctx.peak_flops;
  j["skipped"] = r.skipped;
  j["loss_spike"] = loss_spike;
  j["plan"] = PlanName(layout.plan());
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const RankInfo& info : layout.ranks()) {
    const double* v = all.data() + static_cast<size_t>(info.rank) * kGatherFields;
    nlohmann::ordered_json e;
    e["rank"] = info.rank;
    e["device"] = info.device;
    if (info.idle()) {
      e["idle"] = true;
    } else {
      e["pipeline"] = info.pipeline;
      e["stage"] = info.stage;
      e["tp_rank"] = info.tp_rank;
    }
    for (int f = 0; f < kNumTimes; ++f) e[kTimeNames[f]] = v[f];
    ranks.push_back(std::move(e));
  }
  j["ranks"] = std::move(ranks);
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  const auto& pipes = layout.plan().pipelines;
  for (size_t p = 0; p < pipes.size(); ++p) {
    for (size_t s = 0; s < pipes[p].stages.size(); ++s) {
      const spec::StagePlan& sp = pipes[p].stages[s];
      nlohmann::ordered_json e;
      e["pipeline"] = p;
      e["stage"] = s;
      e["first_block"] = sp.first_block;
      e["num_blocks"] = sp.num_blocks;
      e["tp_degree"] = sp.tp_degree;
      e["micro_batches"] = pipes[p].micro_batches;
      e["micro_batch_size"] = pipes[p].micro_batch_size;
      for (int f = 0; f < kNumTimes; ++f) {
        double worst = 0.0;  // the slowest TP rank of the stage
        for (int q : layout.stage_ranks(static_cast<int>(p), static_cast<int>(s))) {
          worst = std::max(worst, all[static_cast<size_t>(q) * kGatherFields + f]);
        }
        e[kTimeNames[f]] = worst;
      }
      stages.push_back(std::move(e));
    }
  }
  j["stages"] = std::move(stages);
  if (migration != nullptr) j["migration"] = MigrationJson(*migration);
  if (ctx.options->annotate_metrics) ctx.options->annotate_metrics(step, j);
  return j.dump();
}

// A CudaBackend for plan device `device` (a device type of vendor `cuda`): the CUDA device is the
// device's index inside its node; ParallelTrainerOptions::cuda_bf16 selects bf16 matmuls.
Result<std::unique_ptr<tensor::Backend>> MakeCudaBackend(const RunContext& ctx, int device) {
  const spec::DeviceType& type = ctx.run->cluster.device_type_of(device);
#if MOTLEY_HAVE_CUDA
  backend::CudaBackendOptions o;
  o.device = ctx.run->cluster.device(device).local_index;
  o.precision = ctx.options->cuda_bf16 ? backend::CudaPrecision::kBf16
                                       : backend::CudaPrecision::kFp32;
  auto be = backend::CudaBackend::Create(o);
  if (!be.ok()) {
    return be.status().WithContext(fmt::format("device {} (type '{}')", device, type.name));
  }
  return std::unique_ptr<tensor::Backend>(std::move(*be));
#else
  return Err("device {}: type '{}' has vendor cuda, but motley was built without CUDA", device,
             type.name);
#endif
}

// The backend of rank r: a CudaBackend for a device type of vendor `cuda` (not emulated), an
// EmulatedBackend on `clock` for an emulated device type, else a CPU backend with one thread.
Result<std::unique_ptr<tensor::Backend>> MakeBackend(const RunContext& ctx, int r,
                                                     VirtualClock* clock) {
  const int device = ctx.layout->rank(r).device;
  if (!ctx.emulated && ctx.run->cluster.device_type_of(device).vendor == "cuda") {
    return MakeCudaBackend(ctx, device);
  }
  if (!ctx.emulated) return std::unique_ptr<tensor::Backend>(new backend::CpuBackend(1, r));
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<backend::EmulatedBackend> be,
      backend::EmulatedBackend::Create(ctx.run->cluster.device_type_of(device), clock, r, 1));
  const auto& rates = ctx.options->device_rates;
  if (static_cast<size_t>(device) < rates.size() && !rates[static_cast<size_t>(device)].empty()) {
    std::vector<backend::RateChange> schedule;
    for (const auto& [step, rate] : rates[static_cast<size_t>(device)]) {
      schedule.push_back(backend::RateChange{step, rate});
    }
    be->SetRateSchedule(std::move(schedule));
  }
  return std::unique_ptr<tensor::Backend>(std::move(be));
}

// Ok, or the out-of-memory error of an emulated device (names the device and the bytes).
Status MemoryStatus(const tensor::Backend& backend, int device) {
  const auto* emulated = dynamic_cast<const backend::EmulatedBackend*>(&backend);
  if (emulated == nullptr) return Status::Ok();
  return emulated->memory_status().WithContext(fmt::format("device {}", device));
}

Status ReportStep(RunContext& ctx, int r, const WorldLayout& layout, int64_t step, double wall_s,
                  const parallel::RankStepResult& result, const tensor::Tensor& all,
                  const MigrationRecord* migration);

// The step time on the run's clock (see parallel_trainer.h) from every rank's gathered fields;
// wall_s is this rank's wall time of the step. Sets *virtual_s to the makespan over the ranks.
double StepTime(const RunContext& ctx, const tensor::Tensor& all, double wall_s,
                double* virtual_s) {
  const double* v = all.data<double>();
  const int64_t n = all.numel() / kGatherFields;
  double first_start = v[kStartField];
  double last_end = v[kEndField];
  for (int64_t q = 1; q < n; ++q) {
    first_start = std::min(first_start, v[q * kGatherFields + kStartField]);
    last_end = std::max(last_end, v[q * kGatherFields + kEndField]);
  }
  *virtual_s = last_end - first_start;
  const bool on_virtual = ctx.emulated && ctx.clock_mode == VirtualClock::Mode::kVirtual;
  return on_virtual ? *virtual_s : wall_s;
}

// Rank 0's decision after `step` (std::nullopt: keep the plan), checked against the run and the
// world: Options::plan_switch first, then Options::plan_switches.
Result<std::optional<spec::Plan>> DecidePlanSwitch(const RunContext& ctx,
                                                   const WorldLayout& layout, int64_t step,
                                                   const parallel::RankStepResult& result,
                                                   const tensor::Tensor& all, double wall_s) {
  const ParallelTrainerOptions& options = *ctx.options;
  std::optional<spec::Plan> next;
  if (options.plan_switch) {
    StepReport report;
    report.step = step;
    report.loss = result.loss;
    report.grad_norm = result.grad_norm;
    report.skipped = result.skipped;
    double virtual_s = 0.0;
    report.step_time_s = StepTime(ctx, all, wall_s, &virtual_s);
    report.clock = ClockName(ctx);
    report.plan = &layout.plan();
    for (const RankInfo& info : layout.ranks()) {
      const double* v = all.data<double>() + static_cast<size_t>(info.rank) * kGatherFields;
      StepReport::Rank e;
      e.rank = info.rank;
      e.device = info.device;
      e.idle = info.idle();
      e.times = StageTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
      e.probe_s = v[kProbeField];
      e.probe_expected_s = v[kProbeExpectedField];
      report.ranks.push_back(e);
    }
    next = options.plan_switch(step, report);
  }
  if (!next.has_value()) {
    for (const PlanSwitch& ps : options.plan_switches) {
      if (ps.step == step) {
        next = ps.plan;
        break;
      }
    }
  }
  if (!next.has_value()) return next;
  const std::string where = fmt::format("plan switch after step {}", step);
  MOTLEY_RETURN_IF_ERROR(CheckPlanForRun(*ctx.run, *next).WithContext(where));
  MOTLEY_RETURN_IF_ERROR(WorldLayout::Build(*next, layout.devices()).status().WithContext(where));
  return next;
}

// This rank's samples of the global batch under its current plan: [begin, begin + count).
struct SampleRange {
  int64_t begin = 0;
  int64_t count = 0;  // 0 on an idle rank
};
SampleRange SamplesOf(const WorldLayout& layout, int r) {
  const RankInfo& me = layout.rank(r);
  if (me.idle()) return {};
  const std::vector<parallel::SampleSlice>& slices =
      layout.samples()[static_cast<size_t>(me.pipeline)];
  const int64_t begin = slices.front().begin;
  return {begin, slices.back().begin + slices.back().count - begin};
}

// Trains rank r of the plan over `world`; `clock` is the rank's emulated clock (nullptr when the
// cluster is not emulated), already charged by `world`. The rank's plan may change at a step
// boundary (see the top of parallel_trainer.h).
Status RunRank(RunContext& ctx, int r, comm::Communicator& host_world, VirtualClock* clock,
               std::atomic<int64_t>* step_counter) {
  const spec::TrainSpec& train = ctx.run->train;
  const ParallelTrainerOptions& options = *ctx.options;
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<tensor::Backend> backend, MakeBackend(ctx, r, clock));
  // A rank on device memory (cuda) talks to the others through host copies (staged_communicator.h).
  std::unique_ptr<comm::Communicator> staged;
  if (!backend->device().host_addressable()) {
    staged = std::make_unique<StagedCommunicator>(host_world, *backend);
  }
  comm::Communicator& world = staged != nullptr ? *staged : host_world;
  auto* emulated = dynamic_cast<backend::EmulatedBackend*>(backend.get());
  parallel::ParallelRankOptions rank_options;
  rank_options.clock = clock != nullptr ? parallel::RankClock(clock) : parallel::RankClock(ctx.origin);
  if (r == options.poison_rank) rank_options.poison_gradient_step = options.poison_gradient_step;
  RankUnderPlan state;  // this rank's current plan (the first plan's layout to begin with)
  state.layout = std::make_unique<WorldLayout>(*ctx.layout);
  MOTLEY_ASSIGN_OR_RETURN(state.rank,
                          parallel::ParallelRank::Create(*state.layout, r, ctx.run->model, train,
                                                         *backend, world, rank_options));
  const int device = state.rank->info().device;
  MOTLEY_RETURN_IF_ERROR(MemoryStatus(*backend, device).WithContext("building the stage"));
  const parallel::RankClock& rank_clock = rank_options.clock;
  const int64_t T = train.seq_len;
  SampleRange samples = SamplesOf(*state.layout, r);
  std::vector<int32_t> inputs(static_cast<size_t>(samples.count * T));
  std::vector<int32_t> targets(static_cast<size_t>(samples.count * T));
  const auto num_train = static_cast<int64_t>(ctx.data->train.size());
  const int world_size = state.layout->size();
  tensor::Tensor mine = tensor::HostTensor(tensor::Shape{kGatherFields}, tensor::DType::kF64);
  tensor::Tensor all =
      tensor::HostTensor(tensor::Shape{kGatherFields * world_size}, tensor::DType::kF64);
  const std::vector<int64_t> counts(static_cast<size_t>(world_size), kGatherFields);
  std::vector<TraceEvent>& trace = ctx.traces[static_cast<size_t>(r)];
  if (!ctx.resume_dir.empty()) {
    MOTLEY_RETURN_IF_ERROR(
        LoadIntoStage(ctx.resume_dir, *backend, state.rank->stage().params(), true).status());
  }
  SwitchOptions switch_options;
  switch_options.rank_options = rank_options;
  switch_options.check = options.check_migrations;
  switch_options.on_virtual = ctx.emulated && ctx.clock_mode == VirtualClock::Mode::kVirtual;

  // Every rank finished its set-up; on the wall clock, pace from here (the set-up's real time is
  // not emulated time): re-base the origin so that the clock's now() is "now".
  MOTLEY_RETURN_IF_ERROR(world.Barrier().WithContext("after set-up"));
  if (clock != nullptr && clock->mode() == VirtualClock::Mode::kWall) {
    const Seconds t = clock->now();
    *clock = VirtualClock(VirtualClock::Mode::kWall,
                          Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(t)));
    clock->Advance(t);
  }

  ProbeOp probe_op;  // used while this rank is idle
  for (int64_t step = ctx.first_step; step <= train.steps; ++step) {
    const Clock::time_point start = Clock::now();
    const Seconds start_s = rank_clock.Now();
    if (emulated != nullptr) emulated->BeginStep(step);
    if (step_counter != nullptr) step_counter->store(step);  // link rate schedules (Emulation)
    if (samples.count > 0) {
      const std::vector<int64_t> offsets =
          TrainBatchOffsets(train.seed, step - 1, state.layout->global_batch(), T, num_train);
      const std::span<const int64_t> mine_offsets(offsets.data() + samples.begin,
                                                  static_cast<size_t>(samples.count));
      GatherSamples(ctx.data->train, mine_offsets, T, inputs, targets);
    }
    const bool traced = Traced(options, step);
    MOTLEY_ASSIGN_OR_RETURN(parallel::RankStepResult result,
                            state.rank->Step(step, inputs, targets, traced ? &trace : nullptr));
    MOTLEY_RETURN_IF_ERROR(
        MemoryStatus(*backend, device).WithContext(fmt::format("step {}", step)));
    if (r == options.sigterm_rank && ctx.stop_enabled && step == options.sigterm_at_step) {
      std::raise(SIGTERM);
    }
    const Seconds end_s = rank_clock.Now();
    Probe probe;  // after the step's end: the probe is not part of the step
    if (emulated != nullptr && state.rank->idle()) probe = probe_op.Run(*emulated, rank_clock);
    PackTimes(result.times, result.skipped, start_s, end_s, ctx.stop_enabled && StopRequested(),
              probe, mine.data<double>());
    MOTLEY_RETURN_IF_ERROR(world.AllGather(all, mine, counts).WithContext("step metrics"));
    const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    bool stopping = false;  // any rank saw the stop request: all stop at this step
    for (int q = 0; q < world_size; ++q) {
      const size_t field = static_cast<size_t>(q) * kGatherFields + kStopField;
      stopping = stopping || all.data<double>()[field] != 0.0;
    }

    // A plan switch at this step boundary (never after the last step or a stop request).
    std::optional<SwitchOutcome> switched;
    if (!stopping && step < train.steps) {
      std::optional<spec::Plan> decision;
      if (r == 0) {
        MOTLEY_ASSIGN_OR_RETURN(decision,
                                DecidePlanSwitch(ctx, *state.layout, step, result, all, wall_s));
      }
      MOTLEY_ASSIGN_OR_RETURN(std::optional<spec::Plan> next, AgreeOnPlan(world, decision));
      if (next.has_value()) {
        MOTLEY_ASSIGN_OR_RETURN(
            SwitchOutcome outcome,
            SwitchPlan(*ctx.run, r, world, *backend, switch_options, step, state, *next));
        switched = std::move(outcome);
        MOTLEY_RETURN_IF_ERROR(MemoryStatus(*backend, device)
                                   .WithContext(fmt::format("plan switch after step {}", step)));
        samples = SamplesOf(*state.layout, r);
        inputs.assign(static_cast<size_t>(samples.count * T), 0);
        targets.assign(static_cast<size_t>(samples.count * T), 0);
      }
    }
    if (r == ctx.summary_rank) {
      MOTLEY_RETURN_IF_ERROR(ReportStep(ctx, r, switched ? *switched->old : *state.layout, step,
                                        wall_s, result, all,
                                        switched ? &switched->record : nullptr));
    }
    if (ctx.save_checkpoints && CheckpointDue(train.checkpoint, step, train.steps, stopping)) {
      MOTLEY_ASSIGN_OR_RETURN(std::string dir,
                              SaveParallelCheckpoint(world, *state.layout, *state.rank, *backend,
                                                     ctx.run->model, train, step));
      if (r == ctx.summary_rank) ctx.summary.last_checkpoint = dir;
      if (r == 0 && options.out != nullptr) {
        fmt::print(options.out, "step {}: checkpoint {}\n", step, dir);
        std::fflush(options.out);
      }
    }
    if (stopping) {
      if (r == ctx.summary_rank) ctx.summary.stopped = true;
      break;
    }
  }
  return Status::Ok();
}

// Rank `r` (the summary rank) records step `step`, run under `layout`, in the summary; rank 0
// also writes the metrics line and the progress line. `all` holds every rank's gathered fields;
// `migration` (may be nullptr) is the plan switch that followed the step.
Status ReportStep(RunContext& ctx, int r, const WorldLayout& layout, int64_t step, double wall_s,
                  const parallel::RankStepResult& result, const tensor::Tensor& all,
                  const MigrationRecord* migration) {
  const spec::TrainSpec& train = ctx.run->train;
  const ParallelTrainerOptions& options = *ctx.options;
  const int64_t T = train.seq_len;
  const int64_t log_every =
      options.log_every > 0 ? options.log_every : std::max<int64_t>(1, train.steps / 20);
  double virtual_s = 0.0;
  const double step_time_s = StepTime(ctx, all, wall_s, &virtual_s);
  const bool on_virtual = ctx.emulated && ctx.clock_mode == VirtualClock::Mode::kVirtual;
  ParallelTrainSummary& s = ctx.summary;
  s.losses.push_back(result.loss);
  s.grad_norms.push_back(result.grad_norm);
  if (result.skipped) s.skipped_steps.push_back(step);
  const bool spike = !result.skipped && ctx.loss_spikes.Observe(result.loss);
  if (spike) s.loss_spike_steps.push_back(step);
  const int64_t tokens = layout.global_batch() * T;
  s.tokens += tokens;
  s.step_times_s.push_back(step_time_s);
  s.train_time_s += step_time_s;
  s.wall_time_s += wall_s;
  s.final_plan = PlanName(layout.plan());
  if (migration != nullptr) {
    s.migrations.push_back(*migration);
    s.migration_bytes += migration->bytes;
    s.migration_time_s += migration->time_s;
    s.train_time_s += migration->time_s;
    s.final_plan = migration->to;
  }
  if (r != 0) return Status::Ok();
  if (ctx.metrics != nullptr) {
    const double* v = all.data<double>();
    const std::vector<double> values(v, v + all.numel());
    const std::string line = MetricsLine(ctx, layout, step, result, spike, values, step_time_s,
                                         wall_s, virtual_s, migration) +
                             "\n";
    if (std::fputs(line.c_str(), ctx.metrics) < 0 || std::fflush(ctx.metrics) != 0) {
      return Err("metrics file: write failed at step {}", step);
    }
  }
  if (options.out == nullptr) return Status::Ok();
  if (result.skipped || spike || step % log_every == 0 || step == train.steps) {
    const double tps = static_cast<double>(tokens) / step_time_s;
    std::string mfu;
    if (ctx.peak_flops > 0) {
      mfu = fmt::format(" | MFU {:.2f}%", 100.0 * ctx.flops_per_token * tps / ctx.peak_flops);
    }
    fmt::print(options.out,
               "step {}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.0f} tok/s{}{}{}{}\n", step,
               train.steps, result.loss, result.lr, result.grad_norm, tps,
               on_virtual ? " (virtual)" : "", mfu,
               result.skipped ? " | SKIPPED: non-finite loss or gradient norm" : "",
               spike ? fmt::format(" | LOSS SPIKE (recent mean {:.4f})", ctx.loss_spikes.mean())
                     : std::string());
  }
  if (migration != nullptr) {
    fmt::print(options.out,
               "step {}: plan {} -> {}: migrated {:.3f} MB ({:.3f} MB kept in place) in {:.3f} ms"
               "{} (transfer {:.3f} ms)\n",
               step, migration->from, migration->to, static_cast<double>(migration->bytes) / 1e6,
               static_cast<double>(migration->local_bytes) / 1e6, migration->time_s * 1e3,
               on_virtual ? " of virtual time" : "", migration->transfer_s * 1e3);
  }
  std::fflush(options.out);
  return Status::Ok();
}

Status WriteTrace(const RunContext& ctx, const std::string& path) {
  nlohmann::json events = nlohmann::json::array();
  for (const RankInfo& info : ctx.layout->ranks()) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", info.rank},
                      {"args",
                       {{"name", fmt::format("rank {} (pipeline {} stage {} tp {})", info.rank,
                                             info.pipeline, info.stage, info.tp_rank)}}}});
    for (const TraceEvent& e : ctx.traces[static_cast<size_t>(info.rank)]) {
      events.push_back({{"name", e.name},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", info.rank},
                        {"ts", e.start_s * 1e6},
                        {"dur", e.dur_s * 1e6}});
    }
  }
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return WriteFileAtomic(path, doc.dump() + "\n");
}

// Everything TrainParallel and TrainParallelProcess share before any rank starts: the checks,
// the layout, the data, the emulation (clock mode and link matrix) and the metrics file.
struct Prepared {
  std::unique_ptr<WorldLayout> layout;
  std::unique_ptr<TokenSplits> data;
  std::unique_ptr<RunContext> ctx;
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> metrics;
};

// Emulation of the plan's devices: all of emulated types, or none.
Status SetUpEmulation(const spec::RunFile& run, const ParallelTrainerOptions& options,
                      RunContext& ctx) {
  const WorldLayout& layout = *ctx.layout;
  int emulated = 0;
  for (const RankInfo& info : layout.ranks()) {
    if (run.cluster.device_type_of(info.device).is_emulated()) ++emulated;
  }
  if (emulated != 0 && emulated != layout.size()) {
    for (const RankInfo& info : layout.ranks()) {
      const spec::DeviceType& type = run.cluster.device_type_of(info.device);
      if (!type.is_emulated()) {
        return Err("cluster '{}': device {} (type '{}') has no `emulated:` profile while other "
                   "devices of the plan do; a run is either all emulated or all real",
                   run.cluster.name, info.device, type.name);
      }
    }
  }
  ctx.emulated = emulated != 0;
  const bool injects = options.link_rates != nullptr ||
                       std::any_of(options.device_rates.begin(), options.device_rates.end(),
                                   [](const auto& s) { return !s.empty(); });
  if (!ctx.emulated && injects) {
    return Err("straggler injection: the cluster '{}' has no emulated device types; rates can only "
               "be injected into emulated devices and links",
               run.cluster.name);
  }
  if (!ctx.emulated) {
    if (options.clock != ClockChoice::kAuto) {
      return Err("--clock: the cluster '{}' has no emulated device types; its runs use the host "
                 "clock", run.cluster.name);
    }
    return Status::Ok();
  }
  ctx.clock_mode = options.clock == ClockChoice::kWall ? VirtualClock::Mode::kWall
                                                       : VirtualClock::Mode::kVirtual;
  ctx.links = std::make_unique<comm::LinkMatrix>(layout.size(), comm::LinkModel{});
  for (const RankInfo& a : layout.ranks()) {
    for (const RankInfo& b : layout.ranks()) {
      if (a.rank == b.rank) continue;
      const spec::LinkClass& link = run.cluster.LinkBetween(a.device, b.device);
      ctx.links->Set(a.rank, b.rank, comm::LinkModel{link.latency_s, link.EffectiveBandwidth()});
      if (options.link_rates != nullptr && a.rank < b.rank) {
        std::vector<comm::LinkRateChange> schedule;
        for (const auto& [step, rate] : options.link_rates(a.device, b.device)) {
          schedule.push_back(comm::LinkRateChange{step, rate});
        }
        if (!schedule.empty()) ctx.links->SetRateSchedule(a.rank, b.rank, std::move(schedule));
      }
    }
  }
  return ctx.links->Validate().WithContext(fmt::format("cluster '{}' links", run.cluster.name));
}

Result<Prepared> Prepare(const spec::RunFile& run, const spec::Plan& plan,
                         const ParallelTrainerOptions& options, bool open_metrics) {
  MOTLEY_RETURN_IF_ERROR(CheckPlanForRun(run, plan));
  Prepared p;
  MOTLEY_ASSIGN_OR_RETURN(WorldLayout layout, WorldLayout::Build(plan));
  p.layout = std::make_unique<WorldLayout>(std::move(layout));
  const spec::TrainSpec& train = run.train;
  MOTLEY_ASSIGN_OR_RETURN(TokenSplits data,
                          LoadTokenSplits(train.data, run.model.vocab_size, train.seq_len));
  p.data = std::make_unique<TokenSplits>(std::move(data));
  p.ctx = std::make_unique<RunContext>();
  RunContext& ctx = *p.ctx;
  ctx.run = &run;
  ctx.options = &options;
  ctx.layout = p.layout.get();
  ctx.data = p.data.get();
  ctx.flops_per_token = TrainFlopsPerToken(run.model, train.seq_len);
  for (const RankInfo& info : p.layout->ranks()) {
    ctx.peak_flops += run.cluster.device_type_of(info.device).PeakFlops(spec::Precision::kFp32);
  }
  MOTLEY_RETURN_IF_ERROR(SetUpEmulation(run, options, ctx));
  if (!options.resume.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(ResumePoint point, ResolveResume(options.resume, train));
    ctx.resume_dir = point.dir;
    ctx.first_step = point.metadata.step + 1;
  }
  ctx.traces.resize(static_cast<size_t>(p.layout->size()));
  const std::string metrics_path =
      !options.metrics_path.empty() ? options.metrics_path : train.metrics_path;
  if (open_metrics && !metrics_path.empty()) {
    p.metrics.reset(std::fopen(metrics_path.c_str(), "w"));
    if (!p.metrics) return Err("{}: cannot create the metrics file", metrics_path);
    ctx.metrics = p.metrics.get();
  }
  return p;
}

void PrintHeader(const RunContext& ctx, const spec::Plan& plan, const char* launch) {
  const ParallelTrainerOptions& options = *ctx.options;
  if (options.out == nullptr) return;
  const spec::TrainSpec& train = ctx.run->train;
  fmt::print(options.out,
             "parallel run: {} ranks {}, {} pipeline(s), global batch {} x {} tokens, {} steps, "
             "schedule {}, clock {}{}\n",
             ctx.layout->size(), launch, plan.pipelines.size(), ctx.layout->global_batch(),
             train.seq_len, train.steps, spec::PipelineScheduleName(plan.schedule), ClockName(ctx),
             plan.recompute != spec::Recompute::kNone
                 ? " (recompute is not applied by this runtime; the math is unchanged)"
                 : "");
  const unsigned cores = std::thread::hardware_concurrency();
  if (ctx.emulated && ctx.clock_mode == VirtualClock::Mode::kWall && cores > 0 &&
      static_cast<unsigned>(ctx.layout->size()) > cores) {
    fmt::print(options.out,
               "note: {} busy ranks on {} cores: wall-clock timings are distorted when the host "
               "cannot keep up with the emulated speeds\n",
               ctx.layout->size(), cores);
  }
}

Result<ParallelTrainSummary> Finish(RunContext& ctx) {
  ParallelTrainSummary summary = std::move(ctx.summary);
  const ParallelTrainerOptions& options = *ctx.options;
  summary.first_step = ctx.first_step;
  summary.steps = static_cast<int64_t>(summary.losses.size());
  summary.ranks = ctx.layout->size();
  summary.clock = ClockName(ctx);
  if (summary.final_plan.empty()) summary.final_plan = PlanName(ctx.layout->plan());
  if (summary.train_time_s > 0) {
    summary.tokens_per_s = static_cast<double>(summary.tokens) / summary.train_time_s;
    summary.gflops = ctx.flops_per_token * summary.tokens_per_s / 1e9;
    if (ctx.peak_flops > 0) summary.mfu = summary.gflops * 1e9 / ctx.peak_flops;
  }
  if (!options.trace_path.empty() && ctx.summary_rank == 0) {
    MOTLEY_RETURN_IF_ERROR(WriteTrace(ctx, options.trace_path));
  }
  if (options.out != nullptr && ctx.summary_rank == 0) {
    fmt::print(options.out, "{}", FormatParallelSummary(summary));
    std::fflush(options.out);
  }
  return summary;
}

}  // namespace

Result<ClockChoice> ParseClockChoice(const std::string& text) {
  if (text == "auto") return ClockChoice::kAuto;
  if (text == "virtual") return ClockChoice::kVirtual;
  if (text == "wall") return ClockChoice::kWall;
  return Err("--clock: '{}' is not one of auto, virtual, wall", text);
}

Status CheckPlanForRun(const spec::RunFile& run, const spec::Plan& plan) {
  MOTLEY_RETURN_IF_ERROR(spec::ValidatePlan(plan, run.cluster, run.model, run.train));
  if (plan.recompute != spec::Recompute::kNone) {
    return Err("{}: recompute: '{}' is not implemented by the runtime (it keeps every activation); "
               "use 'none', or plan with `motley plan` on a cluster with more memory",
               plan.source.empty() ? "plan" : plan.source, spec::RecomputeName(plan.recompute));
  }
  return Status::Ok();
}

Result<ParallelTrainSummary> TrainParallel(const spec::RunFile& run, const spec::Plan& plan,
                                           const ParallelTrainerOptions& options) {
  MOTLEY_ASSIGN_OR_RETURN(Prepared p, Prepare(run, plan, options, /*open_metrics=*/true));
  RunContext& ctx = *p.ctx;
  std::shared_ptr<comm::LocalWorld> world = comm::LocalWorld::Create(p.layout->size());
  PrintHeader(ctx, plan, "as threads");
  if (!ctx.resume_dir.empty() && options.out != nullptr) {
    fmt::print(options.out, "resumed from {}; continuing at step {}\n", ctx.resume_dir,
               ctx.first_step);
  }
  std::optional<StopSignalGuard> stop_guard;
  if (!run.train.checkpoint.dir.empty()) {
    ctx.save_checkpoints = true;
    ctx.stop_enabled = true;
    stop_guard.emplace();
  }

  backend::SetBlasThreads(1);  // ranks are threads: each rank's BLAS runs in its own thread
  ctx.origin = Clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < p.layout->size(); ++r) {
    threads.emplace_back([&ctx, &world, r] {
      VirtualClock clock(ctx.clock_mode, ctx.origin);
      std::atomic<int64_t> step{ctx.first_step};
      comm::Emulation emulation;
      if (ctx.emulated) emulation = comm::Emulation{ctx.links.get(), &clock, 1.0, &step};
      Result<std::unique_ptr<comm::Communicator>> comm =
          world->Connect(r, ctx.options->comm, emulation);
      Status s = comm.status();
      if (s.ok()) s = RunRank(ctx, r, **comm, ctx.emulated ? &clock : nullptr, &step);
      if (!s.ok()) {
        ctx.Record(r, s);
        world->Abort(fmt::format("rank {} failed: {}", r, s.message()));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (!ctx.first_error.ok()) return ctx.first_error;
  return Finish(ctx);
}

Result<ParallelTrainSummary> TrainParallelProcess(const spec::RunFile& run, const spec::Plan& plan,
                                                  const ParallelTrainerOptions& options,
                                                  const ConnectWorld& connect) {
  // Every process checks the plan and reads the data; only rank 0 writes the metrics file, so it
  // is opened once the rank is known.
  MOTLEY_ASSIGN_OR_RETURN(Prepared p, Prepare(run, plan, options, /*open_metrics=*/false));
  RunContext& ctx = *p.ctx;
  ctx.origin = Clock::now();
  VirtualClock clock(ctx.clock_mode, ctx.origin);
  std::atomic<int64_t> step{ctx.first_step};
  comm::Emulation emulation;
  if (ctx.emulated) emulation = comm::Emulation{ctx.links.get(), &clock, 1.0, &step};
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, connect(emulation));
  const int r = world->rank();
  // Checkpoints: saved by messages (parallel_checkpoint.h); a SIGTERM to any process stops every
  // rank at the same step (its flag travels with the step's metrics gather) after saving. The
  // handler is installed after the launcher's library started (it may install its own).
  std::optional<StopSignalGuard> stop_guard;
  if (!run.train.checkpoint.dir.empty()) {
    ctx.save_checkpoints = true;
    ctx.stop_enabled = true;
    stop_guard.emplace();
  }
  if (world->size() != p.layout->size()) {
    const Status s = Err("{}: the plan has {} ranks but the launcher started {} processes",
                         plan.source.empty() ? "plan" : plan.source, p.layout->size(),
                         world->size());
    world->Abort(s.message());
    return s;
  }
  ctx.summary_rank = r;
  ParallelTrainerOptions rank_options = options;
  if (r != 0) rank_options.out = nullptr;
  ctx.options = &rank_options;
  Status s;
  if (r == 0) {
    const std::string metrics_path =
        !options.metrics_path.empty() ? options.metrics_path : run.train.metrics_path;
    if (!metrics_path.empty()) {
      p.metrics.reset(std::fopen(metrics_path.c_str(), "w"));
      if (!p.metrics) s = Err("{}: cannot create the metrics file", metrics_path);
      ctx.metrics = p.metrics.get();
    }
    PrintHeader(ctx, plan, "as processes");
  }
  backend::SetBlasThreads(1);  // one rank, one backend thread (like every rank of the threads launch)
  if (s.ok()) s = RunRank(ctx, r, *world, ctx.emulated ? &clock : nullptr, &step);
  if (!s.ok()) {
    const Status failed = s.WithContext(fmt::format("rank {}", r));
    world->Abort(fmt::format("rank {} failed: {}", r, s.message()));
    return failed;
  }
  return Finish(ctx);
}

}  // namespace motley::train
