// See parallel_trainer.h.
#include "train/parallel_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "comm/local_world.h"
#include "core/file_util.h"
#include "parallel/parallel_rank.h"
#include "parallel/world_layout.h"
#include "train/batch_sampler.h"
#include "train/dataset.h"
#include "train/flops.h"

namespace motley::train {
namespace {

using Clock = std::chrono::steady_clock;
using parallel::RankInfo;
using parallel::StageTimes;
using parallel::TraceEvent;
using parallel::WorldLayout;

// Per-rank values gathered every step: the StageTimes fields, then the skipped flag.
constexpr int64_t kGatherFields = 8;

void PackTimes(const StageTimes& t, bool skipped, double* out) {
  const double values[kGatherFields] = {t.forward_s,  t.backward_s,  t.p2p_s,  t.tp_comm_s,
                                        t.dp_sync_s, t.optimizer_s, t.step_s, skipped ? 1.0 : 0.0};
  std::copy(values, values + kGatherFields, out);
}

constexpr const char* kTimeNames[] = {"forward_s",  "backward_s",  "p2p_s", "tp_comm_s",
                                      "dp_sync_s", "optimizer_s", "step_s"};
constexpr int kNumTimes = 7;

// What every rank thread shares (read-only during the run, except the guarded error and rank 0's
// outputs).
struct RunContext {
  const spec::RunFile* run = nullptr;
  const ParallelTrainerOptions* options = nullptr;
  const WorldLayout* layout = nullptr;
  const TokenSplits* data = nullptr;
  std::shared_ptr<comm::LocalWorld> world;
  std::FILE* metrics = nullptr;  // rank 0 writes
  double flops_per_token = 0.0;
  double peak_flops = 0.0;       // sum of the plan's devices' fp32 peaks
  std::vector<std::vector<TraceEvent>> traces;  // per rank (each rank writes its own)
  ParallelTrainSummary summary;                 // rank 0 writes
  Clock::time_point origin;

  std::mutex mu;
  Status first_error;
  void Fail(int rank, const Status& s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (first_error.ok()) first_error = s.WithContext(fmt::format("rank {}", rank));
    }
    world->Abort(fmt::format("rank {} failed: {}", rank, s.message()));
  }
};

bool Traced(const ParallelTrainerOptions& o, int64_t step) {
  if (o.trace_path.empty()) return false;
  if (o.trace_steps.empty()) return step == 1;
  return std::find(o.trace_steps.begin(), o.trace_steps.end(), step) != o.trace_steps.end();
}

// The metrics line of one step (docs/formats/parallel-metrics.md).
std::string MetricsLine(const RunContext& ctx, int64_t step, const parallel::RankStepResult& r,
                        const std::vector<double>& all, double step_time_s) {
  const WorldLayout& layout = *ctx.layout;
  const int64_t tokens = layout.global_batch() * ctx.run->train.seq_len;
  nlohmann::ordered_json j;
  j["step"] = step;
  j["loss"] = r.loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  j["tokens"] = tokens;
  j["step_time_s"] = step_time_s;
  const double tps = static_cast<double>(tokens) / step_time_s;
  j["tokens_per_s"] = tps;
  j["gflops"] = ctx.flops_per_token * tps / 1e9;
  if (ctx.peak_flops > 0) j["mfu"] = ctx.flops_per_token * tps / ctx.peak_flops;
  j["skipped"] = r.skipped;
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

Status RunRank(RunContext& ctx, int r) {
  const spec::TrainSpec& train = ctx.run->train;
  const ParallelTrainerOptions& options = *ctx.options;
  const WorldLayout& layout = *ctx.layout;
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world,
                          ctx.world->Connect(r, options.comm));
  backend::CpuBackend backend(/*num_threads=*/1, /*index=*/r);
  parallel::ParallelRankOptions rank_options;
  if (r == options.poison_rank) rank_options.poison_gradient_step = options.poison_gradient_step;
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<parallel::ParallelRank> rank,
                          parallel::ParallelRank::Create(layout, r, ctx.run->model, train, backend,
                                                         *world, rank_options));
  const RankInfo& me = rank->info();
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
  const int64_t log_every =
      options.log_every > 0 ? options.log_every : std::max<int64_t>(1, train.steps / 20);

