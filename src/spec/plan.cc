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
    for (int i = 0; i < p.num_stages(); ++i) {
      n += static_cast<int>(p.stages[static_cast<size_t>(i)].devices.size());
    }
  }
  return n;
}

bool InterleavedMicroBatchesOk(int num_stages, int64_t micro_batches) {
  return micro_batches < 2 * static_cast<int64_t>(num_stages) || micro_batches % num_stages == 0;
}

void Plan::SetRecompute(Recompute r) {
  for (PipelinePlan& p : pipelines) {
    for (StagePlan& s : p.stages) s.recompute = r;
  }
}

void RenumberBlocks(PipelinePlan* pipe) {
  int64_t first = 0;
  for (StagePlan& st : pipe->stages) {
    st.first_block = first;
    first += st.num_blocks;
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

// The interleaving of one pipeline (plan.h PipelinePlan): chunks >= 1; with chunks > 1 the 1F1B
// schedule, a whole number of device groups, at least 2 of them, and a micro-batch count the
// interleaved schedule runs.
Status CheckInterleaving(const PipelinePlan& pipe, PipelineSchedule schedule,
                         const std::string& pat, const std::string& file) {
  const int v = pipe.chunks;
  if (v < 1) return Err("{}: {}.chunks: must be positive, got {}", file, pat, v);
  if (v == 1) return Status::Ok();
  if (schedule != PipelineSchedule::k1F1B) {
    return Err(
        "{}: {}.chunks: {} model chunks per device group need schedule 1f1b "
        "(interleaved 1F1B), the plan's is {}",
        file, pat, v, PipelineScheduleName(schedule));
  }
  const size_t n = pipe.stages.size();
  if (n % static_cast<size_t>(v) != 0) {
    return Err(
        "{}: {}.stages: {} virtual stages are not a whole number of device groups of {} "
        "chunks each",
        file, pat, n, v);
  }
  const int p = pipe.num_stages();
  if (p < 2) {
    return Err(
        "{}: {}.chunks: interleaving needs at least 2 device groups, got {} ({} virtual "
        "stages / {} chunks)",
        file, pat, p, n, v);
  }
  if (pipe.micro_batches >= p && !InterleavedMicroBatchesOk(p, pipe.micro_batches)) {
    return Err(
        "{}: {}.micro_batches: interleaved 1F1B over {} device groups runs a multiple of "
        "{} micro-batches, or fewer than {}; got {}",
        file, pat, p, p, 2 * p, pipe.micro_batches);
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
    MOTLEY_RETURN_IF_ERROR(CheckInterleaving(pipe, plan.schedule, pat, file));
    const int p_groups = pipe.num_stages();
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
      if (static_cast<int>(s) < p_groups) {
        MOTLEY_RETURN_IF_ERROR(CheckStageDevices(stage, at, file, cluster, model, &owner));
      } else {  // a later model chunk of device group s mod p
        const StagePlan& group = pipe.stages[s % static_cast<size_t>(p_groups)];
        if (stage.devices != group.devices || stage.tp_degree != group.tp_degree) {
          return Err(
              "{}: {}.devices: virtual stage {} runs on device group {} (chunks {}), whose "
              "devices are [{}] at tp_degree {}; got [{}] at tp_degree {}",
              file, at, s, s % static_cast<size_t>(p_groups), pipe.chunks,
              fmt::join(group.devices, ", "), group.tp_degree, fmt::join(stage.devices, ", "),
              stage.tp_degree);
        }
      }
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
