// `motley train`: trains on one device (src/train/trainer.h) with a run file, or with the embedded
// default run (the small model on the shipped corpus) when none is given. With `--plan PLAN.json`
// it runs the plan (src/train/parallel_trainer.h) with one rank per device of the run's cluster
// (docs/launch.md): every rank a thread of this process (`--ranks N`, when given, must be the
// device count), or, when started by a launcher (Open MPI's OMPI_COMM_WORLD_RANK/SIZE or Slurm's
// SLURM_PROCID/NTASKS), one rank per process over the mpi communicator, world rank r driving
// device r; a launch of another size, or a multi-process launch without a plan, is refused once
// (by rank 0). A plan may leave devices idle. After a lost rank every survivor reports and the
// job ends with MPI_Abort (never MPI_Finalize, which would wait for the lost process).
// On an emulated cluster `--clock virtual|wall` picks the clock, and `--compare PLAN2.json`
// trains the same job under a second plan and prints both throughputs side by side; every run
// writes its metrics (the first to the metrics path, the next beside it as STEM.LABEL.jsonl). A plan
// value may also name a baseline (uniform, homogeneous, identical): the plan `motley plan
// --baseline NAME` writes for the run's cluster. `--report FILE` writes one HTML page of the
// plans (prediction, simulation) and the runs' metrics (src/report); each parallel metrics line
// carries the plan's predicted step time (`predicted_step_time_s`).
// Checkpoints go to train.checkpoint.dir (or --checkpoint-dir); `--resume` continues from the
// latest complete one there, whatever plan wrote it (src/train/trainer_checkpoint.h).
// `--auto-plan` plans the run's cluster first, as `motley plan` does (cli/offline.h), and trains
// under that plan; with `--resume` it continues from the latest checkpoint whatever plan or
// cluster wrote it: after losing a device, resume on the cluster without it (issue 6).
// `--replan` runs the straggler loop (src/elastic/elastic_run.h) behind the trainer's
// plan-switch callback (on rank 0 under a launcher): every rank's compute time, probe op and link
// traffic feed the rate monitor, judged against the run's predictor (`--profile` adds measured
// times), and a plan the re-plan controller adopts is migrated to before the next step.
// `--inject SCENARIO.yaml` slows emulated devices and links from given steps
// (docs/formats/scenario.md).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli/cli_help.h"
#include "cli/commands.h"
#include "cli/fail.h"
#include "cli/offline.h"
#include "cli/validators.h"
#include "comm/communicator.h"
#include "core/file_util.h"
#include "plan/plan_names.h"
#include "report/html.h"
#include "report/metrics_file.h"
#include "report/plan_report.h"
#include "report/run_report.h"
#include "sim/simulator.h"
#if defined(MOTLEY_HAVE_MPI)
#include "comm/mpi_world.h"
#endif
#include "elastic/elastic_run.h"
#include "spec/limits.h"
#include "spec/plan.h"
#include "spec/run_file.h"
#include "straggler/scenario.h"
#include "train/parallel_trainer.h"
#include "train/plan_switch.h"
#include "train/trainer.h"

namespace motley::cli {
namespace {

struct TrainArgs {
  std::string run_path;
  int64_t steps = 0;
  std::string metrics_path;
  int threads = 0;
  int64_t micro_batches = 1;
  std::string plan_path;
  std::string trace_path;
  std::vector<int64_t> trace_steps;
  std::string clock = "auto";
  std::string compare_path;
  std::string checkpoint_dir;
  bool resume = false;
  bool overwrite = false;
  std::string init_from;
  bool replan = false;
  std::string inject_path;
  bool cuda_bf16 = false;
  bool auto_plan = false;
  std::string report_path;
  int64_t log_interval = 0;
  int ranks = 0;  // --ranks: 0 = one per device of the cluster
  std::string profile_path;
};

constexpr const char* kAutoPlanLabel = "auto-plan";

// The planner's report for the run's cluster, computed once (with baselines) and shared by every
// plan value that needs it.
class Planned {
 public:
  // baselines: whether a baseline is asked for (they cost planning time).
  Planned(const spec::RunFile& run, bool baselines) : run_(run), baselines_(baselines) {}
  Result<const plan::PlanReport*> Get() {
    if (report_.has_value()) return &*report_;
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<Offline> offline, LoadOffline(run_, "", {}));
    plan::PlannerOptions options;
    options.baselines = baselines_;
    MOTLEY_ASSIGN_OR_RETURN(plan::PlanReport report,
                            PlanOffline(*offline, std::move(options), /*quiet=*/true));
    report_ = std::move(report);
    return &*report_;
  }

