// See parallel_trainer.h. The entry points: the threads launch, the process launch (one rank per
// process under a launcher), and the plan checks. The parts live beside it: set-up
// (parallel_setup.cc), the rank loop (parallel_rank_loop.cc), the reports
// (parallel_step_report.cc), all over parallel_run_context.h.
#include "train/parallel_trainer.h"

#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/core.h>

#include "backend/cpu/cpu_backend.h"
#include "comm/local_world.h"
#include "train/parallel_run_context.h"
#include "train/plan_switch.h"
#include "train/trainer_checkpoint.h"

namespace motley::train {

using internal::Clock;
using internal::Prepared;
using internal::RunContext;

Result<ClockChoice> ParseClockChoice(const std::string& text) {
  if (text == "auto") return ClockChoice::kAuto;
  if (text == "virtual") return ClockChoice::kVirtual;
  if (text == "wall") return ClockChoice::kWall;
  return Err("--clock: '{}' is not one of auto, virtual, wall", text);
}

std::vector<int> ClusterWorld(const spec::ClusterSpec& cluster) {
  std::vector<int> devices(static_cast<size_t>(cluster.num_devices()));
  for (int d = 0; d < cluster.num_devices(); ++d) devices[static_cast<size_t>(d)] = d;
  return devices;
}

Status CheckPlanForRun(const spec::RunFile& run, const spec::Plan& plan) {
  MOTLEY_RETURN_IF_ERROR(spec::ValidatePlan(plan, run.cluster, run.model, run.train));
  return spec::CheckRuntimeRunsKernels(
      run.train, (run.path.empty() ? std::string("run") : run.path) + ": train");
}

Result<ParallelTrainSummary> TrainParallel(const spec::RunFile& run, const spec::Plan& plan,
                                           const ParallelTrainerOptions& options) {
  MOTLEY_ASSIGN_OR_RETURN(Prepared p, internal::Prepare(run, plan, options, /*rank0=*/true));
  MOTLEY_RETURN_IF_ERROR(internal::CheckStagesFit(run, *p.layout, /*all_ranks_here=*/true));
  RunContext& ctx = *p.ctx;
  std::shared_ptr<comm::LocalWorld> world = comm::LocalWorld::Create(p.layout->size());
  internal::PrintHeader(ctx, plan, "as threads");
  if (!ctx.start_note.empty() && options.out != nullptr) {
    fmt::print(options.out, "{}", ctx.start_note);
    std::fflush(options.out);
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
      comm::LinkTraffic traffic;
      comm::Emulation emulation;
      if (ctx.emulated) {
        emulation = comm::Emulation{ctx.links.get(), &clock, 1.0, &step,
                                    ctx.report_links ? &traffic : nullptr};
      }
      Result<std::unique_ptr<comm::Communicator>> comm =
          world->Connect(r, ctx.options->comm, emulation);
      Status s = comm.status();
      if (s.ok()) {
        s = internal::RunRank(ctx, r, **comm, ctx.emulated ? &clock : nullptr, &step, &traffic);
      }
      if (!s.ok()) {
        ctx.Record(r, s);
        world->Abort(fmt::format("rank {} failed: {}", r, s.message()));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (!ctx.first_error.ok()) return ctx.first_error;
  return internal::Finish(ctx);
}

Result<ParallelTrainSummary> TrainParallelProcess(const spec::RunFile& run, const spec::Plan& plan,
                                                  const ParallelTrainerOptions& options,
                                                  const ConnectWorld& connect) {
  // Every process checks the plan and reads the data; only rank 0 prepares the checkpoint folder
  // and writes the metrics file, so that happens once the rank is known.
  MOTLEY_ASSIGN_OR_RETURN(Prepared p, internal::Prepare(run, plan, options, /*rank0=*/false));
  RunContext& ctx = *p.ctx;
  ctx.origin = Clock::now();
  VirtualClock clock(ctx.clock_mode, ctx.origin);
  std::atomic<int64_t> step{ctx.first_step};
  comm::LinkTraffic traffic;
  comm::Emulation emulation;
  if (ctx.emulated) {
    emulation =
        comm::Emulation{ctx.links.get(), &clock, 1.0, &step, ctx.report_links ? &traffic : nullptr};
  }
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
    const Status s =
        options.world_devices.empty()
            ? Err(StatusCode::kInvalidArgument,
                  "{}: the plan uses {} devices but the launcher started {} processes (one "
                  "process per device: launch {})",
                  PlanName(plan), p.layout->size(), world->size(), p.layout->size())
            : Err(StatusCode::kInvalidArgument,
                  "the world is {} devices of cluster '{}' but the launcher started {} processes "
                  "(one process per device: launch {})",
                  p.layout->size(), run.cluster.name, world->size(), p.layout->size());
    world->Abort(s.message());
    return s;
  }
  ctx.summary_rank = r;
  ParallelTrainerOptions rank_options = options;
  if (r != 0) rank_options.out = nullptr;
  ctx.options = &rank_options;
  Status s;
  if (r == 0) {
    s = internal::PrepareRankZero(p, run, rank_options);
    internal::PrintHeader(ctx, plan, "as processes");
    if (!ctx.start_note.empty() && rank_options.out != nullptr) {
      fmt::print(rank_options.out, "{}", ctx.start_note);
      std::fflush(rank_options.out);
    }
  }
  backend::SetBlasThreads(1);  // one rank, one backend thread (like every rank of the threads launch)
  if (s.ok()) {
    s = internal::RunRank(ctx, r, *world, ctx.emulated ? &clock : nullptr, &step, &traffic);
  }
  if (!s.ok()) {
    const Status failed = s.WithContext(fmt::format("rank {}", r));
    world->Abort(fmt::format("rank {} failed: {}", r, s.message()));
    return failed;
  }
  return internal::Finish(ctx);
}

}  // namespace motley::train
