// See stage_executor.h.
#include "parallel/stage_executor.h"

#include <fmt/core.h>

namespace motley::parallel {

using sched::Action;
using sched::ActionKind;
using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

StageExecutor::StageExecutor(const WorldLayout& layout, int rank, model::Stage& stage,
                             comm::Communicator& world, const CommTpGroup* tp,
                             std::vector<Action> actions, int64_t seq_len, RankClock clock)
    : layout_(layout),
      rank_(rank),
      stage_(stage),
      world_(world),
      tp_(tp),
      clock_(clock),
      actions_(std::move(actions)),
      b_(layout.pipeline_of(rank).micro_batch_size),
      t_(seq_len),
      first_(layout.rank(rank).stage == 0),
      last_(layout.rank(rank).stage + 1 == layout.pipeline_of(rank).num_stages()),
      forward_source_(layout.ForwardSource(rank)),
      forward_destinations_(layout.ForwardDestinations(rank)),
      backward_source_(layout.BackwardSource(rank)),
      backward_destinations_(layout.BackwardDestinations(rank)) {
  tensor::Backend& backend = stage_.backend();
  if (first_) tokens_ = backend.Empty(Shape{b_, t_}, DType::kI32);
  if (last_) targets_ = backend.Empty(Shape{b_, t_}, DType::kI32);
}

Tensor StageExecutor::TakeBuffer() {
  if (!free_.empty()) {
    Tensor t = std::move(free_.back());
    free_.pop_back();
    return t;
  }
  return stage_.backend().Empty(Shape{b_, t_, stage_.model().hidden}, DType::kF32);
}

Status StageExecutor::RunBatch(const std::vector<Action>& actions, size_t begin, size_t end,
                               StageTimes& times) {
  const Seconds start = clock_.Now();
  std::vector<comm::Request> requests;
  auto post = [&](Result<comm::Request> r, const Action& a) -> Status {
    if (!r.ok()) {
      return r.status().WithContext(
          fmt::format("rank {} action {}", rank_, sched::ActionToString(a)));
    }
    requests.push_back(std::move(*r));
    return Status::Ok();
  };
  for (size_t i = begin; i < end; ++i) {
    const Action& a = actions[i];
    const int64_t k = a.micro_batch;
    switch (a.kind) {
      case ActionKind::kSendForward: {
        auto it = outputs_.find(k);
        MOTLEY_CHECK(it != outputs_.end(), "SendForward of a micro-batch not forwarded");
        for (int dst : forward_destinations_) {
          MOTLEY_RETURN_IF_ERROR(post(world_.ISend(it->second, dst, PipelineTag(k, false)), a));
        }
        break;
      }
      case ActionKind::kRecvForward: {
        Tensor& buf = received_act_[k] = TakeBuffer();
        MOTLEY_RETURN_IF_ERROR(post(world_.IRecv(buf, forward_source_, PipelineTag(k, false)), a));
        break;
      }
      case ActionKind::kSendBackward: {
        auto it = input_grads_.find(k);
        MOTLEY_CHECK(it != input_grads_.end(), "SendBackward of a micro-batch not backwarded");
        for (int dst : backward_destinations_) {
          MOTLEY_RETURN_IF_ERROR(post(world_.ISend(it->second, dst, PipelineTag(k, true)), a));
        }
        break;
      }
      case ActionKind::kRecvBackward: {
        Tensor& buf = received_grad_[k] = TakeBuffer();
        MOTLEY_RETURN_IF_ERROR(post(world_.IRecv(buf, backward_source_, PipelineTag(k, true)), a));
        break;
      }
      default:
        MOTLEY_CHECK(false, "not a communication action");
    }
  }
  for (comm::Request& r : requests) {
    MOTLEY_RETURN_IF_ERROR(world_.Wait(r).WithContext(
        fmt::format("rank {} pipeline transfers at action {}", rank_, begin)));
  }
  // Sent tensors are no longer needed once their batch completed.
  for (size_t i = begin; i < end; ++i) {
    const Action& a = actions[i];
    if (a.kind != ActionKind::kSendBackward) continue;
    auto it = input_grads_.find(a.micro_batch);
    GiveBack(std::move(it->second));
    input_grads_.erase(it);
  }
  times.p2p_s += clock_.Since(start);
  return Status::Ok();
}

Status StageExecutor::CheckInputSizes(std::span<const int32_t> inputs,
                                      std::span<const int32_t> targets) const {
  const auto mb_tokens = static_cast<size_t>(b_ * t_);
  const int64_t m = layout_.pipeline_of(rank_).micro_batches;
  if (first_ && inputs.size() != static_cast<size_t>(m) * mb_tokens) {
    return Err("rank {}: first stage needs {} input tokens, got {}", rank_,
               static_cast<size_t>(m) * mb_tokens, inputs.size());
  }
  if (last_ && targets.size() != static_cast<size_t>(m) * mb_tokens) {
    return Err("rank {}: last stage needs {} target tokens, got {}", rank_,
               static_cast<size_t>(m) * mb_tokens, targets.size());
  }
  return Status::Ok();
}

Tensor StageExecutor::ForwardInput(int64_t k, std::span<const int32_t> inputs) {
  if (first_) {
    const auto mb_tokens = static_cast<size_t>(b_ * t_);
    stage_.backend().CopyFromHost(tokens_, inputs.data() + static_cast<size_t>(k) * mb_tokens,
                                  mb_tokens * sizeof(int32_t));
    return tokens_;
  }
  auto it = received_act_.find(k);
  MOTLEY_CHECK(it != received_act_.end(), "Forward before its RecvForward");
  return it->second;
}

void StageExecutor::LoadTargets(int64_t k, std::span<const int32_t> targets) {
  const auto mb_tokens = static_cast<size_t>(b_ * t_);
  stage_.backend().CopyFromHost(targets_, targets.data() + static_cast<size_t>(k) * mb_tokens,
                                mb_tokens * sizeof(int32_t));
}

double StageExecutor::ForwardMicroBatch(int64_t k, std::span<const int32_t> inputs,
                                        std::span<const int32_t> targets) {
  const Tensor input = ForwardInput(k, inputs);
  double loss = 0.0;
  if (last_) {
    LoadTargets(k, targets);
    loss = stage_.ForwardLoss(k, input, targets_);
  } else {
    outputs_[k] = stage_.Forward(k, input);
  }
  if (!first_) {
    GiveBack(std::move(received_act_[k]));
    received_act_.erase(k);
  }
  return loss;
}

Result<double> StageExecutor::Evaluate(std::span<const int32_t> inputs,
                                       std::span<const int32_t> targets, StageTimes& times) {
  MOTLEY_RETURN_IF_ERROR(CheckInputSizes(inputs, targets));
  const int64_t m = layout_.pipeline_of(rank_).micro_batches;
  double loss_sum = 0.0;
  for (int64_t k = 0; k < m; ++k) {
    if (!first_) {
      const std::vector<Action> recv = {Action{ActionKind::kRecvForward, k}};
      MOTLEY_RETURN_IF_ERROR(RunBatch(recv, 0, 1, times).WithContext("evaluation"));
    }
    const Seconds start = clock_.Now();
    loss_sum += ForwardMicroBatch(k, inputs, targets);
    times.forward_s += clock_.Since(start);
    if (tp_ != nullptr && !tp_->status().ok()) {
      return tp_->status().WithContext(fmt::format("rank {} evaluation F{}", rank_, k));
    }
    if (!last_) {
      const std::vector<Action> send = {Action{ActionKind::kSendForward, k}};
      MOTLEY_RETURN_IF_ERROR(RunBatch(send, 0, 1, times).WithContext("evaluation"));
      outputs_.erase(k);
    }
    stage_.Discard(k);
  }
  return loss_sum;
}

Result<double> StageExecutor::Run(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                                  float loss_scale, const Hooks& hooks, StageTimes& times,
                                  std::vector<TraceEvent>* trace) {
  MOTLEY_RETURN_IF_ERROR(CheckInputSizes(inputs, targets));
  tensor::Backend& backend = stage_.backend();
  auto check_tp = [&]() -> Status {
    if (tp_ != nullptr && !tp_->status().ok()) {
      return tp_->status().WithContext(fmt::format("rank {}", rank_));
    }
    return Status::Ok();
  };
  loss_sum_ = 0.0;
  size_t i = 0;
  while (i < actions_.size()) {
    const Action& a = actions_[i];
    const Seconds start = clock_.Now();
    std::string name;
    if (sched::IsCommunication(a.kind)) {
      size_t end = i;
      while (end < actions_.size() && sched::IsCommunication(actions_[end].kind)) ++end;
      MOTLEY_RETURN_IF_ERROR(RunBatch(actions_, i, end, times));
      if (trace != nullptr) {
        for (size_t j = i; j < end; ++j) {
          name += (j == i ? "" : "+") + sched::ActionToString(actions_[j]);
        }
      }
      i = end;
    } else {
      const int64_t k = a.micro_batch;
      switch (a.kind) {
        case ActionKind::kForward: {
          loss_sum_ += ForwardMicroBatch(k, inputs, targets);
          times.forward_s += clock_.Since(start);
          break;
        }
        case ActionKind::kBackward: {
          Tensor dinput;
          if (last_) {
            dinput = stage_.BackwardLoss(k, loss_scale);
          } else {
            auto it = received_grad_.find(k);
            MOTLEY_CHECK(it != received_grad_.end(), "Backward before its RecvBackward");
            dinput = stage_.Backward(k, it->second);
            GiveBack(std::move(it->second));
            received_grad_.erase(it);
          }
          outputs_.erase(k);
          if (!first_) {  // dinput aliases the stage's buffer: keep a copy until it is sent
            Tensor copy = TakeBuffer();
            backend.Copy(copy, dinput.Reshaped(copy.shape()));
            input_grads_[k] = std::move(copy);
          }
          times.backward_s += clock_.Since(start);
          break;
        }
        case ActionKind::kDpSync: {
          MOTLEY_RETURN_IF_ERROR(hooks.dp_sync());
          times.dp_sync_s += clock_.Since(start);
          break;
        }
        case ActionKind::kOptimizerStep: {
          MOTLEY_RETURN_IF_ERROR(hooks.optimizer_step());
          times.optimizer_s += clock_.Since(start);
          break;
        }
        default:
          MOTLEY_CHECK(false, "unknown action");
      }
      MOTLEY_RETURN_IF_ERROR(check_tp().WithContext(sched::ActionToString(a)));
      if (trace != nullptr) name = sched::ActionToString(a);
      ++i;
    }
    if (trace != nullptr) {
      trace->push_back(TraceEvent{std::move(name), start, clock_.Since(start)});
    }
  }
  return loss_sum_;
}

}  // namespace motley::parallel
