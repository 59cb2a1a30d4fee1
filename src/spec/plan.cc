// See plan.h: names of the plan enums, the recompute helpers and ValidatePlan (the one plan rule).
#include "spec/plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/checked_math.h"

namespace motley::spec {

std::string_view RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "none";
}

std::string_view OptimizerShardingName(OptimizerSharding s) {
  switch (s) {
    case OptimizerSharding::kNone: return "none";
    case OptimizerSharding::kZero1: return "zero1";
  }
  return "none";
}

std::string_view PipelineScheduleName(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::k1F1B: return "1f1b";
    case PipelineSchedule::kGPipe: return "gpipe";
  }
  return "1f1b";
}

int Plan::num_devices() const {
  int n = 0;
  for (const PipelinePlan& p : pipelines) {
    for (const StagePlan& s : p.stages) n += static_cast<int>(s.devices.size());
  }
  return n;
}

void Plan::SetRecompute(Recompute r) {
  for (PipelinePlan& p : pipelines) {
    for (StagePlan& s : p.stages) s.recompute = r;
  }
}

Recompute HeaviestRecompute(const Plan& plan) {
  Recompute heaviest = Recompute::kNone;
  for (const PipelinePlan& p : plan.pipelines) {
    for (const StagePlan& s : p.stages) heaviest = std::max(heaviest, s.recompute);
  }
  return heaviest;
}

std::string RecomputeSummary(const Plan& plan) {
  std::optional<Recompute> common;
  for (const PipelinePlan& p : plan.pipelines) {
    for (const StagePlan& s : p.stages) {
      if (common.has_value() && *common != s.recompute) return "per stage";
      common = s.recompute;
    }
  }
  return std::string(RecomputeName(common.value_or(Recompute::kNone)));
}

namespace {

Status CheckStageDevices(const StagePlan& stage, const std::string& at, const std::string& file,
                         const ClusterSpec& cluster, const ModelSpec& model,
                         std::map<int, std::string>* owner) {
  if (stage.devices.empty()) return Err("{}: {}.devices: a stage needs at least one device", file, at);
  for (int id : stage.devices) {
    if (id < 0 || id >= cluster.num_devices()) {
      return Err("{}: {}.devices: device {} does not exist (the cluster has devices 0..{})", file,
                 at, id, cluster.num_devices() - 1);
    }
    auto [it, inserted] = owner->emplace(id, at);
    if (!inserted) {
      return Err("{}: {}.devices: device {} is already used by {}", file, at, id, it->second);
    }
  }
  const int tp = stage.tp_degree;
  if (tp != static_cast<int>(stage.devices.size())) {
    return Err("{}: {}.tp_degree: {} differs from the number of devices {}", file, at, tp,
               stage.devices.size());
  }
  const std::pair<const char*, int64_t> divisible[] = {{"num_heads", model.num_heads},
                                                       {"num_kv_heads", model.num_kv_heads},
                                                       {"ffn_hidden", model.ffn_hidden},
                                                       {"vocab_size", model.vocab_size}};
  for (const auto& [field, value] : divisible) {
    if (value % tp != 0) {
      return Err("{}: {}.tp_degree: {} does not divide model {} {}", file, at, tp, field, value);
    }
  }
  const DeviceInfo& first = cluster.device(stage.devices.front());
  for (int id : stage.devices) {
    const DeviceInfo& d = cluster.device(id);
    if (d.node != first.node) {
      return Err("{}: {}.devices: device {} is on node '{}' but device {} is on node '{}' (a TP "
                 "group must stay inside one node)",
                 file, at, id, cluster.nodes[static_cast<size_t>(d.node)].name, first.id,
                 cluster.nodes[static_cast<size_t>(first.node)].name);
    }
    if (d.type != first.type) {
      return Err("{}: {}.devices: device {} is a '{}' but device {} is a '{}' (a TP group needs "
                 "one device type)",
                 file, at, id, cluster.device_types[static_cast<size_t>(d.type)].name, first.id,
                 cluster.device_types[static_cast<size_t>(first.type)].name);
    }
  }
  return Status::Ok();
}

// What the runtime can execute beyond the plan's structure (plan.h): one run is either all
// emulated devices (each rank on its virtual clock) or all real ones (train/parallel_setup.cc
// builds one kind of backend and clock per run).
Status CheckRuntimeCapability(const Plan& plan, const ClusterSpec& cluster,
                              const std::string& file) {
  const StagePlan* first_stage = nullptr;
  std::string first_at;
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    for (size_t s = 0; s < plan.pipelines[p].stages.size(); ++s) {
      const StagePlan& stage = plan.pipelines[p].stages[s];
      const std::string at = fmt::format("pipelines[{}].stages[{}]", p, s);
      if (first_stage == nullptr) {
        first_stage = &stage;
        first_at = at;
        continue;
      }
      const DeviceType& first = cluster.device_type_of(first_stage->devices.front());
      const DeviceType& type = cluster.device_type_of(stage.devices.front());
      if (type.is_emulated() == first.is_emulated()) continue;
      return Err(
          "{}: {}.devices: device {} (type '{}') is {} but device {} (type '{}', {}) is {}; "
          "a run is either all emulated or all real devices",
          file, at, stage.devices.front(), type.name,
          type.is_emulated() ? "emulated" : "not emulated", first_stage->devices.front(),
          first.name, first_at, first.is_emulated() ? "emulated" : "not emulated");
    }
  }
  return Status::Ok();
}