 private:
  const spec::RunFile& run_;
  bool baselines_;
  std::optional<plan::PlanReport> report_;
};

// A --plan / --compare value: kAutoPlanLabel (--auto-plan: the plan `motley plan RUN.yaml`
// chooses), a baseline name (the plan `motley plan --baseline NAME` writes), or a plan file. Under
// a launcher every process plans (the planner is deterministic, so all get the same plan) and
// only rank 0 prints.
Result<spec::Plan> ResolvePlan(const spec::RunFile& run, const std::string& value, Planned& planned,
                               bool print) {
  const bool automatic = value == kAutoPlanLabel;
  if (!automatic && !plan::IsBaselineName(value)) return spec::LoadPlan(value);
  MOTLEY_ASSIGN_OR_RETURN(const plan::PlanReport* report, planned.Get());
  plan::Candidate chosen = report->best;
  if (!automatic) {
    MOTLEY_ASSIGN_OR_RETURN(plan::BaselineKind kind, plan::ParseBaselineKind(value));
    MOTLEY_ASSIGN_OR_RETURN(chosen, plan::FindBaseline(*report, kind));
  }
  spec::Plan plan = chosen.plan;
  plan.source = value;
  if (print) {
    fmt::print("motley train: {} for cluster '{}' ({} devices): {}; predicted {:.1f} tokens/s\n",
               automatic ? "auto-plan" : "baseline " + value, run.cluster.name,
               run.cluster.num_devices(), chosen.description,
               chosen.TokensPerSecond(report->tokens_per_step));
    std::fflush(stdout);
  }
  return plan;
}

// A short name for a plan value in file names and report legends: the baseline name or the plan
// file's stem.
std::string PlanLabel(const std::string& value) {
  if (value == kAutoPlanLabel || plan::IsBaselineName(value)) return value;
  return std::filesystem::path(value).stem().string();
}

// Where run i of a comparison writes its metrics: the first to `first`, run i > 0 beside it, as
// STEM.LABEL.jsonl (an index is added when two runs share a label).
std::string MetricsPathOf(const std::string& first, const std::vector<std::string>& labels,
                          size_t i) {
  if (i == 0 || first.empty()) return first;
  const std::filesystem::path p(first);
  std::string label = labels[i];
  for (size_t j = 0; j < i; ++j) {
    if (labels[j] == labels[i]) label += fmt::format("-{}", i);
  }
  const std::string ext = p.has_extension() ? p.extension().string() : ".jsonl";
  return (p.parent_path() / (p.stem().string() + "." + label + ext)).string();
}

// The metrics path a run writes when --report asks for one and none was set: REPORT-STEM.jsonl.
std::string DefaultMetricsPath(const std::string& report_path) {
  std::filesystem::path p(report_path);
  return (p.parent_path() / (p.stem().string() + ".jsonl")).string();
}

// The --resume source: train.checkpoint.dir (after --checkpoint-dir), or an error; and the checks
// of --init-from and --overwrite against it.
Result<std::string> ResumeSource(const TrainArgs& args, const spec::TrainSpec& train) {
  if (args.resume && !args.init_from.empty()) {
    return Err(StatusCode::kInvalidArgument,
               "--resume and --init-from exclude each other (--resume continues a run with its "
               "optimizer state; --init-from starts a new run from weights)");
  }
  if (args.overwrite && args.resume) {
    return Err(StatusCode::kInvalidArgument,
               "--overwrite and --resume exclude each other (--overwrite deletes the checkpoints "
               "--resume would continue from)");
  }
  if (args.overwrite && train.checkpoint.dir.empty()) {
    return Err(StatusCode::kInvalidArgument,
               "--overwrite: the run has no train.checkpoint.dir; set it or pass --checkpoint-dir");
  }
  if (!args.resume) return std::string();
  if (train.checkpoint.dir.empty()) {
    return Err(StatusCode::kInvalidArgument,
               "--resume: the run has no train.checkpoint.dir; set it or pass --checkpoint-dir");
  }
  return train.checkpoint.dir;
}

// How this process was started: by a launcher (Open MPI's mpiexec sets OMPI_COMM_WORLD_RANK and
// OMPI_COMM_WORLD_SIZE; Slurm's srun sets SLURM_PROCID and SLURM_NTASKS), or not (rank -1).
struct Launch {
  int rank = -1;         // this process's rank; -1: not started by a launcher
  int size = 0;          // processes the launcher started
  std::string variable;  // the size variable read, for messages ("OMPI_COMM_WORLD_SIZE=4")
  bool launched() const { return rank >= 0; }
};

Launch LauncherLaunch() {
  const std::pair<const char*, const char*> kinds[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& [rank_name, size_name] : kinds) {
    const char* rank = std::getenv(rank_name);
    if (rank == nullptr || *rank == '\0') continue;
    Launch l;
    l.rank = std::atoi(rank);
    const char* size = std::getenv(size_name);
    l.size = size != nullptr ? std::atoi(size) : 0;
    l.variable = fmt::format("{}={}", size_name, size != nullptr ? size : "(unset)");
    return l;
  }
  return Launch{};
}

// A failure every process of a launch reaches alike: printed once (by rank 0, or without a
// launcher), the same exit code everywhere.
int FailOnce(const Launch& launch, const Status& status) {
  if (launch.rank > 0) return ExitCodeFor(status);
  return Fail("train", status);
}

// The world is one rank per device of the cluster (ranks as threads: --ranks N, by default the
// cluster's device count; under a launcher: the processes it started). A launch of another size
// is refused with both numbers and what to pass.
Status CheckLaunchMatchesCluster(const TrainArgs& args, const Launch& launch,
                                 const spec::RunFile& run, const std::string& source) {
  const int devices = run.cluster.num_devices();
  if (launch.launched()) {
    if (launch.size != devices) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: cluster '{}' has {} devices but the launcher started {} processes ({}); "
                 "motley runs one process per device: launch {} (mpiexec -n {} / srun -n {}), or "
                 "use a cluster file that lists the {} devices you have",
                 source, run.cluster.name, devices, launch.size, launch.variable, devices, devices,
                 devices, launch.size);
    }
    if (args.ranks > 0 && args.ranks != launch.size) {
      return Err(StatusCode::kInvalidArgument,
                 "--ranks {}: the launcher started {} processes ({}); under a launcher the "
                 "world is its processes (leave --ranks out)",
                 args.ranks, launch.size, launch.variable);
    }
    return Status::Ok();
  }
  if (args.ranks > 0 && args.ranks != devices) {
    return Err(StatusCode::kInvalidArgument,
               "--ranks {}: cluster '{}' ({}) has {} devices; motley runs one rank per device: "
               "pass --ranks {} (or leave it out), or use a cluster file that lists {} devices",
               args.ranks, run.cluster.name, source, devices, devices, args.ranks);
  }
  return Status::Ok();
}