  for (int64_t step = 1; step <= train.steps; ++step) {
    const Clock::time_point start = Clock::now();
    const std::vector<int64_t> offsets =
        TrainBatchOffsets(train.seed, step - 1, layout.global_batch(), T, num_train);
    const std::span<const int64_t> mine_offsets(offsets.data() + begin,
                                                static_cast<size_t>(count));
    GatherSamples(ctx.data->train, mine_offsets, T, inputs, targets);
    const bool traced = Traced(options, step);
    MOTLEY_ASSIGN_OR_RETURN(parallel::RankStepResult result,
                            rank->Step(step, inputs, targets, traced ? &trace : nullptr,
                                       ctx.origin));
    PackTimes(result.times, result.skipped, mine.data<double>());
    MOTLEY_RETURN_IF_ERROR(world->AllGather(all, mine, counts).WithContext("step metrics"));
    if (r != 0) continue;

    const double step_time_s = std::chrono::duration<double>(Clock::now() - start).count();
    ParallelTrainSummary& s = ctx.summary;
    s.losses.push_back(result.loss);
    s.grad_norms.push_back(result.grad_norm);
    if (result.skipped) s.skipped_steps.push_back(step);
    const int64_t tokens = layout.global_batch() * T;
    s.tokens += tokens;
    s.train_time_s += step_time_s;
    if (ctx.metrics != nullptr) {
      const std::vector<double> values(all.data<double>(),
                                       all.data<double>() + all.numel());
      const std::string line = MetricsLine(ctx, step, result, values, step_time_s) + "\n";
      if (std::fputs(line.c_str(), ctx.metrics) < 0 || std::fflush(ctx.metrics) != 0) {
        return Err("metrics file: write failed at step {}", step);
      }
    }
    if (options.out != nullptr && (result.skipped || step % log_every == 0 || step == train.steps)) {
      const double tps = static_cast<double>(tokens) / step_time_s;
      std::string mfu;
      if (ctx.peak_flops > 0) {
        mfu = fmt::format(" | MFU {:.2f}%", 100.0 * ctx.flops_per_token * tps / ctx.peak_flops);
      }
      fmt::print(options.out, "step {}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.0f} tok/s{}{}\n",
                 step, train.steps, result.loss, result.lr, result.grad_norm, tps, mfu,
                 result.skipped ? " | SKIPPED: non-finite loss or gradient norm" : "");
      std::fflush(options.out);
    }
  }
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

}  // namespace

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
  MOTLEY_RETURN_IF_ERROR(CheckPlanForRun(run, plan));
  MOTLEY_ASSIGN_OR_RETURN(WorldLayout layout, WorldLayout::Build(plan));
  const spec::TrainSpec& train = run.train;
  MOTLEY_ASSIGN_OR_RETURN(TokenSplits data,
                          LoadTokenSplits(train.data, run.model.vocab_size, train.seq_len));

  RunContext ctx;
  ctx.run = &run;
  ctx.options = &options;
  ctx.layout = &layout;
  ctx.data = &data;
  ctx.world = comm::LocalWorld::Create(layout.size());
  ctx.flops_per_token = TrainFlopsPerToken(run.model, train.seq_len);
  for (const RankInfo& info : layout.ranks()) {
    ctx.peak_flops += run.cluster.device_type_of(info.device).PeakFlops(spec::Precision::kFp32);
  }
  ctx.traces.resize(static_cast<size_t>(layout.size()));
  const std::string metrics_path =
      !options.metrics_path.empty() ? options.metrics_path : train.metrics_path;
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> metrics;
  if (!metrics_path.empty()) {
    metrics.reset(std::fopen(metrics_path.c_str(), "w"));
    if (!metrics) return Err("{}: cannot create the metrics file", metrics_path);
    ctx.metrics = metrics.get();
  }
  if (options.out != nullptr) {
    fmt::print(options.out,
               "parallel run: {} ranks as threads, {} pipeline(s), global batch {} x {} tokens, "
               "{} steps, schedule {}{}\n",
               layout.size(), plan.pipelines.size(), layout.global_batch(), train.seq_len,
               train.steps, spec::PipelineScheduleName(plan.schedule),
               plan.recompute != spec::Recompute::kNone
                   ? " (recompute is not applied by this runtime; the math is unchanged)"
                   : "");
  }

  backend::SetBlasThreads(1);  // ranks are threads: each rank's BLAS runs in its own thread
  ctx.origin = Clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < layout.size(); ++r) {
    threads.emplace_back([&ctx, r] {
      const Status s = RunRank(ctx, r);
      if (!s.ok()) ctx.Fail(r, s);
    });
  }
  for (std::thread& t : threads) t.join();
  if (!ctx.first_error.ok()) return ctx.first_error;

  ParallelTrainSummary summary = std::move(ctx.summary);
  summary.steps = train.steps;
  summary.ranks = layout.size();
  if (summary.train_time_s > 0) {
    summary.tokens_per_s = static_cast<double>(summary.tokens) / summary.train_time_s;
    summary.gflops = ctx.flops_per_token * summary.tokens_per_s / 1e9;
    if (ctx.peak_flops > 0) summary.mfu = summary.gflops * 1e9 / ctx.peak_flops;
  }
  if (!options.trace_path.empty()) MOTLEY_RETURN_IF_ERROR(WriteTrace(ctx, options.trace_path));
  if (options.out != nullptr) {
    fmt::print(options.out, "{}", FormatParallelSummary(summary));
    std::fflush(options.out);
  }
  return summary;
}

std::string FormatParallelSummary(const ParallelTrainSummary& s) {
  std::string skipped = "none";
  if (!s.skipped_steps.empty()) {
    skipped = fmt::format("{} (step", s.skipped_steps.size());
    for (int64_t k : s.skipped_steps) skipped += fmt::format(" {}", k);
    skipped += ")";
  }
  return fmt::format(
      "done: {} steps on {} ranks, {} tokens in {:.2f} s\n"
      "loss: first step {:.4f}, final {:.4f}; skipped steps: {}\n"
      "throughput: {:.0f} tokens/s, {:.2f} GFLOP/s achieved, MFU {:.2f}%\n",
      s.steps, s.ranks, s.tokens, s.train_time_s, s.losses.empty() ? 0.0 : s.losses.front(),
      s.losses.empty() ? 0.0 : s.losses.back(), skipped, s.tokens_per_s, s.gflops, 100.0 * s.mfu);
}

}  // namespace motley::train
