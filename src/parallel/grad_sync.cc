// See grad_sync.h.
#include "parallel/grad_sync.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <string_view>

#include <fmt/core.h>

#include "core/check.h"
#include "spec/plan_topology.h"

namespace motley::parallel {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

int LayerOfParameter(std::string_view name, int64_t num_blocks) {
  if (name == "model.embed_tokens.weight") return 0;
  if (name == "model.norm.weight" || name == "lm_head.weight") {
    return static_cast<int>(num_blocks) + 1;
  }
  constexpr std::string_view kPrefix = "model.layers.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  name.remove_prefix(kPrefix.size());
  int64_t block = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), block);
  if (ec != std::errc() || block < 0 || block >= num_blocks || end == name.data() + name.size() ||
      *end != '.') {
    return -1;
  }
  return static_cast<int>(block) + 1;
}

Result<std::unique_ptr<GradientSync>> GradientSync::Create(const WorldLayout& layout, int rank,
                                                           const spec::ModelSpec& model,
                                                           const sched::StepProgram& program,
                                                           comm::Communicator& world,
                                                           tensor::Backend& backend,
                                                           model::ParameterSet& params,
                                                           RankClock clock) {
  const RankInfo& me = layout.rank(rank);
  if (static_cast<size_t>(rank) >= program.ranks.size()) {
    return Err("gradient groups: the step program has {} ranks, not rank {}",
               program.ranks.size(), rank);
  }
  std::unique_ptr<GradientSync> sync(
      new GradientSync(backend, params, me.pipeline == 0, me.tp_rank, clock));
  const int64_t L = model.num_blocks;
  const sched::RankStep& mine = program.ranks[static_cast<size_t>(rank)];
  // Every rank, idle ones (left out of the plan) too, splits the world once per layer; a rank
  // joins the layer collective its step program lists (the collective's index is the colour).
  for (int id = 0; id < static_cast<int>(spec::NumGradientLayers(L)); ++id) {
    const sched::Collective* collective = nullptr;
    for (const sched::StepOp& op : mine.ops) {
      if (op.layer == id && (op.kind == sched::StepOpKind::kLayerAllReduce ||
                             op.kind == sched::StepOpKind::kLayerReduceScatter)) {
        collective = &program.collectives[static_cast<size_t>(op.collective)];
      }
    }
    const int color = collective != nullptr
                          ? static_cast<int>(collective - program.collectives.data())
                          : comm::kUndefinedColor;
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> group,
                            world.Split(color, rank));
    Layer layer;
    layer.id = id;
    layer.mixed = collective != nullptr && collective->mixed;
    int64_t numel = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      if (LayerOfParameter(params[i].name(), L) != id) continue;
      layer.params.push_back(i);
      numel += layer.mixed ? params[i].info.FullShape().numel() : params[i].value.numel();
    }
    if (layer.params.empty()) {
      if (collective != nullptr) {
        return Err("gradient groups: the step program has rank {} sum layer {}, but the rank "
                   "has none of its parameters",
                   rank, id);
      }
      continue;
    }
    if (collective == nullptr) {  // alone with the layer: nothing to sum
      sync->layers_.push_back(std::move(layer));
      continue;
    }
    if (numel != collective->elements || group == nullptr ||
        group->size() != static_cast<int>(collective->members.size())) {
      return Err("gradient groups: layer {} on rank {}: the step program sums {} elements over "
                 "{} ranks, the rank holds {} elements in a group of {}",
                 id, rank, collective->elements, collective->members.size(), numel,
                 group != nullptr ? group->size() : 0);
    }
    layer.comm = std::move(group);
    if (collective->kind == sched::StepOpKind::kLayerReduceScatter) {
      MOTLEY_ASSIGN_OR_RETURN(layer.zero1,
                              Zero1Layer::Create(backend, params, layer.params, *layer.comm,
                                                 /*counts_replicated_in_norm=*/me.tp_rank == 0));
    } else {
      layer.buffer = tensor::HostTensor(Shape{numel}, DType::kF32);
    }
    sync->layers_.push_back(std::move(layer));
  }
  return sync;
}

