// `motley validate`: parses and validates a run file (and optionally a plan against it, by
// spec::ValidatePlan, the plan rule every command applies), then prints what it describes:
// cluster, model and training settings.
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include <fmt/core.h>

#include "cli/cli_help.h"
#include "cli/commands.h"
#include "cli/fail.h"
#include "spec/plan.h"
#include "spec/run_file.h"

namespace motley::cli {
namespace {

struct ValidateArgs {
  std::string run_path;
  std::string plan_path;
};

// "19.5 TFLOP/s", "100 GFLOP/s".
std::string FormatFlops(double flops_per_s) {
  if (flops_per_s >= kTera) return fmt::format("{:.4g} TFLOP/s", flops_per_s / kTera);
  return fmt::format("{:.4g} GFLOP/s", flops_per_s / 1e9);
}

std::string ClusterSummary(const spec::ClusterSpec& cluster) {
  std::string types;
  const std::vector<int> per_type = cluster.DevicesPerType();
  for (size_t i = 0; i < cluster.device_types.size(); ++i) {
    const spec::DeviceType& t = cluster.device_types[i];
    types += fmt::format("\n    {} x{} ({}, {} fp32, {:.4g} GiB{})", t.name, per_type[i], t.vendor,
                         FormatFlops(t.peak_fp32_flops), t.memory_bytes / kGiB,
                         t.is_emulated()
                             ? fmt::format(", emulated at {}", FormatFlops(t.emulated->flops_per_s))
                             : "");
  }
  return fmt::format("cluster: {}: {} device(s) on {} node(s), {} island(s), {} link class(es){}",
                     cluster.name.empty() ? "(unnamed)" : cluster.name, cluster.num_devices(),
                     cluster.nodes.size(), cluster.islands.size(), cluster.link_classes.size(),
                     types);
}

std::string ModelSummary(const spec::ModelSpec& m) {
  return fmt::format(
      "model: {}: L={} C={} NH={} NKV={} F={} V={} max_seq_len={}; {:.2f}M parameters "
      "({:.2f}M non-embedding)",
      m.name, m.num_blocks, m.hidden, m.num_heads, m.num_kv_heads, m.ffn_hidden, m.vocab_size,
      m.max_seq_len, static_cast<double>(m.TotalParams()) / 1e6,
      static_cast<double>(m.NonEmbeddingParams()) / 1e6);
}

std::string TrainSummary(const spec::TrainSpec& t) {
  const std::string data =
      t.data.train_path.empty() ? "the shipped corpus (data/corpus/kjv.txt)" : t.data.train_path;
  const std::string val = t.data.val_path.empty() ? fmt::format("last {:g}% of the training data",
                                                                t.data.val_fraction * 100)
                                                  : t.data.val_path;
  const std::string when =
      t.val_every > 0 ? fmt::format("{} batches every {} steps", t.val_batches, t.val_every)
                      : std::string("not measured (val_every 0)");
  return fmt::format(
      "train: {} steps of {} x {} tokens, lr {:g} (min {:g}, warm-up {} steps), seed {}\n"
      "  data: {} ({}); validation: {}, {}",
      t.steps, t.global_batch, t.seq_len, t.optimizer.lr, t.optimizer.min_lr,
      t.optimizer.warmup_steps, t.seed, data, t.data.format, val, when);
}

std::string PlanSummary(const spec::Plan& plan) {
  std::string out = fmt::format(
      "plan: {} pipeline(s) on {} device(s), schedule {}, recompute {}, "
      "optimizer sharding {}",
      plan.pipelines.size(), plan.num_devices(), spec::PipelineScheduleName(plan.schedule),
      spec::RecomputeSummary(plan), spec::OptimizerShardingName(plan.optimizer_sharding));
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const spec::PipelinePlan& pipe = plan.pipelines[p];
    out += fmt::format(
        "\n  pipeline {}: {} stage(s){}, {} micro-batches of {}:", p, pipe.num_stages(),
        pipe.chunks > 1 ? fmt::format(" x {} chunks (interleaved 1F1B, virtual stages in "
                                      "model order)",
                                      pipe.chunks)
                        : "",
        pipe.micro_batches, pipe.micro_batch_size);
    for (const spec::StagePlan& s : pipe.stages) {
      out += fmt::format(" [blocks {}-{} tp {}{}]", s.first_block, s.end_block() - 1, s.tp_degree,
                         s.recompute == spec::Recompute::kNone
                             ? ""
                             : fmt::format(" recompute {}", spec::RecomputeName(s.recompute)));
    }
  }
  return out;
}

int RunValidate(const ValidateArgs& args) {
  auto run = spec::LoadRunFile(args.run_path);
  if (!run.ok()) {
    return Fail("validate", run.status());
  }
  std::string plan_text;
  if (!args.plan_path.empty()) {
    auto plan = spec::LoadPlan(args.plan_path);
    Status status =
        plan.ok() ? spec::ValidatePlan(*plan, run->cluster, run->model, run->train) : plan.status();
    if (!status.ok()) {
      return Fail("validate", status);
    }
    plan_text = "\n" + PlanSummary(*plan);
  }
  fmt::print("{}: ok\n{}\n{}\n{}{}\n", args.run_path, ClusterSummary(run->cluster),
             ModelSummary(run->model), TrainSummary(run->train), plan_text);
  return 0;
}

}  // namespace

void AddValidateCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ValidateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "validate",
      "Parse and validate a run file (and a plan against it); print a summary of cluster, model "
      "and training settings, or the first error with exit code 1.");
  cmd->add_option("run", args->run_path, "Run file (YAML, docs/formats/run-file.md)")
      ->type_name("RUN.yaml")
      ->required();
  cmd->add_option("--plan", args->plan_path, "Plan file (JSON, docs/formats/plan.md)")
      ->type_name("PLAN.json");
  SetExamples(cmd, {"motley validate examples/runs/hetero-4.yaml --plan "
                    "examples/plans/hetero-4-balanced.json"});
  cmd->callback([args, &exit_code] { exit_code = RunValidate(*args); });
}

}  // namespace motley::cli
