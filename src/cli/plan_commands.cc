// See plan_commands.h.
#include "cli/plan_commands.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "cli/cli_help.h"
#include "cli/fail.h"
#include "cli/offline.h"
#include "cli/validators.h"
#include "core/file_util.h"
#include "core/format_units.h"
#include "core/throughput.h"
#include "plan/plan_names.h"
#include "plan/planner.h"
#include "report/plan_report.h"
#include "report/plan_summary_json.h"
#include "report/prediction_json.h"
#include "report/simulation_json.h"
#include "sim/simulator.h"
#include "spec/plan.h"
#include "spec/run_file.h"

namespace motley::cli {
namespace {

struct CommonArgs {
  std::string run_path;
  std::string plan_path;
  std::string profile_path;
  std::vector<std::string> stragglers;  // "ID=SLOWDOWN"
  std::string report_path;              // simulate: --report
  std::string summary_path;             // predict, simulate: --summary
};

Result<std::unique_ptr<Offline>> Load(const CommonArgs& args) {
  MOTLEY_ASSIGN_OR_RETURN(spec::RunFile run, spec::LoadRunFile(args.run_path));
  return LoadOffline(std::move(run), args.profile_path, args.stragglers);
}

Result<spec::Plan> LoadValidPlan(const Offline& o, const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(spec::Plan plan, spec::LoadPlan(path));
  MOTLEY_RETURN_IF_ERROR(spec::ValidatePlan(plan, o.run.cluster, o.run.model, o.run.train));
  return plan;
}

// "fast 28.1 MiB/1.00 GiB, slow ...": the peak memory of each device type the plan uses, of its
// capacity.
std::string MemoryPerType(const Offline& o, const perf::Prediction& p) {
  std::string out;
  for (size_t t = 0; t < o.run.cluster.device_types.size(); ++t) {
    if (p.peak_memory_per_type[t] <= 0) continue;
    out += fmt::format("{}{} {}/{}", out.empty() ? "" : ", ", o.run.cluster.device_types[t].name,
                       FormatBytes(p.peak_memory_per_type[t]),
                       FormatBytes(o.run.cluster.device_types[t].memory_bytes));
  }
  return out;
}

void PrintPrediction(const Offline& o, const spec::Plan& plan, const perf::Prediction& p) {
  fmt::print("{:>8} {:>5} {:>10} {:>6} {:>4} {:>12} {:>10} {:>10} {:>9} {:>9} {:>10}\n", "pipeline",
             "stage", "type", "tp", "mb", "blocks", "fwd s", "bwd s", "dp s", "opt s", "memory");
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    for (size_t i = 0; i < pipe.stages.size(); ++i) {
      const spec::StagePlan& st = pipe.stages[i];
      const perf::StagePrediction& sp = p.stages[k][i];
      fmt::print(
          "{:>8} {:>5} {:>10} {:>6} {:>4} {:>12} {:>10.4f} {:>10.4f} {:>9.4f} {:>9.4f} {:>10}\n", k,
          i, o.run.cluster.device_types[static_cast<size_t>(sp.device_type)].name, st.tp_degree,
          pipe.micro_batches, fmt::format("[{},{})", st.first_block, st.end_block()),
          sp.cost.forward_s, sp.cost.backward_s, sp.dp_sync_s, sp.optimizer_s,
          FormatBytes(sp.memory.total()));
    }
  }
  fmt::print("iteration {:.6g} s (pipelines {:.6g} s, exposed DP {:.6g} s, optimizer {:.6g} s), "
             "{:.1f} tokens/s, MFU {:.1f}%, memory {}{}\n",
             p.iteration_s, p.pipeline_s, p.exposed_dp_s, p.optimizer_s, p.tokens_per_s,
             100 * p.mfu, MemoryPerType(o, p), p.fits_memory ? "" : "\nDOES NOT FIT: " + p.memory_violation);
  fmt::print("devices: {}\n", plan::DescribeLeftOut(plan, o.run.cluster));
}

int RunPredict(const CommonArgs& args) {
  auto o = Load(args);
  if (!o.ok()) return Fail("predict", o.status());
  auto plan = LoadValidPlan(**o, args.plan_path);
  if (!plan.ok()) return Fail("predict", plan.status());
  const perf::Prediction pred = (*o)->predictor->Predict(*plan, (*o)->rates, (*o)->link_rates);
  PrintPrediction(**o, *plan, pred);
  if (!args.summary_path.empty()) {
    const Status s =
        WriteFileAtomic(args.summary_path, report::PredictionJson((*o)->run.cluster, *plan, pred));
    if (!s.ok()) return Fail("predict", s);
    fmt::print("summary written to {}\n", args.summary_path);
  }
  return 0;
}

int RunSimulate(const CommonArgs& args, const std::string& trace_path) {
  auto o = Load(args);
  if (!o.ok()) return Fail("simulate", o.status());
  auto plan = LoadValidPlan(**o, args.plan_path);
  if (!plan.ok()) return Fail("simulate", plan.status());
  const sim::Simulator simulator(*(*o)->predictor);
  sim::SimOptions so;
  so.record_trace = !trace_path.empty();
  so.rates = (*o)->rates;
  so.links = (*o)->link_rates;
  so.record_trace = so.record_trace || !args.report_path.empty();
  auto r = simulator.Run(*plan, so);
  if (!r.ok()) return Fail("simulate", r.status());
  const perf::Prediction pred = (*o)->predictor->Predict(*plan, (*o)->rates, (*o)->link_rates);
  const report::DeviceBusy busy = report::MeanDeviceBusy(*r);
  const int64_t tokens = (*o)->run.train.global_batch * (*o)->run.train.seq_len;
  fmt::print("simulated iteration {:.4f} s ({} events), closed form {:.4f} s ({:+.2f}%)\n",
             r->iteration_s, r->events, pred.iteration_s,
             100 * (pred.iteration_s / r->iteration_s - 1));
  fmt::print("{:.1f} tokens/s; {} devices busy {:.1f}% of the step on average; {}\n",
             TokensPerSecond(tokens, r->iteration_s), busy.used, 100 * busy.mean_fraction,
             plan::DescribeLeftOut(*plan, (*o)->run.cluster));
  for (size_t d = 0; d < r->device_busy_s.size() && d < 64; ++d) {
    if (r->device_busy_s[d] > 0) {
      fmt::print("  device {:>4}: busy {:.4f} s, idle {:.4f} s\n", d, r->device_busy_s[d], r->device_idle_s[d]);
    }
  }
  if (!args.summary_path.empty()) {
    const Status s =
        WriteFileAtomic(args.summary_path, report::SimulationJson(*r, pred.iteration_s, tokens));
    if (!s.ok()) return Fail("simulate", s);
    fmt::print("summary written to {}\n", args.summary_path);
  }
  if (!trace_path.empty()) {
    const Status s = WriteFileAtomic(trace_path, sim::ChromeTraceJson(*plan, *r));
    if (!s.ok()) return Fail("simulate", s);
    fmt::print("trace: {} (open in https://ui.perfetto.dev)\n", trace_path);
  }
  if (!args.report_path.empty()) {
    report::PlanView v;
    v.title = args.plan_path;
    v.plan = &*plan;
    v.prediction = pred;
    v.simulation = &*r;
    const Status s =
        WriteFileAtomic(args.report_path, report::SimulationReportHtml(*(*o)->predictor, v));
    if (!s.ok()) return Fail("simulate", s);
    fmt::print("report: {}\n", args.report_path);
  }
  return 0;
}

struct PlanArgs {
  CommonArgs common;
  std::string out_path;
  std::string report_path;
  std::string trace_path;
  std::string summary_path;
  int top = 5;
  int threads = 0;  // --threads: 0 = every core
  bool no_baselines = false;
  bool no_interleave = false;  // --no-interleave
  std::string zero1 = "auto";  // --zero1: auto | on | off
  bool quiet = false;
  std::string baseline;  // --baseline: write this baseline instead of the chosen plan
};

int RunPlan(const PlanArgs& args) {
  std::optional<plan::BaselineKind> baseline;
  if (!args.baseline.empty()) {
    Result<plan::BaselineKind> kind = plan::ParseBaselineKind(args.baseline);
    if (!kind.ok()) return Fail("plan", kind.status().WithContext("--baseline"));
    baseline = *kind;
  }
  auto o = Load(args.common);
  if (!o.ok()) return Fail("plan", o.status());
  const Offline& off = **o;
  const auto wall_start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  plan::PlannerOptions options;
  options.baselines = !args.no_baselines || baseline.has_value();
  // The table shows the first --top rows; the ranking the finalists come from keeps its default
  // size unless more rows are asked for, so --top up to that size never changes the choice.
  options.rank_top = std::max(options.rank_top, args.top);
  options.threads = args.threads;
  if (args.no_interleave) options.interleave_chunks.clear();
  if (args.zero1 == "on") options.shardings = {spec::OptimizerSharding::kZero1};
  if (args.zero1 == "off") options.shardings = {spec::OptimizerSharding::kNone};
  auto report = PlanOffline(off, std::move(options), args.quiet);
  report::PlanningCost cost;
  cost.cpu_s = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  cost.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (!report.ok()) return Fail("plan", report.status());
  const int64_t tokens = report->tokens_per_step;
  fmt::print("{:>4} {:>12} {:>10} {:>10} {:>6}  {}\n", "rank", "tokens/s", "pred s", "sim s", "MFU",
             "memory per device type | layout");
  for (size_t i = 0; i < report->ranked.size() && static_cast<int>(i) < args.top; ++i) {
    const plan::Candidate& c = report->ranked[i];
    fmt::print("{:>4} {:>12.1f} {:>10.4f} {:>10} {:>5.1f}%  {} | {}\n", i + 1, c.TokensPerSecond(tokens),
               c.prediction.iteration_s, c.simulated_s > 0 ? fmt::format("{:.4f}", c.simulated_s) : "-",
               100 * c.prediction.mfu, MemoryPerType(off, c.prediction), c.description);
  }
  fmt::print("{}", plan::SummarizeReport(*report));
  plan::Candidate written = report->best;
  if (baseline.has_value()) {
    Result<plan::Candidate> b = plan::FindBaseline(*report, *baseline);
    if (!b.ok()) return Fail("plan", b.status());
    written = *b;
  }
  fmt::print("devices{}: {}\n", baseline.has_value() ? " of the baseline" : "",
             plan::DescribeLeftOut(written.plan, off.run.cluster));
  fmt::print("names: {}", plan::LayoutLegend("       ").substr(7));
  const Status saved = spec::SavePlan(written.plan, args.out_path);
  if (!saved.ok()) return Fail("plan", saved);
  if (!args.summary_path.empty()) {
    Result<std::string> summary = report::PlanSummaryJson(*off.predictor, *report, written, cost);
    if (!summary.ok()) return Fail("plan", summary.status());
    const Status s = WriteFileAtomic(args.summary_path, *summary);
    if (!s.ok()) return Fail("plan", s);
    fmt::print("summary written to {}\n", args.summary_path);
  }
  if (baseline.has_value()) {
    fmt::print("baseline {} ({}) written to {}\n", args.baseline, written.description,
               args.out_path);
  } else {
    fmt::print("plan written to {}\n", args.out_path);
  }
  if (!args.report_path.empty() || !args.trace_path.empty()) {
    const sim::Simulator simulator(*off.predictor);
    sim::SimOptions so;
    so.record_trace = true;
    so.rates = off.rates;
    auto r = simulator.Run(written.plan, so);
    if (!r.ok()) return Fail("plan", r.status());
    if (!args.report_path.empty()) {
      plan::PlanReport shown = *report;
      shown.best = written;  // the report shows the plan that was written
      const Status s =
          WriteFileAtomic(args.report_path, report::PlanReportHtml(*off.predictor, shown, *r));
      if (!s.ok()) return Fail("plan", s);
      fmt::print("report written to {}\n", args.report_path);
    }
    if (!args.trace_path.empty()) {
      const Status s = WriteFileAtomic(args.trace_path, sim::ChromeTraceJson(written.plan, *r));
      if (!s.ok()) return Fail("plan", s);
      fmt::print("trace written to {}\n", args.trace_path);
    }
  }
  return 0;
}

void AddCommon(CLI::App* cmd, CommonArgs* args, bool with_plan) {
  cmd->add_option("run", args->run_path, "Run file (YAML, docs/formats/run-file.md)")
      ->type_name("RUN.yaml")
      ->required();
  if (with_plan) {
    cmd->add_option("plan", args->plan_path, "Plan file (JSON, docs/formats/plan.md)")
        ->type_name("PLAN.json")
        ->required();
  }
  cmd->add_option("--profile", args->profile_path,
                  "Measured per-block times (docs/formats/profile.md); without it the analytical "
                  "compute model of the device types is used")
      ->type_name("PROFILE.json");
  cmd->add_option("--straggler", args->stragglers,
                  "Slow down a device by a factor >= 1, e.g. --straggler 3=2.5 (device 3 runs "
                  "2.5x slower), or a link, e.g. --straggler 3-4=10 (the link between devices 3 "
                  "and 4 runs 10x slower); repeatable")
      ->type_name("ID=SLOWDOWN|A-B=SLOWDOWN");
}

void Register(CLI::App& app, const std::function<void(int)>& done) {
  auto plan_args = std::make_shared<PlanArgs>();
  CLI::App* plan_cmd = app.add_subcommand(
      "plan",
      "Search the best parallel plan for the run's cluster and model: prints a ranked table "
      "(tokens/s, MFU, memory per device type), the speedup over the uniform, homogeneous and "
      "identical-pipelines baselines, the ratio to each reference (compute bound; homogeneous "
      "sum: each device type alone at its share of the batch), MFU over all devices, why any "
      "device is left out, and writes the plan.");
  AddCommon(plan_cmd, &plan_args->common, false);
  plan_cmd
      ->add_option("-o,--output", plan_args->out_path,
                   "Where to write the chosen plan (or the --baseline)")
      ->type_name("PLAN.json")
      ->required();
  plan_cmd
      ->add_option("--baseline", plan_args->baseline,
                   "Write this baseline instead of the chosen plan: uniform (Megatron-style "
                   "split of the whole cluster), homogeneous (the best single device type), "
                   "identical (identical pipelines only)")
      ->check(OneOf({"uniform", "homogeneous", "identical"}))
      ->type_name("uniform|homogeneous|identical");
  plan_cmd
      ->add_option("--report", plan_args->report_path,
                   "Also write one self-contained HTML page (baselines chart, device map, "
                   "utilisation, stage layout, timeline)")
      ->type_name("report.html");
  plan_cmd->add_option("--trace", plan_args->trace_path,
                       "Also write a Chrome trace (Perfetto) of the chosen plan's simulated step")
      ->type_name("TRACE.json");
  plan_cmd
      ->add_option("--summary", plan_args->summary_path,
                   "Also write the outcome as JSON: the chosen plan's tokens/s and MFU, idle "
                   "devices and why, each baseline and reference with its ratio, the ranked "
                   "table, planning time (docs/formats/plan-summary.md)")
      ->type_name("SUMMARY.json");
  plan_cmd
      ->add_option("--top", plan_args->top,
                   "Rows of the ranked table (default " + std::to_string(PlanArgs{}.top) +
                       "); above " + std::to_string(plan::PlannerOptions{}.rank_top) +
                       " the ranking the finalists are chosen from widens too")
      ->check(IntRange(1, 1000000))
      ->type_name("N");
  plan_cmd
      ->add_option("--threads", plan_args->threads,
                   "Threads evaluating candidates (default 0: every core); the chosen plan and "
                   "the ranking are the same for any N")
      ->check(IntRange(0, 4096))
      ->type_name("N");
  plan_cmd->add_flag("--no-baselines", plan_args->no_baselines,
                     "Skip the baselines and references (faster)");
  plan_cmd->add_flag("--no-interleave", plan_args->no_interleave,
                     "Propose one model chunk per device group only (by default the planner also "
                     "tries interleaved 1F1B with 2, 3 and 4 chunks where that is faster)");
  plan_cmd
      ->add_option("--zero1", plan_args->zero1,
                   "Optimizer sharding of plans with more than one pipeline: auto (default) "
                   "splits with ZeRO-1 and keeps whichever of ZeRO-1 and none is faster and fits; "
                   "on always shards (the least memory); off never does")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->type_name("auto|on|off");
  plan_cmd->add_flag("--quiet", plan_args->quiet, "No progress lines on stderr");
  SetExamples(plan_cmd, {"motley plan examples/runs/hetero-4.yaml -o plan.json --report plan.html",
                         "motley plan examples/runs/hetero-4.yaml -o plan.json --summary "
                         "summary.json",
                         "motley plan examples/runs/hetero-4.yaml --baseline uniform -o "
                         "uniform.json",
                         "motley plan examples/runs/emulated-8.yaml -o plan.json --straggler 5=3",
                         "motley plan examples/runs/hethub-140b.yaml -o plan.json --threads 1",
                         "motley plan examples/runs/hetero-4.yaml -o plan.json --no-interleave",
                         "motley plan examples/runs/hethub-140b.yaml -o plan.json --zero1 on"});
  plan_cmd->callback([plan_args, done] { done(RunPlan(*plan_args)); });

  auto predict_args = std::make_shared<CommonArgs>();
  CLI::App* predict_cmd = app.add_subcommand(
      "predict",
      "Predict a plan's iteration time, tokens/s, MFU and memory per device with the closed-form "
      "model (per stage: forward, backward, DP sync, optimizer step, memory).");
  AddCommon(predict_cmd, predict_args.get(), true);
  predict_cmd
      ->add_option("--summary", predict_args->summary_path,
                   "Also write the prediction as JSON: the step and its parts, tokens/s, MFU, "
                   "memory, and each stage's times and devices (docs/formats/prediction.md)")
      ->type_name("SUMMARY.json");
  SetExamples(predict_cmd, {"motley predict examples/runs/hetero-4.yaml "
                            "examples/plans/hetero-4-balanced.json",
                            "motley predict examples/runs/hetero-4.yaml "
                            "examples/plans/hetero-4-balanced.json --summary prediction.json",
                            "motley predict examples/runs/small.yaml plan.json --profile "
                            "profile.json"});
  predict_cmd->callback([predict_args, done] { done(RunPredict(*predict_args)); });

  auto sim_args = std::make_shared<CommonArgs>();
  auto trace = std::make_shared<std::string>();
  CLI::App* sim_cmd = app.add_subcommand(
      "simulate",
      "Replay a plan's whole training step event by event (every transfer a flow sharing the "
      "network, stragglers, slow links): prints the "
      "iteration time beside the closed form and busy/idle time per device; optionally writes a "
      "Chrome trace, an HTML report and a JSON summary.");
  AddCommon(sim_cmd, sim_args.get(), true);
  sim_cmd->add_option("--trace", *trace, "Write a Chrome trace (Perfetto) of the step")
      ->type_name("TRACE.json");
  sim_cmd
      ->add_option("--report", sim_args->report_path,
                   "Also write one self-contained HTML page (device map, utilisation, stage "
                   "layout, timeline)")
      ->type_name("report.html");
  sim_cmd
      ->add_option("--summary", sim_args->summary_path,
                   "Also write the outcome as JSON: the simulated and predicted step, tokens/s, "
                   "and each used device's busy and idle time (docs/formats/simulation.md)")
      ->type_name("SUMMARY.json");
  SetExamples(sim_cmd, {"motley simulate examples/runs/hetero-4.yaml "
                        "examples/plans/hetero-4-balanced.json --report sim.html",
                        "motley simulate examples/runs/hetero-4.yaml "
                        "examples/plans/hetero-4-balanced.json --summary simulation.json",
                        "motley simulate examples/runs/emulated-8.yaml plan.json --straggler 5=3 "
                        "--trace trace.json"});
  sim_cmd->callback([sim_args, trace, done] { done(RunSimulate(*sim_args, *trace)); });
}

}  // namespace

void RegisterPlanCommands(CLI::App& app, int& exit_code) {
  Register(app, [&exit_code](int code) { exit_code = code; });
}

void RegisterPlanCommands(CLI::App& app) {
  Register(app, [](int code) {
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace motley::cli