void GradientSync::Pack(Layer& layer) {
  auto* out = layer.buffer.data<float>();
  if (!layer.mixed) {
    for (size_t i : layer.params) {
      const model::Parameter& p = params_[i];
      backend_.CopyToHost(out, p.grad, p.grad.bytes());
      out += p.grad.numel();
    }
    return;
  }
  std::memset(out, 0, layer.buffer.bytes());
  std::vector<float> local;
  for (size_t i : layer.params) {
    const model::Parameter& p = params_[i];
    const Shape full = p.info.FullShape();
    if (!p.info.sharded()) {
      if (tp_rank_ == 0) backend_.CopyToHost(out, p.grad, p.grad.bytes());
    } else {
      local.resize(static_cast<size_t>(p.grad.numel()));
      backend_.CopyToHost(local.data(), p.grad, p.grad.bytes());
      const int64_t rows = p.grad.shape()[0], cols = p.grad.shape()[1];
      const int64_t row0 = p.info.shard_dim == 0 ? p.info.shard_offset : 0;
      const int64_t col0 = p.info.shard_dim == 1 ? p.info.shard_offset : 0;
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(out + (row0 + r) * full[1] + col0, local.data() + r * cols,
                    static_cast<size_t>(cols) * sizeof(float));
      }
    }
    out += full.numel();
  }
}

void GradientSync::Unpack(Layer& layer) {
  const auto* in = layer.buffer.data<float>();
  std::vector<float> local;
  for (size_t i : layer.params) {
    model::Parameter& p = params_[i];
    if (!layer.mixed || !p.info.sharded()) {
      backend_.CopyFromHost(p.grad, in, p.grad.bytes());
      in += layer.mixed ? p.info.FullShape().numel() : p.grad.numel();
      continue;
    }
    const Shape full = p.info.full_shape;
    local.resize(static_cast<size_t>(p.grad.numel()));
    const int64_t rows = p.grad.shape()[0], cols = p.grad.shape()[1];
    const int64_t row0 = p.info.shard_dim == 0 ? p.info.shard_offset : 0;
    const int64_t col0 = p.info.shard_dim == 1 ? p.info.shard_offset : 0;
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(local.data() + r * cols, in + (row0 + r) * full[1] + col0,
                  static_cast<size_t>(cols) * sizeof(float));
    }
    backend_.CopyFromHost(p.grad, local.data(), p.grad.bytes());
    in += full.numel();
  }
}

Status GradientSync::Reduce() {
  const Seconds start = clock_.Now();
  for (Layer& layer : layers_) {
    if (layer.comm == nullptr) continue;
    if (layer.zero1 != nullptr) {
      MOTLEY_RETURN_IF_ERROR(layer.zero1->ReduceGradients().WithContext(
          fmt::format("gradient sync of layer {}", layer.id)));
      continue;
    }
    Pack(layer);
    MOTLEY_RETURN_IF_ERROR(layer.comm->AllReduce(layer.buffer, comm::ReduceOp::kSum)
                               .WithContext(fmt::format("gradient sync of layer {}", layer.id)));
    Unpack(layer);
  }
  comm_s_ += clock_.Since(start);
  return Status::Ok();
}

double GradientSync::NormContribution() const {
  double sum = 0.0;
  for (const Layer& layer : layers_) {
    if (layer.zero1 != nullptr) {
      sum += layer.zero1->SquaredNormShare();
      continue;
    }
    if (!counts_norm_) continue;
    for (size_t i : layer.params) {
      const model::Parameter& p = params_[i];
      if (p.info.sharded() || tp_rank_ == 0) sum += backend_.SumSquares(p.grad);
    }
  }
  return sum;
}

Status GradientSync::StepSharded(const tensor::AdamWParams& adamw, float weight_decay) {
  // Not added to comm_seconds(): the runtime times this as part of the optimizer step.
  for (Layer& layer : layers_) {
    if (layer.zero1 == nullptr) continue;
    MOTLEY_RETURN_IF_ERROR(layer.zero1->Step(adamw, weight_decay)
                               .WithContext(fmt::format("ZeRO-1 step of layer {}", layer.id)));
  }
  return Status::Ok();
}

Status GradientSync::GatherMoments() {
  for (Layer& layer : layers_) {
    if (layer.zero1 == nullptr) continue;
    MOTLEY_RETURN_IF_ERROR(layer.zero1->GatherMoments().WithContext(
        fmt::format("ZeRO-1 moments of layer {}", layer.id)));
  }
  return Status::Ok();
}

std::vector<bool> GradientSync::sharded_params() const {
  std::vector<bool> out(params_.size(), false);
  for (const Layer& layer : layers_) {
    if (layer.zero1 == nullptr) continue;
    for (size_t i : layer.params) out[i] = true;
  }
  return out;
}

}  // namespace motley::parallel
