// The rank loop of the parallel trainer (parallel_run_context.h): one rank's steps, its idle-rank
// probe, the plan-switch decision at step boundaries, and the checkpoints it takes part in.
#include <algorithm>
#include <csignal>
#include <optional>
#include <span>

#include "backend/emulated/emulated_backend.h"
#include "spec/op_costs.h"
#include "train/batch_sampler.h"
#include "train/parallel_checkpoint.h"
#include "train/parallel_liveness.h"
#include "train/parallel_run_context.h"
#include "train/plan_switch.h"
#include "train/staged_communicator.h"
#include "train/trainer_checkpoint.h"

namespace motley::train::internal {
namespace {

// The probe op (docs/architecture.md §9): a rank the plan leaves out runs it every step, so that
// its device is still measured and its recovery seen; with Options::straggler_reports every rank on
// a real device runs it too, so that an idle device has peers of its type to be judged against.
// One (N x C) @ (C x C)^T matmul, timed on the rank's clock: N=16, C=128 on an emulated backend
// (its emulated profile gives the expected time at nominal speed; kept small because it advances
// the rank's emulated clock), N=64, C=256 on a real one (about 8 MFLOP, well above the timer's
// resolution; expected time 0: the coordinator compares it with its peers').
class ProbeOp {
 public:
  Probe Run(tensor::Backend& backend, const parallel::RankClock& clock) {
    auto* emulated = dynamic_cast<backend::EmulatedBackend*>(&backend);
    const int64_t n = emulated != nullptr ? 16 : 64;
    const int64_t c = emulated != nullptr ? 128 : 256;
    if (!out_.defined()) {
      out_ = backend.Zeros(tensor::Shape{n, c}, tensor::DType::kF32);
      inp_ = backend.Zeros(tensor::Shape{n, c}, tensor::DType::kF32);
      weight_ = backend.Zeros(tensor::Shape{c, c}, tensor::DType::kF32);
    }
    const Seconds start = clock.Now();
    backend.MatmulForward(out_, inp_, weight_);
    backend.Synchronize();
    Probe p;
    p.measured_s = clock.Since(start);
    if (emulated != nullptr) {
      const spec::costs::OpCost cost = spec::costs::MatmulForward(n, c, c);
      const spec::EmulatedProfile& nominal = *emulated->device_type().emulated;
      p.expected_s =
          std::max(cost.flops / nominal.flops_per_s, cost.bytes / nominal.memory_bandwidth);
    }
    return p;
  }

