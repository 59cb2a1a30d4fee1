// See parallel_trainer.h.
#include "train/parallel_trainer.h"

#include <algorithm>
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
#include "train/batch_sampler.h"
#include "train/dataset.h"
#include "train/flops.h"
#include "train/loss_spike.h"
#include "train/trainer_checkpoint.h"

namespace motley::train {
namespace {

using Clock = std::chrono::steady_clock;
using parallel::RankInfo;
using parallel::StageTimes;
using parallel::TraceEvent;
using parallel::WorldLayout;

// Per-rank values gathered every step: the StageTimes fields, the skipped flag, the rank clock
// at the step's start and end, and whether the rank saw a stop request (SIGTERM).
constexpr int64_t kGatherFields = 11;
constexpr int kSkippedField = 7;
constexpr int kStartField = 8;
constexpr int kEndField = 9;
constexpr int kStopField = 10;

void PackTimes(const StageTimes& t, bool skipped, double start_s, double end_s, bool stop,
               double* out) {
  const double values[kGatherFields] = {t.forward_s,  t.backward_s, t.p2p_s,
                                        t.tp_comm_s,  t.dp_sync_s,  t.optimizer_s,
                                        t.step_s,     skipped ? 1.0 : 0.0, start_s,
                                        end_s,        stop ? 1.0 : 0.0};
  std::copy(values, values + kGatherFields, out);
}

constexpr const char* kTimeNames[] = {"forward_s",  "backward_s",  "p2p_s", "tp_comm_s",
                                      "dp_sync_s", "optimizer_s", "step_s"};
constexpr int kNumTimes = 7;

// What every rank shares (read-only during the run, except the guarded error and the outputs of
// the summary rank).
struct RunContext {
  const spec::RunFile* run = nullptr;
  const ParallelTrainerOptions* options = nullptr;
  const WorldLayout* layout = nullptr;
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
  bool save_checkpoints = false;  // threads launch with train.checkpoint.dir set
  bool stop_enabled = false;      // a StopSignalGuard is installed
  std::vector<parallel::ParallelRank*> ranks;  // by rank, set before the set-up barrier (threads)
  std::unique_ptr<backend::CpuBackend> reader;  // reads other TP ranks' shards (host memcpy)
  std::string ckpt_tmp;                         // the folder being written (rank 0 sets)
  std::vector<StageFiles> ckpt_stages;          // guarded by mu
  Status ckpt_status;                           // guarded by mu

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

// The metrics line of one step (docs/formats/parallel-metrics.md).
std::string MetricsLine(const RunContext& ctx, int64_t step, const parallel::RankStepResult& r,
                        bool loss_spike, const std::vector<double>& all, double step_time_s, double wall_s,
                        double virtual_s) {
  const WorldLayout& layout = *ctx.layout;
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
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const RankInfo& info : layout.ranks()) {
    const double* v = all.data() + static_cast<size_t>(info.rank) * kGatherFields;
    nlohmann::ordered_json e;
    e["rank"] = info.rank;
    e["device"] = info.device;
    e["pipeline"] = info.pipeline;
    e["stage"] = info.stage;
    e["tp_rank"] = info.tp_rank;
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
  return j.dump();
}

// The backend of rank r: an EmulatedBackend on `clock` for an emulated device type, else a CPU
// backend with one thread.
Result<std::unique_ptr<tensor::Backend>> MakeBackend(const RunContext& ctx, int r,
                                                     VirtualClock* clock) {
  const int device = ctx.layout->rank(r).device;
  if (!ctx.emulated) return std::unique_ptr<tensor::Backend>(new backend::CpuBackend(1, r));
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<backend::EmulatedBackend> be,
      backend::EmulatedBackend::Create(ctx.run->cluster.device_type_of(device), clock, r, 1));
  return std::unique_ptr<tensor::Backend>(std::move(be));
}

// Ok, or the out-of-memory error of an emulated device (names the device and the bytes).
Status MemoryStatus(const tensor::Backend& backend, int device) {
  const auto* emulated = dynamic_cast<const backend::EmulatedBackend*>(&backend);
  if (emulated == nullptr) return Status::Ok();
  return emulated->memory_status().WithContext(fmt::format("device {}", device));
}

Status ReportStep(RunContext& ctx, int r, int64_t step, Clock::time_point start,
                  const parallel::RankStepResult& result, const tensor::Tensor& all);
Status SaveParallelCheckpoint(RunContext& ctx, int r, comm::Communicator& world,
                              parallel::ParallelRank& rank, tensor::Backend& backend,
                              int64_t step);

// Trains rank r of the plan over `world`; `clock` is the rank's emulated clock (nullptr when the
// cluster is not emulated), already charged by `world`.
Status RunRank(RunContext& ctx, int r, comm::Communicator& world, VirtualClock* clock) {
  const spec::TrainSpec& train = ctx.run->train;
  const ParallelTrainerOptions& options = *ctx.options;
  const WorldLayout& layout = *ctx.layout;
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<tensor::Backend> backend, MakeBackend(ctx, r, clock));
  auto* emulated = dynamic_cast<backend::EmulatedBackend*>(backend.get());
  parallel::ParallelRankOptions rank_options;
  rank_options.clock = clock != nullptr ? parallel::RankClock(clock) : parallel::RankClock(ctx.origin);
  if (r == options.poison_rank) rank_options.poison_gradient_step = options.poison_gradient_step;
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<parallel::ParallelRank> rank,
                          parallel::ParallelRank::Create(layout, r, ctx.run->model, train,
                                                         *backend, world, rank_options));
  const RankInfo& me = rank->info();
  MOTLEY_RETURN_IF_ERROR(MemoryStatus(*backend, me.device).WithContext("building the stage"));
  const parallel::RankClock& rank_clock = rank_options.clock;
  const std::vector<parallel::SampleSlice>& slices =
      layout.samples()[static_cast<size_t>(me.pipeline)];
  const int64_t begin = slices.front().begin;
  const int64_t count = slices.back().begin + slices.back().count - begin;
  const int64_t T = train.seq_len;
  std::vector<int32_t> inputs(static_cast<size_t>(count * T));
  std::vector<int32_t> targets(static_cast<size_t>(count * T));
  const auto num_train = static_cast<int64_t>(ctx.data->train.size());
  tensor::Tensor mine = tensor::HostTensor(tensor::Shape{kGatherFields}, tensor::DType::kF64);
  tensor::Tensor all =
      tensor::HostTensor(tensor::Shape{kGatherFields * layout.size()}, tensor::DType::kF64);
  const std::vector<int64_t> counts(static_cast<size_t>(layout.size()), kGatherFields);
  std::vector<TraceEvent>& trace = ctx.traces[static_cast<size_t>(r)];
  if (!ctx.resume_dir.empty()) {
    MOTLEY_RETURN_IF_ERROR(
        LoadIntoStage(ctx.resume_dir, *backend, rank->stage().params(), true).status());
  }
  if (!ctx.ranks.empty()) ctx.ranks[static_cast<size_t>(r)] = rank.get();

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