// One rank per process over the mpi communicator.
Result<train::ParallelTrainSummary> TrainUnderLauncher(const spec::RunFile& run,
                                                       const spec::Plan& plan,
                                                       const train::ParallelTrainerOptions& options,
                                                       int launcher_rank,
                                                       const std::string& source) {
#if defined(MOTLEY_HAVE_MPI)
  auto connect = [&](const comm::Emulation& emulation)
      -> Result<std::unique_ptr<comm::Communicator>> {
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world,
                            comm::MpiWorld::Connect(nullptr, nullptr, options.comm, emulation));
    if (world->rank() != launcher_rank) {
      return Err("the launcher says rank {} but MPI says rank {}", launcher_rank, world->rank());
    }
    return world;
  };
  // After a lost rank every survivor reports, then the job ends at once: MPI_Finalize would wait
  // for the lost process forever (mpi_world.h).
  train::ParallelTrainerOptions with_report = options;
  bool reported = false;
  with_report.report_lost_peer = [&reported, &source](const Status& error) {
    (void)Fail("train", error.WithContext(source));
    std::fflush(stderr);
    reported = true;
  };
  auto summary = train::TrainParallelProcess(run, plan, with_report, connect);
  if (!summary.ok() && (reported || summary.status().code() == StatusCode::kUnavailable)) {
    if (!reported) (void)Fail("train", summary.status().WithContext(source));
    comm::MpiWorld::AbortJob(ExitCodeFor(summary.status()));
  }
  comm::MpiWorld::Finalize();
  return summary;
