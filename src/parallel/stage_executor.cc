// See stage_executor.h.
#include "parallel/stage_executor.h"

#include <fmt/core.h>

namespace motley::parallel {

using sched::Action;
using sched::ActionKind;
using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

StageExecutor::StageExecutor(const sched::RankStep& step, const spec::PipelinePlan& pipeline,
                             std::vector<model::Stage*> chunks, comm::Communicator& world,
                             const CommTpGroup* tp, std::vector<Action> actions, RankClock clock)
    : rank_(step.rank),
      world_(world),
      tp_(tp),
      clock_(clock),
      actions_(std::move(actions)),
      m_(pipeline.micro_batches),
      p_(pipeline.num_stages()),
      v_(pipeline.chunks),
      b_(chunks.at(0)->batch()),
      t_(chunks.at(0)->seq_len()),
      hidden_(chunks.at(0)->model().hidden) {
  MOTLEY_CHECK(chunks.size() == step.chunks.size(),
               "StageExecutor: one Stage per model chunk of the step program");
  for (size_t c = 0; c < chunks.size(); ++c) {
    const sched::ChunkStep& peers = step.chunks[c];
    chunks_.push_back(Chunk{chunks[c], peers, peers.forward_source < 0, peers.backward_source < 0});
  }
  tensor::Backend& backend = chunks_.front().stage->backend();
  if (holds_first()) tokens_ = backend.Empty(Shape{b_, t_}, DType::kI32);
  if (holds_last()) targets_ = backend.Empty(Shape{b_, t_}, DType::kI32);
}

Tensor StageExecutor::TakeBuffer() {
  if (!free_.empty()) {
    Tensor t = std::move(free_.back());
    free_.pop_back();
    return t;
  }
  return chunks_.front().stage->backend().Empty(Shape{b_, t_, hidden_}, DType::kF32);
}

int StageExecutor::Tag(int64_t micro_batch, int boundary, bool backward) const {
  return PipelineTag(micro_batch, boundary, p_, v_, backward);
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
    const Key key{a.micro_batch, a.chunk};
    const sched::ChunkStep& peers = chunks_.at(static_cast<size_t>(a.chunk)).peers;
    const int s = peers.virtual_stage;
    switch (a.kind) {
      case ActionKind::kSendForward: {
        auto it = outputs_.find(key);
        MOTLEY_CHECK(it != outputs_.end(), "SendForward of a micro-batch not forwarded");
        for (int dst : peers.forward_destinations) {
          MOTLEY_RETURN_IF_ERROR(
              post(world_.ISend(it->second, dst, Tag(a.micro_batch, s, false)), a));
        }
        break;
      }
      case ActionKind::kRecvForward: {
        Tensor& buf = received_act_[key] = TakeBuffer();
        MOTLEY_RETURN_IF_ERROR(
            post(world_.IRecv(buf, peers.forward_source, Tag(a.micro_batch, s - 1, false)), a));
        break;
      }
      case ActionKind::kSendBackward: {
        auto it = input_grads_.find(key);
        MOTLEY_CHECK(it != input_grads_.end(), "SendBackward of a micro-batch not backwarded");
        for (int dst : peers.backward_destinations) {
          MOTLEY_RETURN_IF_ERROR(
              post(world_.ISend(it->second, dst, Tag(a.micro_batch, s - 1, true)), a));
        }
        break;
      }
      case ActionKind::kRecvBackward: {
        Tensor& buf = received_grad_[key] = TakeBuffer();
        MOTLEY_RETURN_IF_ERROR(
            post(world_.IRecv(buf, peers.backward_source, Tag(a.micro_batch, s, true)), a));
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
    auto it = input_grads_.find(Key{a.micro_batch, a.chunk});
    GiveBack(std::move(it->second));
    input_grads_.erase(it);
  }
  times.p2p_s += clock_.Since(start);
  return Status::Ok();
}

Status StageExecutor::CheckInputSizes(std::span<const int32_t> inputs,
                                      std::span<const int32_t> targets) const {
  const auto tokens = static_cast<size_t>(m_ * b_ * t_);
  if (holds_first() && inputs.size() != tokens) {
    return Err("rank {}: first stage needs {} input tokens, got {}", rank_, tokens, inputs.size());
  }
  if (holds_last() && targets.size() != tokens) {
    return Err("rank {}: last stage needs {} target tokens, got {}", rank_, tokens, targets.size());
  }
  return Status::Ok();
}

Tensor StageExecutor::ForwardInput(int64_t k, int c, std::span<const int32_t> inputs) {
  if (chunks_[static_cast<size_t>(c)].first) {
    const auto mb_tokens = static_cast<size_t>(b_ * t_);
    chunks_.front().stage->backend().CopyFromHost(
        tokens_, inputs.data() + static_cast<size_t>(k) * mb_tokens, mb_tokens * sizeof(int32_t));
    return tokens_;
  }
  auto it = received_act_.find(Key{k, c});
  MOTLEY_CHECK(it != received_act_.end(), "Forward before its RecvForward");
  return it->second;
}

void StageExecutor::LoadTargets(int64_t k, std::span<const int32_t> targets) {
  const auto mb_tokens = static_cast<size_t>(b_ * t_);
  chunks_.back().stage->backend().CopyFromHost(
      targets_, targets.data() + static_cast<size_t>(k) * mb_tokens, mb_tokens * sizeof(int32_t));
}

double StageExecutor::ForwardMicroBatch(int64_t k, int c, std::span<const int32_t> inputs,
                                        std::span<const int32_t> targets) {
  Chunk& chunk = chunks_[static_cast<size_t>(c)];
  const Tensor input = ForwardInput(k, c, inputs);
  double loss = 0.0;
  if (chunk.last) {
    LoadTargets(k, targets);
    loss = chunk.stage->ForwardLoss(k, input, targets_);
  } else {
    outputs_[Key{k, c}] = chunk.stage->Forward(k, input);
  }
  if (!chunk.first) {
    auto it = received_act_.find(Key{k, c});
    GiveBack(std::move(it->second));
    received_act_.erase(it);
  }
  return loss;
}

void StageExecutor::BackwardMicroBatch(int64_t k, int c, float loss_scale) {
  Chunk& chunk = chunks_[static_cast<size_t>(c)];
  const Key key{k, c};
  Tensor dinput;
  if (chunk.last) {
    dinput = chunk.stage->BackwardLoss(k, loss_scale);
  } else {
    auto it = received_grad_.find(key);
    MOTLEY_CHECK(it != received_grad_.end(), "Backward before its RecvBackward");
    dinput = chunk.stage->Backward(k, it->second);
    GiveBack(std::move(it->second));
    received_grad_.erase(it);
  }
  outputs_.erase(key);
  if (!chunk.first) {  // dinput aliases the stage's buffer: keep a copy until it is sent
    Tensor copy = TakeBuffer();
    chunk.stage->backend().Copy(copy, dinput.Reshaped(copy.shape()));
    input_grads_[key] = std::move(copy);
  }
}

Result<double> StageExecutor::Evaluate(std::span<const int32_t> inputs,
                                       std::span<const int32_t> targets, StageTimes& times) {
  MOTLEY_RETURN_IF_ERROR(CheckInputSizes(inputs, targets));
  double loss_sum = 0.0;
  for (int64_t k = 0; k < m_; ++k) {
    for (int c = 0; c < static_cast<int>(chunks_.size()); ++c) {
      const Chunk& chunk = chunks_[static_cast<size_t>(c)];
      if (!chunk.first) {
        const std::vector<Action> recv = {Action{ActionKind::kRecvForward, k, c}};
        MOTLEY_RETURN_IF_ERROR(RunBatch(recv, 0, 1, times).WithContext("evaluation"));
      }
      const Seconds start = clock_.Now();
      loss_sum += ForwardMicroBatch(k, c, inputs, targets);
      times.forward_s += clock_.Since(start);
      if (tp_ != nullptr && !tp_->status().ok()) {
        return tp_->status().WithContext(fmt::format("rank {} evaluation F{}", rank_, k));
      }
      if (!chunk.last) {
        const std::vector<Action> send = {Action{ActionKind::kSendForward, k, c}};
        MOTLEY_RETURN_IF_ERROR(RunBatch(send, 0, 1, times).WithContext("evaluation"));
        outputs_.erase(Key{k, c});
      }
      chunk.stage->Discard(k);
    }
  }
  return loss_sum;
}

Result<double> StageExecutor::Run(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                                  float loss_scale, const Hooks& hooks, StageTimes& times,
                                  std::vector<TraceEvent>* trace) {
  MOTLEY_RETURN_IF_ERROR(CheckInputSizes(inputs, targets));
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
      switch (a.kind) {
        case ActionKind::kForward: {
          loss_sum_ += ForwardMicroBatch(a.micro_batch, a.chunk, inputs, targets);
          times.forward_s += clock_.Since(start);
          break;
        }
        case ActionKind::kBackward: {
          BackwardMicroBatch(a.micro_batch, a.chunk, loss_scale);
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
