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
// trains the same job under a second plan and prints both throughputs side by side.
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
#include <vector>

#include <fmt/core.h>

#include "cli/commands.h"
#include "cli/fail.h"
#include "cli/offline.h"
#include "comm/communicator.h"
#if defined(MOTLEY_HAVE_MPI)
#include "comm/mpi_world.h"
#endif
#include "spec/plan.h"
#include "spec/run_file.h"
#include "elastic/elastic_run.h"
#include "straggler/scenario.h"
#include "train/parallel_trainer.h"
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
  bool replan = false;
  std::string inject_path;
  bool cuda_bf16 = false;
  bool auto_plan = false;
  int ranks = 0;  // --ranks: 0 = one per device of the cluster
  std::string profile_path;
};

constexpr const char* kAutoPlanLabel = "auto-plan";

// `--auto-plan`: the plan `motley plan RUN.yaml` chooses for the run's cluster, named
// "auto-plan". Under a launcher every process plans (the planner is deterministic, so all get
// the same plan) and only rank 0 prints.
Result<spec::Plan> AutoPlan(const spec::RunFile& run, bool print) {
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<Offline> offline, LoadOffline(run, "", {}));
  MOTLEY_ASSIGN_OR_RETURN(plan::PlanReport report,
                          PlanOffline(*offline, /*baselines=*/false, /*rank_top=*/1,
                                      /*quiet=*/true));
  spec::Plan plan = report.best.plan;
  plan.source = kAutoPlanLabel;
  if (print) {
    fmt::print("motley train: auto-plan for cluster '{}' ({} devices): {}; predicted {:.1f} "
               "tokens/s\n",
               run.cluster.name, run.cluster.num_devices(), report.best.description,
               report.best.TokensPerSecond(report.tokens_per_step));
    std::fflush(stdout);
  }
  return plan;
}