#else
  (void)run;
  (void)plan;
  (void)options;
  (void)source;
  return Err("started by a launcher as rank {}, but this motley was built without MPI",
             launcher_rank);
#endif
}

// The HTML page of `motley train --report`: each plan (prediction and simulation) and every run's
// metrics, read back from the files the runs wrote.
Status WriteTrainReport(const std::string& path, const std::string& source,
                        const spec::RunFile& run, const std::vector<spec::Plan>& plans,
                        const std::vector<std::string>& labels,
                        const std::vector<std::string>& metrics_paths) {
  std::string body;
  std::vector<report::RunMetrics> runs;
  for (size_t i = 0; i < metrics_paths.size(); ++i) {
    MOTLEY_ASSIGN_OR_RETURN(report::RunMetrics m,
                            report::ReadMetricsFile(metrics_paths[i], labels[i]));
    runs.push_back(std::move(m));
  }
  body += report::RunSections(runs);
  if (!plans.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<Offline> offline, LoadOffline(run, "", {}));
    const sim::Simulator simulator(*offline->predictor);
    sim::SimOptions so;
    so.record_trace = true;
    for (size_t i = 0; i < plans.size(); ++i) {
      MOTLEY_ASSIGN_OR_RETURN(sim::SimResult r, simulator.Run(plans[i], so));
      report::PlanView v;
      v.title = labels[i];
      v.plan = &plans[i];
      v.prediction = offline->predictor->Predict(plans[i]);
      v.simulation = &r;
      v.id_prefix = plans.size() > 1 ? fmt::format("plan{}-", i) : "";
      body += report::PlanSections(*offline->predictor, v);
    }
  }
  return WriteFileAtomic(path, report::Page("motley train: " + source, body));
}