 private:
  tensor::Tensor out_, inp_, weight_;
};

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
      const double* v = all.data<double>() + static_cast<size_t>(info.rank * ctx.gather_stride);
      StepReport::Rank e;
      e.rank = info.rank;
      e.device = info.device;
      e.idle = info.idle();
      e.times = StageTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
      e.probe_s = v[kProbeField];
      e.probe_expected_s = v[kProbeExpectedField];
      if (ctx.report_links) {
        const int n = layout.size();
        const double* l = v + kStepFields;
        for (int q = 0; q < n; ++q) {
          if (l[q] <= 0.0 && l[n + q] <= 0.0) continue;
          e.links.push_back(StepReport::Rank::Link{q, layout.rank(q).device, l[q],
                                                   static_cast<int64_t>(l[n + q]), l[2 * n + q]});
        }
      }
      report.ranks.push_back(std::move(e));
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

// The validation loss (the serial loop's: the mean token loss over train.val_batches fixed global
// batches of the validation split), this rank taking its pipeline's samples of each batch.
Result<double> Validate(const RunContext& ctx, parallel::ParallelRank& rank,
                        const SampleRange& samples, int64_t T) {
  const spec::TrainSpec& train = ctx.run->train;
  const int64_t global_batch = ctx.layout->global_batch();
  const auto num_val = static_cast<int64_t>(ctx.data->val.size());
  std::vector<int32_t> inputs(static_cast<size_t>(samples.count * T));
  std::vector<int32_t> targets(static_cast<size_t>(samples.count * T));
  double sum = 0.0;
  for (int64_t b = 0; b < train.val_batches; ++b) {
    if (samples.count > 0) {
      const std::vector<int64_t> offsets =
          ValidationBatchOffsets(b, train.val_batches, global_batch, T, num_val);
      const std::span<const int64_t> mine(offsets.data() + samples.begin,
                                          static_cast<size_t>(samples.count));
      GatherSamples(ctx.data->val, mine, T, inputs, targets);
    }
    MOTLEY_ASSIGN_OR_RETURN(const double loss_sum, rank.Evaluate(inputs, targets));
    sum += loss_sum;
  }
  return sum / static_cast<double>(train.val_batches * global_batch * T);
}

}  // namespace

Status RunRank(RunContext& ctx, int r, comm::Communicator& host_world, VirtualClock* clock,
               std::atomic<int64_t>* step_counter, comm::LinkTraffic* traffic) {
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
  // Ranks on real devices probe every step while a straggler loop listens (their peers' probes
  // are an idle device's reference); every idle rank probes.
  const bool probe_always = emulated == nullptr && options.straggler_reports;
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
  const int64_t stride = ctx.gather_stride;
  tensor::Tensor mine = tensor::HostTensor(tensor::Shape{stride}, tensor::DType::kF64);
  tensor::Tensor all = tensor::HostTensor(tensor::Shape{stride * world_size}, tensor::DType::kF64);
  const std::vector<int64_t> counts(static_cast<size_t>(world_size), stride);
  std::vector<TraceEvent>& trace = ctx.traces[static_cast<size_t>(r)];
  // Checked against the model by Prepare; an idle rank holds no stage.
  if (model::ParameterSet* params = state.rank->params();
      ctx.start_from != nullptr && params != nullptr) {
    MOTLEY_RETURN_IF_ERROR(ctx.start_from->LoadIntoStage(*backend, *params, ctx.start_with_moments)
                               .WithContext(ctx.start_with_moments ? "--resume" : "--init-from"));
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

  if (ctx.report_links) traffic->Reset(world_size);  // count from the first step on
  ProbeOp probe_op;
  // What this rank holds, for the survivors should a rank be lost (parallel_liveness.h).
  HeldState held;
  held.completed_step = ctx.first_step - 1;
  held.last_checkpoint = ctx.resume_dir;
  held.last_checkpoint_step = ctx.resume_dir.empty() ? 0 : ctx.first_step - 1;
  auto run_steps = [&]() -> Status {
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
      held.completed_step = step;  // its optimizer update is applied
      MOTLEY_RETURN_IF_ERROR(
          MemoryStatus(*backend, device).WithContext(fmt::format("step {}", step)));
      if (r == options.sigterm_rank && ctx.stop_enabled && step == options.sigterm_at_step) {
        std::raise(options.test_signal);
      }
      const Seconds end_s = rank_clock.Now();
      Probe probe;  // after the step's end: the probe is not part of the step
      if (state.rank->idle() || probe_always) probe = probe_op.Run(*backend, rank_clock);
      PackTimes(result.times, result.skipped, start_s, end_s, ctx.stop_enabled && StopRequested(),
                probe, mine.data<double>());
      if (ctx.report_links) {  // the traffic since the previous step's report
        PackLinks(*traffic, world_size, mine.data<double>() + kStepFields);
        traffic->Reset(world_size);
      }
      MOTLEY_RETURN_IF_ERROR(world.AllGather(all, mine, counts).WithContext("step metrics"));
      const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
      bool stopping = false;  // any rank saw the stop request: all stop at this step
      for (int q = 0; q < world_size; ++q) {
        const size_t field = static_cast<size_t>(q * stride + kStopField);
        stopping = stopping || all.data<double>()[field] != 0.0;
      }

      // Validation after the update, under the plan the step ran under (before any switch).
      std::optional<double> val_loss;
      if (train.val_every > 0 && train.val_batches > 0 &&
          (step % train.val_every == 0 || step == train.steps)) {
        MOTLEY_ASSIGN_OR_RETURN(val_loss, Validate(ctx, *state.rank, samples, T));
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
          held.whole = false;
          MOTLEY_ASSIGN_OR_RETURN(
              SwitchOutcome outcome,
              SwitchPlan(*ctx.run, r, world, *backend, switch_options, step, state, *next));
          switched = std::move(outcome);
          held.whole = true;
          MOTLEY_RETURN_IF_ERROR(MemoryStatus(*backend, device)
                                     .WithContext(fmt::format("plan switch after step {}", step)));
          samples = SamplesOf(*state.layout, r);
          inputs.assign(static_cast<size_t>(samples.count * T), 0);
          targets.assign(static_cast<size_t>(samples.count * T), 0);
        }
      }
      if (r == ctx.summary_rank) {
        MOTLEY_RETURN_IF_ERROR(ReportStep(ctx, r, switched ? *switched->old : *state.layout, step,
                                          wall_s, result, all, val_loss,
                                          switched ? &switched->record : nullptr));
      }
      if (ctx.save_checkpoints && CheckpointDue(train.checkpoint, step, train.steps, stopping)) {
        MOTLEY_ASSIGN_OR_RETURN(std::string dir,
                                SaveParallelCheckpoint(world, *state.layout, *state.rank, *backend,
                                                       ctx.run->model, train, step));
        if (r == ctx.summary_rank) ctx.summary.last_checkpoint = dir;
        held.last_checkpoint = dir;
        held.last_checkpoint_step = step;
        if (r == 0) Note(ctx, fmt::format("step {}: checkpoint {}", step, dir));
      }
      if (stopping) {
        if (r == ctx.summary_rank) {
          ctx.summary.stopped = true;
          // The signal this process saw; another process's when the stop came from a peer.
          ctx.summary.stop_signal = StopRequested() ? StopSignalName() : "a peer's signal";
        }
        if (r == 0 && options.out != nullptr) {
          fmt::print(options.out, "step {}: {}: stopped after saving\n", step,
                     StopRequested() ? StopSignalName() : "signal to another rank");
          std::fflush(options.out);
        }
        break;
      }
    }
    return Status::Ok();
  };
  const Status ran = run_steps();
  if (ran.ok()) return ran;
  // A lost peer (the failure itself may have come from a survivor's wait): the survivors save
  // what they can. Any other failure comes back unchanged.
  held.layout = state.layout.get();
  held.rank = state.rank.get();
  held.backend = backend.get();
  return AfterPeerLost(ctx, host_world, ran, held);
}

}  // namespace motley::train::internal
