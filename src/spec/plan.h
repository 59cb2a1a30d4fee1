// Plan: how a model is laid out on a cluster (docs/formats/plan.md): pipelines (data-parallel
// replicas, possibly of different shapes), each an ordered list of stages (a contiguous block range
// on a TP group of devices), the pipeline's micro-batch count and size, the pipeline schedule,
// recompute per stage, optimizer sharding and, per pipeline, the model chunks of the interleaved
// 1F1B schedule. Written by the planner or by hand as versioned JSON ("format": "motley-plan",
// "version": 3 for an interleaved plan, else 2; version 1, with one plan-level recompute, is still
// read), read by the runtime and the simulator. Plain value types.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "spec/train_spec.h"

namespace motley::spec {

// Activation recompute of a stage's blocks (Korthikanti et al. 2022): kSelective keeps everything
// but the attention core's T x T probabilities and recomputes the core (QK^T, softmax, the
// weighted sum of V) in the backward; kFull keeps only each block's input and reruns the block's
// forward inside its backward. Ordered by memory saved (and time spent).
enum class Recompute { kNone, kSelective, kFull };
enum class OptimizerSharding { kNone, kZero1 };
// Order of forwards and backwards inside a pipeline; sched/schedule.h builds the action lists.
enum class PipelineSchedule { k1F1B, kGPipe };

std::string_view RecomputeName(Recompute r);                   // "none" | "selective" | "full"
std::string_view OptimizerShardingName(OptimizerSharding s);   // "none" | "zero1"
std::string_view PipelineScheduleName(PipelineSchedule s);     // "1f1b" | "gpipe"

struct StagePlan {
  int64_t first_block = 0;      // first transformer block of the stage
  int64_t num_blocks = 0;       // blocks [first_block, first_block + num_blocks)
  bool has_embedding = false;   // token embedding (first stage only)
  bool has_head = false;        // final RMSNorm + LM head + loss (last stage only)
  std::vector<int> devices;     // global device ids of the TP group, in TP-rank order
  int tp_degree = 1;            // == devices.size()
  Recompute recompute = Recompute::kNone;  // activation recompute of this stage's blocks

  int64_t end_block() const { return first_block + num_blocks; }
};

// A pipeline of p stages (device groups). Interleaved 1F1B (chunks v > 1, sched/schedule.h):
// `stages` lists the p * v virtual stages in model order, and virtual stage s runs on the devices
// of stage s mod p (ValidatePlan checks that they list the same devices), so device group i holds
// model chunks s = i, i + p, ..., each a contiguous block range. With v = 1, stages are the device
// groups and p = stages.size().
struct PipelinePlan {
  std::vector<StagePlan> stages;  // in model order: p * chunks entries
  int64_t micro_batches = 1;      // m: micro-batches per step through this pipeline
  int64_t micro_batch_size = 1;   // b: sequences per micro-batch
  int chunks = 1;                 // v: model chunks per device group (interleaved 1F1B when > 1)

  // p: device groups (pipeline stages). A plan whose stage count chunks does not divide fails
  // ValidatePlan; until then this rounds down.
  int num_stages() const { return static_cast<int>(stages.size()) / std::max(chunks, 1); }
  int num_virtual_stages() const { return static_cast<int>(stages.size()); }  // p * v
  // Index into `stages` of device group `group`'s model chunk `chunk`: chunk * p + group.
  int virtual_stage(int group, int chunk) const { return chunk * num_stages() + group; }
  int64_t samples_per_step() const { return micro_batches * micro_batch_size; }
};

struct Plan {
  std::vector<PipelinePlan> pipelines;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  OptimizerSharding optimizer_sharding = OptimizerSharding::kNone;
  std::string comment;     // free text (who wrote it, why); round-trips through JSON
  std::string source;      // file the plan was read from, for error messages; not serialized