// `motley train RUN.yaml --plan PLAN.json [--compare PLAN2.json]`: each plan is checked before
// any rank starts.
int RunParallelTrain(const TrainArgs& args, const CLI::App& cmd, const spec::RunFile& run,
                     const std::string& source) {
  if (cmd.count("--micro-batches") > 0) {
    return Fail("train", Err(StatusCode::kInvalidArgument,
                             "--micro-batches does not apply with --plan (the plan sets each "
                             "pipeline's micro-batches)"));
  }
  Result<train::ClockChoice> clock = train::ParseClockChoice(args.clock);
  if (!clock.ok()) {
    return Fail("train", clock.status());
  }
  const Launch launch = LauncherLaunch();
  const int launcher_rank = launch.rank;
  if (Status s = CheckLaunchMatchesCluster(args, launch, run, source); !s.ok()) {
    return FailOnce(launch, s);
  }
  std::vector<std::string> values = {args.auto_plan ? kAutoPlanLabel : args.plan_path};
  if (!args.compare_path.empty()) values.push_back(args.compare_path);
  bool baselines = false;
  for (const std::string& v : values) baselines = baselines || plan::IsBaselineName(v);
  Planned planned(run, baselines);
  std::vector<spec::Plan> plans;
  std::vector<std::string> labels;
  for (const std::string& value : values) {
    Result<spec::Plan> plan = ResolvePlan(run, value, planned, /*print=*/launcher_rank <= 0);
    if (!plan.ok()) {
      return FailOnce(
          launch, plan.status().WithContext(
                      value == args.compare_path && plans.size() == 1 ? "--compare" : "--plan"));
    }
    const Status checked = train::CheckPlanForRun(run, *plan);
    if (!checked.ok()) {
      return FailOnce(launch, checked.WithContext(source));
    }
    plans.push_back(std::move(*plan));
    labels.push_back(PlanLabel(value));
  }
  if (launcher_rank >= 0 && plans.size() > 1) {
    return FailOnce(
        launch, Err(StatusCode::kInvalidArgument, "--compare is not supported under a launcher"));
  }
  train::ParallelTrainerOptions options;
  options.world_devices = train::ClusterWorld(run.cluster);  // one rank per device
  Result<std::string> resume = ResumeSource(args, run.train);
  if (!resume.ok()) {
    return Fail("train", resume.status());
  }
  options.resume = *resume;
  options.init_from = args.init_from;
  options.overwrite = args.overwrite;
  options.trace_path = args.trace_path;
  options.trace_steps = args.trace_steps;
  options.clock = *clock;
  options.cuda_bf16 = args.cuda_bf16;
  options.log_every = args.log_interval;
  if (launcher_rank > 0) options.out = nullptr;  // only rank 0 prints progress
  // Open MPI gives every rank a pty for its output even when mpiexec's own output is a file, so
  // a launched rank cannot tell a terminal from a log: plain lines.
  if (launcher_rank >= 0) options.interactive = false;
  if (!args.inject_path.empty()) {
    Result<straggler::Scenario> scenario = straggler::LoadScenario(args.inject_path, run.cluster);
    if (!scenario.ok()) {
      return Fail("train", scenario.status().WithContext("--inject"));
    }
    if (launcher_rank <= 0) {
      for (const std::string& w : scenario->warnings) fmt::print(stderr, "motley train: {}\n", w);
    }
    elastic::InjectScenario(*scenario, run.cluster, &options);
  }
  std::unique_ptr<Offline> replan_models;  // outlives `replanning`, which references its predictor
  std::unique_ptr<elastic::ElasticLoop> replanning;
  if (args.replan) {
    if (plans.size() > 1) {
      return FailOnce(launch, Err(StatusCode::kInvalidArgument,
                                  "--replan runs with one plan (not with --compare)"));
    }
    // The coordinator runs on rank 0 (the trainer asks it after every step there and broadcasts
    // its decision); the other processes only follow.
    options.straggler_reports = true;  // on every rank: it sizes the per-step all-gather
    if (launcher_rank <= 0) {
      // The loop's predictor is the run's, as `motley plan` builds it (cli/offline.h).
      Result<std::unique_ptr<Offline>> offline = LoadOffline(run, args.profile_path, {});
      if (!offline.ok()) return FailOnce(launch, offline.status().WithContext("--replan"));
      replan_models = std::move(*offline);
      elastic::ElasticOptions eo;
      eo.world_devices = options.world_devices;
      eo.measured_types = elastic::MeasuredTypes(run.cluster, replan_models->predictor->compute());
      eo.progress = options.out;
      replanning = std::make_unique<elastic::ElasticLoop>(run, *replan_models->predictor,
                                                          plans.front(), std::move(eo));
      replanning->Attach(&options);
    }
  } else if (!args.profile_path.empty()) {
    return FailOnce(launch, Err(StatusCode::kInvalidArgument,
                                "--profile applies to --replan (the straggler loop's expected "
                                "times)"));
  }
  // Each line of the metrics carries the step time the predictor gives the plan it ran under
  // (lines after a plan switch carry none).
  std::unique_ptr<Offline> offline;
  {
    Result<std::unique_ptr<Offline>> o = LoadOffline(run, "", {});
    if (!o.ok()) return Fail("train", o.status());
    offline = std::move(*o);
  }
  const std::function<void(int64_t, nlohmann::ordered_json&)> elastic_annotate =
      options.annotate_metrics;
  std::string metrics_first = run.train.metrics_path;
  if (metrics_first.empty() && !args.report_path.empty()) {
    metrics_first = DefaultMetricsPath(args.report_path);
  }
  std::vector<train::ParallelTrainSummary> summaries;
  std::vector<std::string> metrics_paths;
  for (size_t i = 0; i < plans.size(); ++i) {
    spec::RunFile this_run = run;
    if (i > 0) {  // the comparison runs write no trace and no checkpoints
      options.trace_path.clear();
      this_run.train.checkpoint.dir.clear();
    }
    options.metrics_path = MetricsPathOf(metrics_first, labels, i);
    this_run.train.metrics_path = options.metrics_path;
    if (plans[i].source.empty()) plans[i].source = values[i];
    const std::string plan_name = train::PlanName(plans[i]);
    const double predicted_s = offline->predictor->Predict(plans[i]).iteration_s;
    options.annotate_metrics = [elastic_annotate, plan_name, predicted_s](
                                   int64_t step, nlohmann::ordered_json& line) {
      if (line.value("plan", std::string()) == plan_name) {
        line["predicted_step_time_s"] = predicted_s;
      }
      if (elastic_annotate) elastic_annotate(step, line);
    };
    auto summary = launcher_rank >= 0
                       ? TrainUnderLauncher(this_run, plans[i], options, launcher_rank, source)
                       : train::TrainParallel(this_run, plans[i], options);
    if (!summary.ok()) {
      return Fail("train", summary.status().WithContext(source));
    }
    summaries.push_back(std::move(*summary));
    if (!options.metrics_path.empty()) metrics_paths.push_back(options.metrics_path);
  }
  if (options.out == nullptr) return 0;
  if (summaries.size() > 1) {
    fmt::print("the same job under both plans (tokens/s on each run's clock):\n{}",
               train::FormatPlanComparison(values, summaries));
    const train::ParallelTrainSummary& a = summaries.front();
    const train::ParallelTrainSummary& b = summaries.back();
    if (b.tokens_per_s > 0) {
      fmt::print("measured speed-up of {} over {}: {:.2f}x ({} clock)\n", values.front(),
                 values.back(), a.tokens_per_s / b.tokens_per_s, a.clock);
    }
  }
  if (!metrics_paths.empty()) {
    fmt::print("metrics: {}\n", fmt::format("{}", fmt::join(metrics_paths, ", ")));
  }
  if (!args.trace_path.empty()) fmt::print("trace: {}\n", args.trace_path);
  if (!args.report_path.empty()) {
    const Status s = WriteTrainReport(args.report_path, source, run, plans, labels, metrics_paths);
    if (!s.ok()) return Fail("train", s.WithContext("--report"));
    fmt::print("report: {}\n", args.report_path);
  }
  return 0;
}

