// See parallel_rank.h.
#include "parallel/parallel_rank.h"

#include <cmath>
#include <limits>

#include <fmt/core.h>

#include "parallel/migration.h"
#include "sched/step_messages.h"

namespace motley::parallel {

Result<std::unique_ptr<ParallelRank>> ParallelRank::Create(
    const WorldLayout& layout, int rank, const spec::ModelSpec& model,
    const spec::TrainSpec& train, tensor::Backend& backend, comm::Communicator& world,
    const ParallelRankOptions& options) {
  if (world.size() != layout.size() || world.rank() != rank) {
    return Err("parallel: the plan needs {} ranks, the communicator has {} (rank {} vs {})",
               layout.size(), world.size(), world.rank(), rank);
  }
  std::unique_ptr<ParallelRank> r(new ParallelRank(layout, rank, train, backend, world, options));
  const bool zero1 = layout.plan().optimizer_sharding == spec::OptimizerSharding::kZero1;
  const RankInfo& me = r->info_;
  // The step's gradient groups and ZeRO-1 shards (sched/step_program.h), over this world.
  sched::StepProgramOptions program_options;
  program_options.world_devices = layout.devices();
  MOTLEY_ASSIGN_OR_RETURN(const sched::StepProgram program,
                          sched::BuildStepProgram(layout.plan(), model, train.seq_len,
                                                    program_options));

  // TP group: one color per (pipeline, stage) with more than one device.
  int color = comm::kUndefinedColor;
  if (!me.idle() && me.tp_degree > 1) color = layout.stage_ranks(me.pipeline, me.stage).front();
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> tp_comm,
                          world.Split(color, me.tp_rank));
  if (tp_comm != nullptr) {
    r->tp_ = std::make_unique<CommTpGroup>(std::move(tp_comm), options.clock);
  }
  if (me.idle()) {
    // No stage; the gradient groups' splits are still collective over the world.
    model::ParameterSet none;
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<GradientSync> sync,
                            GradientSync::Create(layout, rank, model, program, world, backend,
                                                 none, options.clock));
    return r;
  }
  // One Stage per model chunk (virtual stage chunk * p + group, spec::PipelinePlan).
  const spec::PipelinePlan& pipe = layout.pipeline_of(rank);
  std::vector<model::ParameterSet*> chunk_params;
  std::vector<model::Stage*> chunk_stages;
  for (int c = 0; c < pipe.chunks; ++c) {
    const std::string where =
        fmt::format("pipelines[{}].stages[{}]", me.pipeline, pipe.virtual_stage(me.stage, c));
    model::StageLayout stage_layout = StageLayoutOf(layout, rank, c);
    stage_layout.allocate_moments = !zero1;  // ZeRO-1: allocated below, only where replicated
    auto stage = model::Stage::Create(backend, model, stage_layout, pipe.micro_batch_size,
                                      train.seq_len, train.seed, r->tp_.get());
    if (!stage.ok()) return stage.status().WithContext(where);
    r->chunks_.push_back(std::move(*stage));
    chunk_params.push_back(&r->chunks_.back()->params());
    chunk_stages.push_back(r->chunks_.back().get());
  }
  r->params_ = model::ParameterSet::Aliasing(chunk_params);
  r->optimizer_ =
      std::make_unique<model::Optimizer>(backend, r->params_, train.optimizer, train.steps);
  MOTLEY_ASSIGN_OR_RETURN(r->grad_sync_, GradientSync::Create(layout, rank, model, program, world,
                                                              backend, r->params_, options.clock));
  if (zero1) {
    // Moments for the tensors the Optimizer still updates (mixed-TP groups, layers this rank holds
    // alone); the ZeRO-1 layers keep theirs sharded.
    const std::vector<bool> sharded = r->grad_sync_->sharded_params();
    model::ParameterSet& params = r->params_;
    for (size_t i = 0; i < params.size(); ++i) {
      if (sharded[i]) continue;
      params[i].m = backend.Zeros(params[i].value.shape(), tensor::DType::kF32);
      params[i].v = backend.Zeros(params[i].value.shape(), tensor::DType::kF32);
    }
    r->optimizer_->SetExternallyUpdated(sharded);
  }
  // The rank's action list from the step program, then the step's DP sync and optimizer (the
  // executor's hooks run the program's collectives through grad_sync_).
  const sched::RankStep& step = program.ranks[static_cast<size_t>(rank)];
  std::vector<sched::Action> actions = step.actions;
  actions.push_back(sched::Action{sched::ActionKind::kDpSync, -1});
  actions.push_back(sched::Action{sched::ActionKind::kOptimizerStep, -1});
  r->executor_ = std::make_unique<StageExecutor>(step, pipe, std::move(chunk_stages), world,
                                                 r->tp_.get(), std::move(actions), options.clock);
  return r;
}