  for (int64_t step = ctx.first_step; step <= train.steps; ++step) {
    const Clock::time_point start = Clock::now();
    const Seconds start_s = rank_clock.Now();
    if (emulated != nullptr) emulated->BeginStep(step);
    const std::vector<int64_t> offsets =
        TrainBatchOffsets(train.seed, step - 1, layout.global_batch(), T, num_train);
    const std::span<const int64_t> mine_offsets(offsets.data() + begin,
                                                static_cast<size_t>(count));
    GatherSamples(ctx.data->train, mine_offsets, T, inputs, targets);
    const bool traced = Traced(options, step);
    MOTLEY_ASSIGN_OR_RETURN(parallel::RankStepResult result,
                            rank->Step(step, inputs, targets, traced ? &trace : nullptr));
    MOTLEY_RETURN_IF_ERROR(
        MemoryStatus(*backend, me.device).WithContext(fmt::format("step {}", step)));
    if (r == 0 && ctx.stop_enabled && step == options.sigterm_at_step) std::raise(SIGTERM);
    PackTimes(result.times, result.skipped, start_s, rank_clock.Now(),
              ctx.stop_enabled && StopRequested(), mine.data<double>());
    MOTLEY_RETURN_IF_ERROR(world.AllGather(all, mine, counts).WithContext("step metrics"));
    bool stopping = false;  // any rank saw the stop request: all stop at this step
    for (int q = 0; q < layout.size(); ++q) {
      const size_t field = static_cast<size_t>(q) * kGatherFields + kStopField;
      stopping = stopping || all.data<double>()[field] != 0.0;
    }
    if (r == ctx.summary_rank) {
      MOTLEY_RETURN_IF_ERROR(ReportStep(ctx, r, step, start, result, all));
    }
    if (ctx.save_checkpoints && CheckpointDue(train.checkpoint, step, train.steps, stopping)) {
      MOTLEY_RETURN_IF_ERROR(SaveParallelCheckpoint(ctx, r, world, *rank, *backend, step));
    }
    if (stopping) {
      if (r == ctx.summary_rank) ctx.summary.stopped = true;
      break;
    }
  }
  return Status::Ok();
}