int RunTrain(const TrainArgs& args, const CLI::App& cmd) {
  Result<spec::RunFile> run = args.run_path.empty() ? Result<spec::RunFile>(spec::DefaultRunFile())
                                                    : spec::LoadRunFile(args.run_path);
  if (!run.ok()) {
    return Fail("train", run.status());
  }
  if (Status kernels = spec::CheckRuntimeRunsKernels(
          run->train,
          (args.run_path.empty() ? std::string("default run") : args.run_path) + ": train");
      !kernels.ok()) {
    return Fail("train", kernels);
  }
  spec::TrainSpec& train = run->train;
  if (cmd.count("--steps") > 0) train.steps = args.steps;
  if (cmd.count("--metrics") > 0) train.metrics_path = args.metrics_path;
  if (cmd.count("--threads") > 0) train.threads = args.threads;
  if (cmd.count("--checkpoint-dir") > 0) train.checkpoint.dir = args.checkpoint_dir;
  const std::string source = args.run_path.empty() ? "default run" : args.run_path;
  if (args.auto_plan && !args.plan_path.empty()) {
    return Fail("train", Err(StatusCode::kInvalidArgument,
                             "--auto-plan and --plan exclude each other (--auto-plan chooses the "
                             "plan)"));
  }
  if (!args.plan_path.empty() || args.auto_plan) return RunParallelTrain(args, cmd, *run, source);
  const Launch launch = LauncherLaunch();
  if (launch.launched() && launch.size != 1) {
    // N copies of the single-device loop would race on one checkpoint folder and metrics file.
    return FailOnce(launch, Err(StatusCode::kInvalidArgument,
                                "{}: started by a launcher as {} processes ({}), but without "
                                "--plan or --auto-plan motley trains on one device; pass --plan "
                                "PLAN.json or --auto-plan to run one rank per device of cluster "
                                "'{}' ({} devices), or run `motley train` without the launcher",
                                source, launch.size, launch.variable, run->cluster.name,
                                run->cluster.num_devices()));
  }
  for (const char* option : {"--compare", "--trace", "--trace-steps", "--clock", "--replan",
                             "--inject", "--ranks", "--profile"}) {
    if (cmd.count(option) > 0) {
      return Fail("train",
                  Err(StatusCode::kInvalidArgument,
                      "{} needs --plan or --auto-plan (it applies to parallel runs only)", option));
    }
  }
  fmt::print("motley train: {}\n", source);
  if (run->cluster.num_devices() > 1) {
    fmt::print(
        "note: training on one CPU device; the run's cluster has {} devices, which this "
        "single-device loop does not use\n",
        run->cluster.num_devices());
  }
  std::fflush(stdout);
  train::TrainerOptions options;
  options.micro_batches = args.micro_batches;
  options.log_every = args.log_interval;
  Result<std::string> resume = ResumeSource(args, train);
  if (!resume.ok()) {
    return Fail("train", resume.status());
  }
  options.resume = *resume;
  options.init_from = args.init_from;
  options.overwrite = args.overwrite;
  if (train.metrics_path.empty() && !args.report_path.empty()) {
    train.metrics_path = DefaultMetricsPath(args.report_path);
  }
  auto summary = train::Train(run->model, train, options);
  if (!summary.ok()) {
    return Fail("train", summary.status().WithContext(source));
  }
  if (!train.metrics_path.empty()) fmt::print("metrics: {}\n", train.metrics_path);
  if (!summary->last_checkpoint.empty()) fmt::print("checkpoint: {}\n", summary->last_checkpoint);
  if (summary->stopped) fmt::print("stopped on {} after saving\n", summary->stop_signal);
  if (!args.report_path.empty()) {
    const Status s =
        WriteTrainReport(args.report_path, source, *run, {}, {"serial"}, {train.metrics_path});
    if (!s.ok()) return Fail("train", s.WithContext("--report"));
    fmt::print("report: {}\n", args.report_path);
  }
  return 0;
}

}  // namespace

void AddTrainCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train on one device (the CPU), or with --plan on the run's (possibly emulated) cluster. "
      "Without RUN.yaml: the embedded default run, the 'small' model on the shipped King James "
      "Bible corpus.");
  cmd->add_option("run", args->run_path, "Run file (YAML, docs/formats/run-file.md)")
      ->type_name("RUN.yaml");
  cmd->add_option("--steps", args->steps, "Override train.steps")
      ->check(IntRange(1, spec::kMaxSteps))
      ->type_name("N");
  cmd->add_option("--metrics", args->metrics_path,
                  "Write per-step metrics as JSONL to FILE (docs/formats/metrics.md); with "
                  "--compare, each further run writes STEM.LABEL.jsonl beside it (m.jsonl: m.uniform.jsonl)")
      ->type_name("FILE");
  cmd->add_option("--threads", args->threads, "Override train.threads (CPU threads)")
      ->check(IntRange(1, spec::kMaxThreads))
      ->type_name("N");
  cmd->add_option("--micro-batches", args->micro_batches,
                  "Split each global batch into M equal micro-batches (same math, less memory)")
      ->check(IntRange(1, spec::kMaxTokensPerStep))
      ->type_name("M");
  cmd->add_option("--log-interval", args->log_interval,
                  "When the output is not a terminal: a progress line every N steps (default: "
                  "steps / 20); on a terminal one bar is redrawn every step")
      ->check(IntRange(1, spec::kMaxSteps))
      ->type_name("N");
  cmd->add_option("--report", args->report_path,
                  "Also write one self-contained HTML page: the plans (prediction, simulated "
                  "timeline, device map) and every run's loss, throughput and step time (metrics "
                  "go to REPORT-STEM.jsonl unless --metrics is given)")
      ->type_name("report.html");
  cmd->add_option("--plan", args->plan_path,
                  "Run this parallel plan (docs/formats/plan.md), or a baseline by name "
                  "(uniform, homogeneous, identical: as `motley plan --baseline` writes it): "
                  "every rank a thread, or one rank per process under mpiexec / srun")
      ->type_name("PLAN.json|BASELINE");
  cmd->add_flag("--auto-plan", args->auto_plan,
                "Plan the run's cluster first, as `motley plan RUN.yaml` does, and train under "
                "that plan (ranks as threads, or one per process under a launcher); with "
                "--resume, continue from the latest checkpoint on this cluster, e.g. after "
                "losing a device. Not with --plan");
  cmd->add_option("--trace", args->trace_path,
                  "With --plan: write a Chrome trace (Perfetto JSON) of every rank's actions")
      ->type_name("FILE");
  cmd->add_option("--trace-steps", args->trace_steps,
                  "Comma-separated steps to trace (default: step 1)")
      ->delimiter(',')
      ->check(IntRange(1, spec::kMaxSteps))
      ->type_name("STEP,...");
  cmd->add_option("--clock", args->clock,
                  "With --plan on an emulated cluster: 'virtual' (default: exact emulated time, "
                  "nothing sleeps) or 'wall' (each rank paced to its emulated time)")
      ->check(OneOf({"auto", "virtual", "wall"}))
      ->type_name("virtual|wall");
  cmd->add_option("--compare", args->compare_path,
                  "With --plan: then train the same job under this plan too, a file or a "
                  "baseline name (uniform, homogeneous, identical), and print both throughputs "
                  "side by side")
      ->type_name("PLAN2.json|BASELINE");
  cmd->add_option("--checkpoint-dir", args->checkpoint_dir,
                  "Override train.checkpoint.dir: save checkpoints there (every "
                  "train.checkpoint.every_steps steps, at the end and on SIGTERM or Ctrl-C; the "
                  "last train.checkpoint.keep_last kept). A fresh run refuses a folder that holds "
                  "checkpoints: pass --resume or --overwrite")
      ->type_name("DIR");
  cmd->add_flag("--resume", args->resume,
                "Continue from the latest complete checkpoint in train.checkpoint.dir, written "
                "under any plan or serially, at its step + 1 (metrics appended). Example: motley "
                "train run.yaml --steps 2000 --resume");
  cmd->add_flag("--overwrite", args->overwrite,
                "Start a fresh run in a checkpoint folder that holds checkpoints: delete the "
                "ones motley wrote there first");
  cmd->add_option("--init-from", args->init_from,
                  "Start from the weights of a checkpoint (folder or root) or a Hugging Face "
                  "folder (config.json + safetensors; F32/BF16/F16; tied embeddings untied) for "
                  "the run's model: a fresh optimizer, step 1. Example: motley train run.yaml "
                  "--init-from ./my-llama")
      ->type_name("DIR");
  cmd->add_flag("--replan", args->replan,
                "With --plan or --auto-plan (threads or mpiexec): detect slow devices and links "
                "from every rank's compute time, probe op and link traffic, re-plan in the "
                "background, and migrate to an adopted plan at a step boundary, e.g. `motley "
                "train examples/runs/emulated-8.yaml --auto-plan --inject "
                "examples/scenarios/slow-device.yaml --replan`");
  cmd->add_option("--inject", args->inject_path,
                  "With --plan on an emulated cluster: slow devices and links from given steps "
                  "(a scenario file, docs/formats/scenario.md), to rehearse stragglers")
      ->type_name("SCENARIO.yaml");
  cmd->add_option("--ranks", args->ranks,
                  "With --plan or --auto-plan, ranks as threads: the launch size, which must be "
                  "the cluster's device count (one rank per device; the default); under mpiexec "
                  "or srun the processes are the world")
      ->check(IntRange(1, spec::kMaxDevices))
      ->type_name("N");
  cmd->add_option("--profile", args->profile_path,
                  "With --replan: a measured profile (`motley profile`, docs/formats/profile.md) "
                  "whose times are the expected times of the device types it covers (other real "
                  "devices are judged against the median of their peers)")
      ->type_name("PROFILE.json");
  cmd->add_flag("--cuda-bf16", args->cuda_bf16,
                "With --plan: stages on devices of vendor cuda round matmul operands to bf16 "
                "(fp32 accumulation and master weights; docs/backend-cuda.md)");
  SetExamples(
      cmd,
      {
          "motley train examples/runs/tiny.yaml --steps 50 --metrics tiny.jsonl",
          "motley plan examples/runs/hetero-4.yaml -o plan.json && motley train "
          "examples/runs/hetero-4.yaml --plan plan.json --compare uniform --report run.html",
          "mpiexec -n 4 --oversubscribe motley train examples/runs/hetero-4.yaml --plan plan.json",
      });
  cmd->callback([args, cmd, &exit_code] { exit_code = RunTrain(*args, *cmd); });
}

}  // namespace motley::cli