  int num_devices() const;  // devices used by all stages (each device group counted once)
  // Sets every stage's recompute (a plan-level choice, as plan format version 1 had).
  void SetRecompute(Recompute r);
};

// The heaviest recompute of any stage (kFull > kSelective > kNone); kNone for a plan without
// stages. What a re-split of the plan keeps for every stage, so that no stage holds more.
Recompute HeaviestRecompute(const Plan& plan);
// "none", "full", ... when every stage agrees; "per stage" otherwise (for summaries).
std::string RecomputeSummary(const Plan& plan);

// Whether interleaved 1F1B over `num_stages` device groups runs `micro_batches` per step: a
// multiple of the stage count (as Megatron-LM requires) or fewer than twice it
// (sched::BuildSchedule says why no other count).
bool InterleavedMicroBatchesOk(int num_stages, int64_t micro_batches);

// Sets each stage's first_block to the sum of num_blocks of the stages before it (model order,
// virtual stages included), so that the pipeline's stages cover blocks [0, total) in order: what
// every plan builder does after choosing block counts.
void RenumberBlocks(PipelinePlan* pipe);

// Reads a plan file. Errors: "<path>: <field path>: <reason>". Structure only; see ValidatePlan.
Result<Plan> LoadPlan(const std::string& path);
// Parses plan JSON; `name` stands for the file name in messages and becomes Plan::source.
Result<Plan> ParsePlan(std::string_view json_text, std::string_view name);
// Serializes to the versioned JSON format (2-space indent, trailing newline).
std::string PlanToJson(const Plan& plan);
// Writes PlanToJson atomically.
Status SavePlan(const Plan& plan, const std::string& path);

// THE plan rule: what every command applies before it accepts a plan (`motley validate --plan`,
// `plan` on the plan it writes, `predict`, `simulate`, `train`, and the runtime's plan switches),
// so that no command accepts a plan another refuses. It checks the plan against a cluster, model
// and training setup -- every block covered exactly once per pipeline and in order; embedding on
// the first and head on the last stage only; every device exists and is used once in the whole
// plan; tp_degree == devices.size() and divides heads, kv heads, ffn width and vocabulary; a
// stage's devices share one node and one type; micro_batches >= number of stages; sum over
// pipelines of micro_batches * micro_batch_size == train.global_batch; interleaved pipelines
// (chunks > 1) on the 1F1B schedule with at least 2 stages, their virtual stages on their device
// groups and an accepted micro-batch count -- and what the runtime can execute: the plan's
// devices are all emulated or all real (one run has one kind of clock, docs/architecture.md §6).
// Every schedule (interleaved 1F1B included), recompute mode (per stage) and optimizer sharding
// of the format runs. Not
// covered: what this build or host lacks (a CUDA device without a CUDA build) and memory capacity,
// which `predict` reports and the runtime enforces. Errors name pipeline, stage and field, prefixed
// with Plan::source (or "plan"): "plan.json: pipelines[1].stages[2].devices: device 7 is already
// used by pipelines[0].stages[3]".
Status ValidatePlan(const Plan& plan, const ClusterSpec& cluster, const ModelSpec& model,
                    const TrainSpec& train);

// Uniform Megatron-style plan on the first dp*pp*tp devices: `dp` identical pipelines of `pp`
// stages with `tp` devices each; ranks ordered tp fastest, then dp, then pp (Megatron's default),
// blocks split as evenly as possible (earlier stages take the remainder), global batch split evenly
// over pipelines in micro-batches of `micro_batch_size`. Errors when the shape does not fit (too
// few devices, a TP group crossing a node, batch not divisible, more stages than blocks, ...);
// the result passes ValidatePlan.
struct UniformPlanOptions {
  int dp = 1;
  int pp = 1;
  int tp = 1;
  int64_t micro_batch_size = 1;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  Recompute recompute = Recompute::kNone;
  OptimizerSharding optimizer_sharding = OptimizerSharding::kNone;
};
Result<Plan> UniformPlan(const ClusterSpec& cluster, const ModelSpec& model,
                         const TrainSpec& train, const UniformPlanOptions& options);

// Splits `num_blocks` into `parts` contiguous ranges as evenly as possible (the first
// num_blocks % parts ranges get one more). Returns the block counts.
std::vector<int64_t> EvenSplit(int64_t num_blocks, int parts);

}  // namespace motley::spec
