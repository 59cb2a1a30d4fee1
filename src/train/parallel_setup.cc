// Set-up of a parallel run (parallel_run_context.h): each rank's backend (CPU, CUDA or emulated,
// with its rate schedule), the emulation of the plan's devices and links, the shared Prepare step
// of both launches, and the header line.
#include <algorithm>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "backend/emulated/emulated_backend.h"
#include "parallel/migration.h"
#include "spec/model_flops.h"
#include "train/memory_check.h"
#include "train/parallel_run_context.h"
#include "train/plan_switch.h"
#include "train/trainer_checkpoint.h"
#if MOTLEY_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace motley::train::internal {
namespace {

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

// Emulation of the plan's devices: all of emulated types, or none (spec::ValidatePlan refused a
// plan mixing them before any rank starts).
Status SetUpEmulation(const spec::RunFile& run, const ParallelTrainerOptions& options,
                      RunContext& ctx) {
  const WorldLayout& layout = *ctx.layout;
  int emulated = 0;
  for (const RankInfo& info : layout.ranks()) {
    if (run.cluster.device_type_of(info.device).is_emulated()) ++emulated;
  }
  MOTLEY_CHECK(emulated == 0 || emulated == layout.size(),
               "a plan mixing emulated and real devices passed spec::ValidatePlan");
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

}  // namespace

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
  return backend.memory_status().WithContext(fmt::format("device {}", device));
}

Status CheckStagesFit(const spec::RunFile& run, const WorldLayout& layout, bool all_ranks_here) {
  const spec::Plan& plan = layout.plan();
  StageMemory host_sum;
  StageMemory host_max;
  for (const RankInfo& info : layout.ranks()) {
    if (info.idle()) continue;
    const spec::PipelinePlan& pipe = plan.pipelines[static_cast<size_t>(info.pipeline)];
    const int64_t batch = pipe.micro_batch_size;
    StageMemory need;  // every model chunk the rank holds
    for (int c = 0; c < pipe.chunks; ++c) {
      model::StageLayout stage = parallel::StageLayoutOf(layout, info.rank, c);
      // ZeRO-1 shards the moments of uniform groups (parallel/zero1.h): count none, a lower bound.
      stage.allocate_moments = plan.optimizer_sharding != spec::OptimizerSharding::kZero1;
      MOTLEY_ASSIGN_OR_RETURN(const StageMemory chunk,
                              StageMemoryAtLeast(run.model, stage, batch, run.train.seq_len));
      need.parameter_bytes += chunk.parameter_bytes;
      need.activation_bytes += chunk.activation_bytes;
    }
    const spec::DeviceType& type = run.cluster.device_type_of(info.device);
    MOTLEY_RETURN_IF_ERROR(CheckFits(
        fmt::format("device {} (type '{}', pipelines[{}].stages[{}], micro-batch {} x {})",
                    info.device, type.name, info.pipeline, info.stage, batch, run.train.seq_len),
        need, 0, type.memory_bytes));
    if (type.vendor == "cuda" && !type.is_emulated()) continue;  // its state lives on the GPU
    host_sum.parameter_bytes += need.parameter_bytes;
    host_sum.activation_bytes += need.activation_bytes;
    if (need.total() > host_max.total()) host_max = need;
  }
  return CheckFits(all_ranks_here
                       ? fmt::format("this host (the {} ranks as threads)", layout.size())
                       : std::string("this host (one rank of the plan)"),
                   all_ranks_here ? host_sum : host_max, 0, static_cast<double>(HostMemoryBytes()));
}