Result<RankStepResult> ParallelRank::Step(int64_t step, std::span<const int32_t> inputs,
                                          std::span<const int32_t> targets,
                                          std::vector<TraceEvent>* trace) {
  const Seconds start = options_.clock.Now();
  RankStepResult result;
  if (idle()) {
    // Joins the world all-reduce of (loss sum, squared-norm share) with zeros.
    tensor::Tensor sums =
        tensor::HostTensor(tensor::Shape{sched::kLossNormDoubles}, tensor::DType::kF64);
    sums.data<double>()[0] = 0.0;
    sums.data<double>()[1] = 0.0;
    MOTLEY_RETURN_IF_ERROR(world_.AllReduce(sums, comm::ReduceOp::kSum)
                               .WithContext(fmt::format("step {}: loss and norm (idle)", step)));
    const double tokens = static_cast<double>(layout_.global_batch() * train_.seq_len);
    result.loss = sums.data<double>()[0] / tokens;
    result.grad_norm = std::sqrt(sums.data<double>()[1]);
    result.lr = model::LearningRate(train_.optimizer, step, train_.steps);
    result.skipped = !std::isfinite(result.loss) || !std::isfinite(sums.data<double>()[1]);
    result.times.step_s = options_.clock.Since(start);
    return result;
  }
  optimizer_->ZeroGrads();
  const double tokens = static_cast<double>(layout_.global_batch() * train_.seq_len);
  const float loss_scale = static_cast<float>(1.0 / tokens);
  const bool reports_loss =
      info_.stage + 1 == layout_.pipeline_of(info_.rank).num_stages() && info_.tp_rank == 0;
  const double dp_before = grad_sync_->comm_seconds();
  const double tp_before = tp_ != nullptr ? tp_->comm_seconds() : 0.0;

  StageExecutor::Hooks hooks;
  hooks.dp_sync = [&]() -> Status {
    if (options_.poison_gradient_step == step && params_.size() > 0) {
      tensor::Tensor& g = params_[0].grad;
      const float nan = std::numeric_limits<float>::quiet_NaN();
      backend_.CopyFromHost(g, std::vector<float>(static_cast<size_t>(g.numel()), nan).data(),
                            g.bytes());
    }
    return grad_sync_->Reduce();
  };
  hooks.optimizer_step = [&]() -> Status {
    tensor::Tensor sums =
        tensor::HostTensor(tensor::Shape{sched::kLossNormDoubles}, tensor::DType::kF64);
    sums.data<double>()[0] = reports_loss ? executor_->running_loss_sum() : 0.0;
    sums.data<double>()[1] = grad_sync_->NormContribution();
    MOTLEY_RETURN_IF_ERROR(world_.AllReduce(sums, comm::ReduceOp::kSum)
                               .WithContext(fmt::format("step {}: loss and norm", step)));
    result.loss = sums.data<double>()[0] / tokens;
    const double grad_sq = sums.data<double>()[1];
    result.grad_norm = std::sqrt(grad_sq);
    result.lr = model::LearningRate(train_.optimizer, step, train_.steps);
    if (!std::isfinite(result.loss) || !std::isfinite(grad_sq)) {
      result.skipped = true;
      return Status::Ok();
    }
    const float clip = model::ClipScale(grad_sq, train_.optimizer.grad_clip);
    result.lr = optimizer_->Step(step, clip);
    MOTLEY_RETURN_IF_ERROR(grad_sync_->StepSharded(optimizer_->StepParams(step, clip),
                                                   train_.optimizer.weight_decay));
    return Status::Ok();
  };
  auto run = executor_->Run(inputs, targets, loss_scale, hooks, result.times, trace);
  if (!run.ok()) {
    return run.status().WithContext(fmt::format("step {}: pipelines[{}].stages[{}] tp_rank {}",
                                                step, info_.pipeline, info_.stage, info_.tp_rank));
  }
  result.times.dp_sync_s = grad_sync_->comm_seconds() - dp_before;
  if (tp_ != nullptr) result.times.tp_comm_s = tp_->comm_seconds() - tp_before;
  result.times.step_s = options_.clock.Since(start);
  return result;
}

Result<double> ParallelRank::Evaluate(std::span<const int32_t> inputs,
                                      std::span<const int32_t> targets) {
  double mine = 0.0;
  if (!idle()) {
    StageTimes times;  // validation is not part of the step's times
    auto run = executor_->Evaluate(inputs, targets, times);
    if (!run.ok()) {
      return run.status().WithContext(fmt::format("validation: pipelines[{}].stages[{}] tp_rank {}",
                                                  info_.pipeline, info_.stage, info_.tp_rank));
    }
    const bool reports_loss =
        info_.stage + 1 == layout_.pipeline_of(info_.rank).num_stages() && info_.tp_rank == 0;
    if (reports_loss) mine = *run;
  }
  tensor::Tensor sum = tensor::HostTensor(tensor::Shape{1}, tensor::DType::kF64);
  sum.data<double>()[0] = mine;
  MOTLEY_RETURN_IF_ERROR(
      world_.AllReduce(sum, comm::ReduceOp::kSum).WithContext("validation loss"));
  return sum.data<double>()[0];
}

Status ParallelRank::GatherOptimizerState() {
  if (grad_sync_ == nullptr) return Status::Ok();
  return grad_sync_->GatherMoments();
}

}  // namespace motley::parallel