// The --resume source: train.checkpoint.dir (after --checkpoint-dir), or an error.
Result<std::string> ResumeSource(const TrainArgs& args, const spec::TrainSpec& train) {
  if (!args.resume) return std::string();
  if (train.checkpoint.dir.empty()) {
    return Err("--resume: the run has no train.checkpoint.dir; set it or pass --checkpoint-dir");
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

// `motley train RUN.yaml --plan PLAN.json [--compare PLAN2.json]`: each plan is checked before
// any rank starts.
int RunParallelTrain(const TrainArgs& args, const CLI::App& cmd, const spec::RunFile& run,
                     const std::string& source) {
  if (cmd.count("--micro-batches") > 0) {
    fmt::print(stderr, "motley train: --micro-batches does not apply with --plan (the plan sets "
                       "each pipeline's micro-batches)\n");
    return 1;
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
  std::vector<std::string> paths = {args.plan_path};
  if (!args.compare_path.empty()) paths.push_back(args.compare_path);
  std::vector<spec::Plan> plans;
  for (const std::string& path : paths) {
    Result<spec::Plan> plan = args.auto_plan && path.empty()
                                  ? AutoPlan(run, /*print=*/launcher_rank <= 0)
                                  : spec::LoadPlan(path);
    if (!plan.ok()) {
      return FailOnce(launch, plan.status());
    }
    const Status checked = train::CheckPlanForRun(run, *plan);
    if (!checked.ok()) {
      return FailOnce(launch, checked.WithContext(source));
    }
    plans.push_back(std::move(*plan));
  }
  if (args.auto_plan) paths.front() = kAutoPlanLabel;
  if (launcher_rank >= 0 && plans.size() > 1) {
    fmt::print(stderr, "motley train: --compare is not supported under a launcher\n");
    return 1;
  }
  train::ParallelTrainerOptions options;
  options.world_devices = train::ClusterWorld(run.cluster);  // one rank per device
  Result<std::string> resume = ResumeSource(args, run.train);
  if (!resume.ok()) {
    return Fail("train", resume.status());
  }
  options.resume = *resume;
  options.trace_path = args.trace_path;
  options.trace_steps = args.trace_steps;
  options.clock = *clock;
  options.cuda_bf16 = args.cuda_bf16;
  if (launcher_rank > 0) options.out = nullptr;
  if (!args.inject_path.empty()) {
    Result<straggler::Scenario> scenario = straggler::LoadScenario(args.inject_path, run.cluster);
    if (!scenario.ok()) {
      return Fail("train", scenario.status().WithContext("--inject"));
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
  std::vector<train::ParallelTrainSummary> summaries;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (options.out != nullptr) {
      fmt::print("motley train: {} with plan {}\n", source, paths[i]);
      std::fflush(stdout);
    }
    spec::RunFile this_run = run;
    if (i > 0) {  // the comparison run writes no trace, no checkpoints, and no metrics over the
                  // first run's
      options.trace_path.clear();
      options.metrics_path = run.train.metrics_path.empty() ? "" : run.train.metrics_path + ".compare";
      this_run.train.checkpoint.dir.clear();
    }
    auto summary = launcher_rank >= 0
                       ? TrainUnderLauncher(this_run, plans[i], options, launcher_rank, source)
                       : train::TrainParallel(this_run, plans[i], options);
    if (!summary.ok()) {
      return Fail("train", summary.status().WithContext(source));
    }
    summaries.push_back(std::move(*summary));
  }
  if (options.out == nullptr) return 0;
  if (summaries.size() > 1) {
    fmt::print("\nthe same job under both plans (tokens/s on each run's clock):\n{}",
               train::FormatPlanComparison(paths, summaries));
  }
  if (!run.train.metrics_path.empty()) fmt::print("metrics: {}\n", run.train.metrics_path);
  if (!args.trace_path.empty()) fmt::print("trace: {}\n", args.trace_path);
  return 0;
}

int RunTrain(const TrainArgs& args, const CLI::App& cmd) {
  Result<spec::RunFile> run = args.run_path.empty() ? Result<spec::RunFile>(spec::DefaultRunFile())
                                                    : spec::LoadRunFile(args.run_path);
  if (!run.ok()) {
    return Fail("train", run.status());
  }
  spec::TrainSpec& train = run->train;
  if (cmd.count("--steps") > 0) train.steps = args.steps;
  if (cmd.count("--metrics") > 0) train.metrics_path = args.metrics_path;
  if (cmd.count("--threads") > 0) train.threads = args.threads;
  if (cmd.count("--checkpoint-dir") > 0) train.checkpoint.dir = args.checkpoint_dir;
  const std::string source = args.run_path.empty() ? "default run" : args.run_path;
  if (args.auto_plan && !args.plan_path.empty()) {
    fmt::print(stderr, "motley train: --auto-plan and --plan exclude each other (--auto-plan "
                       "chooses the plan)\n");
    return 1;
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
      fmt::print(stderr,
                 "motley train: {} needs --plan or --auto-plan (it applies to parallel runs "
                 "only)\n",
                 option);
      return 1;
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
  Result<std::string> resume = ResumeSource(args, train);
  if (!resume.ok()) {
    return Fail("train", resume.status());
  }
  options.resume = *resume;
  auto summary = train::Train(run->model, train, options);
  if (!summary.ok()) {
    return Fail("train", summary.status().WithContext(source));
  }
  if (!train.metrics_path.empty()) fmt::print("metrics: {}\n", train.metrics_path);
  if (!summary->last_checkpoint.empty()) fmt::print("checkpoint: {}\n", summary->last_checkpoint);
  if (summary->stopped) fmt::print("stopped on SIGTERM after saving\n");
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
  cmd->add_option("--steps", args->steps, "Override train.steps")->check(CLI::PositiveNumber);
  cmd->add_option("--metrics", args->metrics_path,
                  "Write per-step metrics as JSONL to FILE (docs/formats/metrics.md)");
  cmd->add_option("--threads", args->threads, "Override train.threads (CPU threads)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--micro-batches", args->micro_batches,
                  "Split each global batch into M equal micro-batches (same math, less memory)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--plan", args->plan_path,
                  "Run this parallel plan (docs/formats/plan.md): every rank a thread, or one "
                  "rank per process under mpiexec / srun")
      ->type_name("PLAN.json");
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
      ->type_name("STEP,...");
  cmd->add_option("--clock", args->clock,
                  "With --plan on an emulated cluster: 'virtual' (default: exact emulated time, "
                  "nothing sleeps) or 'wall' (each rank paced to its emulated time)")
      ->check(CLI::IsMember({"auto", "virtual", "wall"}))
      ->type_name("virtual|wall");
  cmd->add_option("--compare", args->compare_path,
                  "With --plan: then train the same job under this plan too (e.g. the uniform "
                  "split) and print both throughputs side by side")
      ->type_name("PLAN2.json");
  cmd->add_option("--checkpoint-dir", args->checkpoint_dir,
                  "Override train.checkpoint.dir: save checkpoints there (every "
                  "train.checkpoint.every_steps steps, at the end and on SIGTERM; the last "
                  "train.checkpoint.keep_last kept)")
      ->type_name("DIR");
  cmd->add_flag("--resume", args->resume,
                "Continue from the latest complete checkpoint in train.checkpoint.dir, written "
                "under any plan or serially, at its step + 1");
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
      ->check(CLI::PositiveNumber)
      ->type_name("N");
  cmd->add_option("--profile", args->profile_path,
                  "With --replan: a measured profile (`motley profile`, docs/formats/profile.md) "
                  "whose times are the expected times of the device types it covers (other real "
                  "devices are judged against the median of their peers)")
      ->type_name("PROFILE.json");
  cmd->add_flag("--cuda-bf16", args->cuda_bf16,
                "With --plan: stages on devices of vendor cuda round matmul operands to bf16 "
                "(fp32 accumulation and master weights; docs/backend-cuda.md)");
  cmd->callback([args, cmd, &exit_code] { exit_code = RunTrain(*args, *cmd); });
}

}  // namespace motley::cli
