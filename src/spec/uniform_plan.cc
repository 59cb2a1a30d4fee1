// UniformPlan: the Megatron-style baseline layout (identical pipelines, even block split) and the
// even block split it uses.
#include <string>

#include <fmt/format.h>

#include "spec/plan.h"

namespace motley::spec {

std::vector<int64_t> EvenSplit(int64_t num_blocks, int parts) {
  MOTLEY_CHECK(parts > 0 && num_blocks >= 0, "EvenSplit needs parts > 0 and num_blocks >= 0");
  std::vector<int64_t> counts(static_cast<size_t>(parts), num_blocks / parts);
  for (int64_t i = 0; i < num_blocks % parts; ++i) ++counts[static_cast<size_t>(i)];
  return counts;
}

Result<Plan> UniformPlan(const ClusterSpec& cluster, const ModelSpec& model,
                         const TrainSpec& train, const UniformPlanOptions& options) {
  const int dp = options.dp;
  const int pp = options.pp;
  const int tp = options.tp;
  if (dp < 1 || pp < 1 || tp < 1) {
    return Err("uniform plan: dp, pp and tp must be positive, got dp={} pp={} tp={}", dp, pp, tp);
  }
  const int64_t needed = int64_t{dp} * pp * tp;
  if (needed > cluster.num_devices()) {
    return Err("uniform plan: dp*pp*tp = {} exceeds the cluster's {} devices", needed,
               cluster.num_devices());
  }
  if (pp > model.num_blocks) {
    return Err("uniform plan: {} stages for a model of {} blocks", pp, model.num_blocks);
  }
  if (options.micro_batch_size < 1) {
    return Err("uniform plan: micro_batch_size must be positive, got {}", options.micro_batch_size);
  }
  if (train.global_batch % (int64_t{dp} * options.micro_batch_size) != 0) {
    return Err("uniform plan: global batch {} is not divisible by dp ({}) * micro_batch_size ({})",
               train.global_batch, dp, options.micro_batch_size);
  }
  const int64_t micro_batches = train.global_batch / dp / options.micro_batch_size;
  if (micro_batches < pp) {
    return Err("uniform plan: {} micro-batches per pipeline are fewer than the {} stages",
               micro_batches, pp);
  }
  Plan plan;
  plan.schedule = options.schedule;
  plan.optimizer_sharding = options.optimizer_sharding;
  plan.comment = fmt::format("uniform Megatron-style split: dp={} pp={} tp={} b={}", dp, pp, tp,
                             options.micro_batch_size);
  const std::vector<int64_t> blocks = EvenSplit(model.num_blocks, pp);
  for (int d = 0; d < dp; ++d) {
    PipelinePlan pipe;
    pipe.micro_batches = micro_batches;
    pipe.micro_batch_size = options.micro_batch_size;
    for (int s = 0; s < pp; ++s) {
      StagePlan stage;
      stage.num_blocks = blocks[static_cast<size_t>(s)];
      stage.has_embedding = s == 0;
      stage.has_head = s == pp - 1;
      stage.tp_degree = tp;
      stage.recompute = options.recompute;
      const int base = (s * dp + d) * tp;  // tp fastest, then dp, then pp
      for (int k = 0; k < tp; ++k) stage.devices.push_back(base + k);
      const DeviceInfo& a = cluster.device(stage.devices.front());
      const DeviceInfo& b = cluster.device(stage.devices.back());
      if (a.node != b.node) {
        return Err("uniform plan: the TP group of devices {}..{} crosses nodes '{}' and '{}'",
                   stage.devices.front(), stage.devices.back(),
                   cluster.nodes[static_cast<size_t>(a.node)].name,
                   cluster.nodes[static_cast<size_t>(b.node)].name);
      }
      pipe.stages.push_back(std::move(stage));
    }
    RenumberBlocks(&pipe);
    plan.pipelines.push_back(std::move(pipe));
  }
  MOTLEY_RETURN_IF_ERROR(ValidatePlan(plan, cluster, model, train).WithContext("uniform plan"));
  return plan;
}

}  // namespace motley::spec
