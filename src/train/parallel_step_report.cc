// The per-step reports of the parallel trainer (parallel_run_context.h): the summary rank's
// record of each step, rank 0's metrics line (docs/formats/parallel-metrics.md) and progress
// line, the Chrome trace, and the run's summary.
#include <algorithm>
#include <chrono>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "core/throughput.h"
#include "spec/model_flops.h"
#include "train/parallel_run_context.h"
#include "train/plan_switch.h"

namespace motley::train::internal {
namespace {

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
// record of the plan switch that followed it (nullptr: none); the writer adds the timestamp.
nlohmann::ordered_json MetricsLine(const RunContext& ctx, const WorldLayout& layout, int64_t step,
                                   const parallel::RankStepResult& r, bool loss_spike,
                                   const std::vector<double>& all, double step_time_s,
                                   double wall_s, double virtual_s, std::optional<double> val_loss,
                                   const MigrationRecord* migration) {
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
  const double tps = TokensPerSecond(tokens, step_time_s);
  j["tokens_per_s"] = tps;
  j["gflops"] = ctx.flops_per_token * tps / 1e9;
  if (ctx.peak_flops > 0) j["mfu"] = spec::Mfu(ctx.flops_per_token, tps, ctx.peak_flops);
  if (val_loss) j["val_loss"] = *val_loss;
  j["skipped"] = r.skipped;
  j["loss_spike"] = loss_spike;
  j["plan"] = PlanName(layout.plan());
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const RankInfo& info : layout.ranks()) {
    const double* v = all.data() + static_cast<size_t>(info.rank * ctx.gather_stride);
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
    // Per device group (interleaved 1F1B: its chunks' blocks together, first_block its first
    // chunk's).
    for (int s = 0; s < pipes[p].num_stages(); ++s) {
      const spec::StagePlan& sp = pipes[p].stages[static_cast<size_t>(s)];
      int64_t blocks = 0;
      for (int c = 0; c < pipes[p].chunks; ++c) {
        blocks += pipes[p].stages[static_cast<size_t>(pipes[p].virtual_stage(s, c))].num_blocks;
      }
      nlohmann::ordered_json e;
      e["pipeline"] = p;
      e["stage"] = s;
      e["first_block"] = sp.first_block;
      e["num_blocks"] = blocks;
      e["tp_degree"] = sp.tp_degree;
      e["micro_batches"] = pipes[p].micro_batches;
      e["micro_batch_size"] = pipes[p].micro_batch_size;
      for (int f = 0; f < kNumTimes; ++f) {
        double worst = 0.0;  // the slowest TP rank of the stage
        for (int q : layout.stage_ranks(static_cast<int>(p), s)) {
          worst = std::max(worst, all[static_cast<size_t>(q * ctx.gather_stride + f)]);
        }
        e[kTimeNames[f]] = worst;
      }
      stages.push_back(std::move(e));
    }
  }
  j["stages"] = std::move(stages);
  if (migration != nullptr) j["migration"] = MigrationJson(*migration);
  if (ctx.options->annotate_metrics) ctx.options->annotate_metrics(step, j);
  return j;
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

void Note(RunContext& ctx, const std::string& line) {
  if (ctx.progress) {
    ctx.progress->Note(line);
  } else if (ctx.options->out != nullptr) {
    fmt::print(ctx.options->out, "{}\n", line);
    std::fflush(ctx.options->out);
  }
}

Status ReportStep(RunContext& ctx, int r, const WorldLayout& layout, int64_t step, double wall_s,
                  const parallel::RankStepResult& result, const tensor::Tensor& all,
                  std::optional<double> val_loss, const MigrationRecord* migration) {
  const spec::TrainSpec& train = ctx.run->train;
  const ParallelTrainerOptions& options = *ctx.options;
  const int64_t T = train.seq_len;
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
  if (val_loss) s.val_history.emplace_back(step, *val_loss);
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
    MOTLEY_RETURN_IF_ERROR(
        ctx.metrics
            ->WriteLine(MetricsLine(ctx, layout, step, result, spike, values, step_time_s, wall_s,
                                    virtual_s, val_loss, migration))
            .WithContext(fmt::format("step {}", step)));
  }
  if (options.out == nullptr) return Status::Ok();
  if (!ctx.progress) {
    const bool interactive =
        options.interactive.value_or(ProgressReporter::IsTerminal(options.out));
    const int64_t every =
        options.log_every > 0 ? options.log_every : DefaultLogInterval(train.steps);
    ctx.progress.emplace(options.out, interactive, ctx.first_step, train.steps, every);
    ctx.progress_start = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(wall_s));
  }
  ProgressStep line;
  line.step = step;
  line.loss = result.loss;
  line.lr = result.lr;
  line.grad_norm = result.grad_norm;
  line.tokens = tokens;
  line.wall_step_s = wall_s;
  if (on_virtual) line.emulated_tokens_per_s = TokensPerSecond(tokens, step_time_s);
  if (ctx.peak_flops > 0) {
    line.mfu = spec::Mfu(ctx.flops_per_token, TokensPerSecond(tokens, step_time_s), ctx.peak_flops);
  }
  if (result.skipped) {
    line.flag = "SKIPPED: non-finite loss or gradient norm";
  } else if (spike) {
    line.flag = fmt::format("LOSS SPIKE (recent mean {:.4f})", ctx.loss_spikes.mean());
  }
  ctx.progress->Update(line,
                       std::chrono::duration<double>(Clock::now() - ctx.progress_start).count());
  if (val_loss) ctx.progress->Note(fmt::format("step {}: val_loss {:.4f}", step, *val_loss));
  if (migration != nullptr) {
    ctx.progress->Note(fmt::format(
        "step {}: plan {} -> {}: migrated {:.3f} MB ({:.3f} MB kept in place) in {:.3f} ms"
        "{} (transfer {:.3f} ms)",
        step, migration->from, migration->to, static_cast<double>(migration->bytes) / 1e6,
        static_cast<double>(migration->local_bytes) / 1e6, migration->time_s * 1e3,
        on_virtual ? " of virtual time" : "", migration->transfer_s * 1e3));
  }
  return Status::Ok();
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
    summary.tokens_per_s = TokensPerSecond(summary.tokens, summary.train_time_s);
    summary.gflops = ctx.flops_per_token * summary.tokens_per_s / 1e9;
    if (ctx.peak_flops > 0) {
      summary.mfu = spec::Mfu(ctx.flops_per_token, summary.tokens_per_s, ctx.peak_flops);
    }
  }
  if (!options.trace_path.empty() && ctx.summary_rank == 0) {
    MOTLEY_RETURN_IF_ERROR(WriteTrace(ctx, options.trace_path));
  }
  if (ctx.progress) ctx.progress->Finish();
  if (options.out != nullptr && ctx.summary_rank == 0) {
    fmt::print(options.out, "{}", FormatParallelSummary(summary));
    std::fflush(options.out);
  }
  return summary;
}

}  // namespace motley::train::internal