// Rank `r` (the summary rank) records step `step` in the summary; rank 0 also writes the metrics
// line and the progress line. `all` holds every rank's gathered fields.
Status ReportStep(RunContext& ctx, int r, int64_t step, Clock::time_point start,
                  const parallel::RankStepResult& result, const tensor::Tensor& all) {
  const spec::TrainSpec& train = ctx.run->train;
  const ParallelTrainerOptions& options = *ctx.options;
  const WorldLayout& layout = *ctx.layout;
  const int64_t T = train.seq_len;
  const int64_t log_every =
      options.log_every > 0 ? options.log_every : std::max<int64_t>(1, train.steps / 20);
  {
    const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    const double* v = all.data<double>();
    double first_start = v[kStartField];
    double last_end = v[kEndField];
    for (int q = 1; q < layout.size(); ++q) {
      first_start = std::min(first_start, v[static_cast<size_t>(q) * kGatherFields + kStartField]);
      last_end = std::max(last_end, v[static_cast<size_t>(q) * kGatherFields + kEndField]);
    }
    const double virtual_s = last_end - first_start;
    const bool on_virtual = ctx.emulated && ctx.clock_mode == VirtualClock::Mode::kVirtual;
    const double step_time_s = on_virtual ? virtual_s : wall_s;
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
    if (r != 0) return Status::Ok();
    if (ctx.metrics != nullptr) {
      const std::vector<double> values(v, v + all.numel());
      const std::string line =
          MetricsLine(ctx, step, result, spike, values, step_time_s, wall_s, virtual_s) + "\n";
      if (std::fputs(line.c_str(), ctx.metrics) < 0 || std::fflush(ctx.metrics) != 0) {
        return Err("metrics file: write failed at step {}", step);
      }
    }
    if (options.out != nullptr &&
        (result.skipped || spike || step % log_every == 0 || step == train.steps)) {
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
      std::fflush(options.out);
    }
  }
  return Status::Ok();
}