Result<Prepared> Prepare(const spec::RunFile& run, const spec::Plan& plan,
                         const ParallelTrainerOptions& options, bool rank0) {
  MOTLEY_RETURN_IF_ERROR(CheckPlanForRun(run, plan));
  Prepared p;
  for (int d : options.world_devices) {
    if (d < 0 || d >= run.cluster.num_devices()) {
      return Err(StatusCode::kInvalidArgument,
                 "world: device {} is not a device of cluster '{}' (0..{})", d, run.cluster.name,
                 run.cluster.num_devices() - 1);
    }
  }
  Result<WorldLayout> built = options.world_devices.empty()
                                  ? WorldLayout::Build(plan)
                                  : WorldLayout::Build(plan, options.world_devices);
  if (!built.ok()) return built.status().WithCode(StatusCode::kInvalidArgument);
  WorldLayout layout = std::move(built).value();
  p.layout = std::make_unique<WorldLayout>(std::move(layout));
  MOTLEY_RETURN_IF_ERROR(CheckStagesFit(run, *p.layout, /*all_ranks_here=*/false));
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
  ctx.flops_per_token = spec::ModelFlopsPerToken(run.model, train.seq_len);
  for (const RankInfo& info : p.layout->ranks()) {
    if (info.idle()) continue;  // MFU is over the devices the plan uses
    ctx.peak_flops += run.cluster.device_type_of(info.device).PeakFlops(spec::Precision::kFp32);
  }
  MOTLEY_RETURN_IF_ERROR(SetUpEmulation(run, options, ctx));
  ctx.report_links = ctx.emulated && options.straggler_reports;
  if (ctx.report_links) {
    ctx.gather_stride = sched::StepMetricsDoublesPerRank(true, p.layout->size());
  }
  if (!options.resume.empty() && !options.init_from.empty()) {
    return Err(StatusCode::kInvalidArgument,
               "--resume and --init-from exclude each other (resume continues a run with its "
               "optimizer state; init-from starts a new one from weights)");
  }
  if (!options.resume.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(ResumePoint point, ResolveResume(options.resume, run.model, train));
    ctx.start_from = point.reader;
    ctx.start_with_moments = true;
    ctx.resume_dir = point.dir;
    ctx.first_step = point.metadata.step + 1;
    ctx.metrics_resume = MetricsResume{point.metadata.step, point.dir};
    ctx.start_note = FormatResume(point);
  } else if (!options.init_from.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(CheckpointReader reader, OpenInitFrom(options.init_from, run.model));
    ctx.start_note = fmt::format("initialised from {} (weights only: a fresh optimizer, step 1)\n",
                                 reader.Describe());
    ctx.start_from = std::make_shared<const CheckpointReader>(std::move(reader));
  }
  // Every process checks the checkpoint folder; only rank 0 changes it (PrepareRankZero).
  MOTLEY_RETURN_IF_ERROR(PrepareCheckpointDir(
      train.checkpoint,
      ctx.metrics_resume ? std::optional<int64_t>(ctx.metrics_resume->step) : std::nullopt,
      options.overwrite, /*may_modify=*/false, nullptr));
  ctx.traces.resize(static_cast<size_t>(p.layout->size()));
  if (rank0) MOTLEY_RETURN_IF_ERROR(PrepareRankZero(p, run, options));
  return p;
}

Status PrepareRankZero(Prepared& p, const spec::RunFile& run,
                       const ParallelTrainerOptions& options) {
  RunContext& ctx = *p.ctx;
  const spec::TrainSpec& train = run.train;
  MOTLEY_RETURN_IF_ERROR(PrepareCheckpointDir(
      train.checkpoint,
      ctx.metrics_resume ? std::optional<int64_t>(ctx.metrics_resume->step) : std::nullopt,
      options.overwrite, /*may_modify=*/true, options.out));
  const std::string metrics_path =
      !options.metrics_path.empty() ? options.metrics_path : train.metrics_path;
  if (!metrics_path.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(MetricsWriter writer,
                            MetricsWriter::Open(metrics_path, ctx.metrics_resume));
    p.metrics = std::make_unique<MetricsWriter>(std::move(writer));
    ctx.metrics = p.metrics.get();
  }
  return Status::Ok();
}

void PrintHeader(const RunContext& ctx, const spec::Plan& plan, const char* launch) {
  const ParallelTrainerOptions& options = *ctx.options;
  if (options.out == nullptr) return;
  const spec::TrainSpec& train = ctx.run->train;
  const int idle = ctx.layout->size() - ctx.layout->active_size();
  fmt::print(options.out,
             "parallel run: plan {}, {} ranks {}{}, {} pipeline(s), global batch {} x {} tokens, "
             "{} steps, schedule {}, recompute {}, clock {}\n",
             PlanName(plan), ctx.layout->size(), launch,
             idle > 0 ? fmt::format(" ({} idle: out of the plan, probed)", idle) : std::string(),
             plan.pipelines.size(), ctx.layout->global_batch(), train.seq_len, train.steps,
             spec::PipelineScheduleName(plan.schedule), spec::RecomputeSummary(plan),
             ClockName(ctx));
  const unsigned cores = std::thread::hardware_concurrency();
  if (ctx.emulated && ctx.clock_mode == VirtualClock::Mode::kWall && cores > 0 &&
      static_cast<unsigned>(ctx.layout->size()) > cores) {
    fmt::print(options.out,
               "note: {} busy ranks on {} cores: wall-clock timings are distorted when the host "
               "cannot keep up with the emulated speeds\n",
               ctx.layout->size(), cores);
  }
}

}  // namespace motley::train::internal