Status ValidatePlanImpl(const Plan& plan, const ClusterSpec& cluster, const ModelSpec& model,
                        const TrainSpec& train) {
  const std::string file = plan.source.empty() ? std::string("plan") : plan.source;
  if (plan.pipelines.empty()) return Err("{}: pipelines: at least one pipeline needed", file);
  std::map<int, std::string> owner;  // device id -> "pipelines[p].stages[s]"
  int64_t samples = 0;
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const PipelinePlan& pipe = plan.pipelines[p];
    const std::string pat = fmt::format("pipelines[{}]", p);
    if (pipe.stages.empty()) return Err("{}: {}.stages: at least one stage needed", file, pat);
    if (pipe.micro_batch_size < 1) {
      return Err("{}: {}.micro_batch_size: must be positive, got {}", file, pat,
                 pipe.micro_batch_size);
    }
    if (pipe.micro_batches < pipe.num_stages()) {
      return Err("{}: {}.micro_batches: {} is fewer than the {} stages", file, pat,
                 pipe.micro_batches, pipe.num_stages());
    }
    // Overflow-safe: a pipeline's samples, and the running sum, never exceed the global batch.
    const std::optional<int64_t> pipe_samples =
        CheckedMul(pipe.micro_batches, pipe.micro_batch_size);
    if (!pipe_samples || *pipe_samples > train.global_batch - samples) {
      return Err(
          "{}: {}: micro_batches {} * micro_batch_size {} {} the {} samples of "
          "train.global_batch left for this pipeline",
          file, pat, pipe.micro_batches, pipe.micro_batch_size,
          pipe_samples ? fmt::format("= {} exceeds", *pipe_samples) : "exceeds",
          train.global_batch - samples);
    }
    samples += *pipe_samples;
    int64_t next_block = 0;
    for (size_t s = 0; s < pipe.stages.size(); ++s) {
      const StagePlan& stage = pipe.stages[s];
      const std::string at = fmt::format("{}.stages[{}]", pat, s);
      const bool first = s == 0;
      const bool last = s + 1 == pipe.stages.size();
      if (stage.first_block != next_block) {
        return Err("{}: {}.first_block: expected {} (where the previous stage ends), got {}", file,
                   at, next_block, stage.first_block);
      }
      if (stage.num_blocks < 0) {
        return Err("{}: {}.num_blocks: must not be negative, got {}", file, at, stage.num_blocks);
      }
      if (stage.num_blocks > model.num_blocks - stage.first_block) {  // end_block() may overflow
        const std::optional<int64_t> end = CheckedAdd(stage.first_block, stage.num_blocks);
        return Err("{}: {}.num_blocks: blocks [{}, {}) exceed the model's {} blocks", file, at,
                   stage.first_block,
                   end ? fmt::format("{}", *end)
                       : fmt::format("{} + {}", stage.first_block, stage.num_blocks),
                   model.num_blocks);
      }
      if (stage.has_embedding != first) {
        return Err("{}: {}.has_embedding: {}", file, at,
                   first ? "the first stage must hold the embedding"
                         : "only the first stage holds the embedding");
      }
      if (stage.has_head != last) {
        return Err("{}: {}.has_head: {}", file, at,
                   last ? "the last stage must hold the head" : "only the last stage holds the head");
      }
      if (stage.num_blocks == 0 && !stage.has_embedding && !stage.has_head) {
        return Err("{}: {}.num_blocks: the stage holds nothing", file, at);
      }
      MOTLEY_RETURN_IF_ERROR(CheckStageDevices(stage, at, file, cluster, model, &owner));
      next_block = stage.end_block();
    }
    if (next_block != model.num_blocks) {
      return Err("{}: {}.stages: blocks end at {}, the model has {} blocks", file, pat, next_block,
                 model.num_blocks);
    }
  }
  if (samples != train.global_batch) {
    return Err("{}: pipelines: micro_batches * micro_batch_size sum to {} over all pipelines, but "
               "train.global_batch is {}",
               file, samples, train.global_batch);
  }
  return CheckRuntimeCapability(plan, cluster, file);
}

}  // namespace

Status ValidatePlan(const Plan& plan, const ClusterSpec& cluster, const ModelSpec& model,
                    const TrainSpec& train) {
  MOTLEY_CHECK(cluster.finalized(), "ValidatePlan needs a finalized ClusterSpec");
  return AsInputError(ValidatePlanImpl(plan, cluster, model, train));
}

}  // namespace motley::spec