// Saves the checkpoint of step `step` (threads launch; collective over `world`): rank 0 begins
// it, the TP rank 0 of each stage of pipeline 0 writes that stage's files (whole tensors gathered
// from its TP group's parameter sets, which their ranks leave untouched while they wait in the
// barrier), rank 0 commits. Every rank returns the same outcome.
Status SaveParallelCheckpoint(RunContext& ctx, int r, comm::Communicator& world,
                              parallel::ParallelRank& rank, tensor::Backend& backend,
                              int64_t step) {
  const spec::TrainSpec& train = ctx.run->train;
  const WorldLayout& layout = *ctx.layout;
  const RankInfo& me = rank.info();
  auto fail = [&ctx](const Status& s) {
    std::lock_guard<std::mutex> lock(ctx.mu);
    if (ctx.ckpt_status.ok()) ctx.ckpt_status = s;
  };
  if (r == 0) {
    ctx.ckpt_stages.clear();
    Result<std::string> tmp = BeginCheckpoint(train.checkpoint.dir, step);
    if (tmp.ok()) {
      ctx.ckpt_tmp = *tmp;
    } else {
      fail(tmp.status());
    }
  }
  MOTLEY_RETURN_IF_ERROR(world.Barrier().WithContext("checkpoint begin"));
  const int num_stages = static_cast<int>(layout.plan().pipelines.front().stages.size());
  if (me.pipeline == 0 && me.tp_rank == 0) {
    bool go = false;
    {
      std::lock_guard<std::mutex> lock(ctx.mu);
      go = ctx.ckpt_status.ok();
    }
    if (go) {
      std::vector<ShardSource> others;
      for (int q : layout.stage_ranks(0, me.stage)) {
        if (q == r) continue;
        others.push_back(ShardSource{ctx.reader.get(),
                                     &ctx.ranks[static_cast<size_t>(q)]->stage().params()});
      }
      Result<StageFiles> files =
          WriteStageFiles(ctx.ckpt_tmp, me.stage, num_stages,
                          StageToSave(&backend, &rank.stage().params(), std::move(others)),
                          /*save_optimizer=*/true);
      if (files.ok()) {
        std::lock_guard<std::mutex> lock(ctx.mu);
        ctx.ckpt_stages.push_back(std::move(*files));
      } else {
        fail(files.status().WithContext(fmt::format("stage {}", me.stage)));
      }
    }
  }
  MOTLEY_RETURN_IF_ERROR(world.Barrier().WithContext("checkpoint stage files"));
  if (r == 0 && ctx.ckpt_status.ok()) {
    std::sort(ctx.ckpt_stages.begin(), ctx.ckpt_stages.end(),
              [](const StageFiles& a, const StageFiles& b) { return a.stage < b.stage; });
    SaveOptions save;
    save.keep_last = std::max<int64_t>(1, train.checkpoint.keep_last);
    const CheckpointMetadata md = MakeCheckpointMetadata(
        ctx.run->model, train, step, layout.global_batch(),
        nlohmann::json::parse(spec::PlanToJson(layout.plan()), nullptr,
                              /*allow_exceptions=*/false));
    Result<std::string> dir =
        CommitCheckpoint(train.checkpoint.dir, ctx.ckpt_tmp, md, ctx.ckpt_stages, save);
    if (dir.ok()) {
      ctx.summary.last_checkpoint = *dir;
      if (ctx.options->out != nullptr) {
        fmt::print(ctx.options->out, "step {}: checkpoint {}\n", step, *dir);
        std::fflush(ctx.options->out);
      }
    } else {
      fail(dir.status());
    }
  }
  MOTLEY_RETURN_IF_ERROR(world.Barrier().WithContext("checkpoint commit"));
  std::lock_guard<std::mutex> lock(ctx.mu);
  return ctx.ckpt_status.WithContext(fmt::format("checkpoint of step {}", step));
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
  const std::string where = plan.source.empty() ? "plan" : plan.source;
  MOTLEY_RETURN_IF_ERROR(spec::ValidatePlan(plan, run.cluster, run.model, run.train));
  if (plan.optimizer_sharding != spec::OptimizerSharding::kNone) {
    return Err("{}: optimizer_sharding: '{}' is not supported by the runtime yet; use 'none'", where,
               spec::OptimizerShardingName(plan.optimizer_sharding));
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
    ctx.ranks.assign(static_cast<size_t>(p.layout->size()), nullptr);
    ctx.reader = std::make_unique<backend::CpuBackend>(1);
    stop_guard.emplace();
  }

  backend::SetBlasThreads(1);  // ranks are threads: each rank's BLAS runs in its own thread
  ctx.origin = Clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < p.layout->size(); ++r) {
    threads.emplace_back([&ctx, &world, r] {
      VirtualClock clock(ctx.clock_mode, ctx.origin);
      comm::Emulation emulation;
      if (ctx.emulated) emulation = comm::Emulation{ctx.links.get(), &clock};
      Result<std::unique_ptr<comm::Communicator>> comm =
          world->Connect(r, ctx.options->comm, emulation);
      Status s = comm.status();
      if (s.ok()) s = RunRank(ctx, r, **comm, ctx.emulated ? &clock : nullptr);
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
  if (!run.train.checkpoint.dir.empty()) {
    return Err("train.checkpoint.dir: saving checkpoints under a launcher (one rank per process) "
               "is not implemented yet; run the plan as threads, or unset it (resume works)");
  }
  MOTLEY_ASSIGN_OR_RETURN(Prepared p, Prepare(run, plan, options, /*open_metrics=*/false));
  RunContext& ctx = *p.ctx;
  ctx.origin = Clock::now();
  VirtualClock clock(ctx.clock_mode, ctx.origin);
  comm::Emulation emulation;
  if (ctx.emulated) emulation = comm::Emulation{ctx.links.get(), &clock};
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, connect(emulation));
  const int r = world->rank();
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
  if (s.ok()) s = RunRank(ctx, r, *world, ctx.emulated ? &clock : nullptr);
  if (!s.ok()) {
    const Status failed = s.WithContext(fmt::format("rank {}", r));
    world->Abort(fmt::format("rank {} failed: {}", r, s.message()));
    return failed;
  }
  return Finish(ctx);
}

}  // namespace motley::train
