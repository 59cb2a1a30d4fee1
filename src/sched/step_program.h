// The step program: one training step of a plan as data (docs/architecture.md §3 rule 2), for
// every world rank the ordered list of what it does, and every collective it joins. The runtime
// splits its gradient communicators from it and shards ZeRO-1 state by it
// (parallel/grad_sync.cc), the predictor times it op by op (perf/predict_step.cc), the simulator
// replays it event by event (sim/simulator.cc), and `motley schedule --step` prints it
// (docs/formats/step-program.md). The recording test (tests/parallel/step_program_record_test.cc,
// which also records the training loop's between-step messages) and
// tests/parallel/mpi_step_program_record_test.cc (under mpiexec) check that the runtime's
// communicator calls equal it entry for entry.
//
// A non-idle rank runs, in this order:
//   zero-grads; pipeline (its stage's action list, sched/schedule.h, without step actions; on a
//   TP group, every forward and backward runs the group's all-reduces, TpAllReducesPerMicroBatch;
//   under interleaved 1F1B the list holds every model chunk of the rank's device group, and
//   RankStep::chunks gives each chunk's peers and all-reduces);
//   per gradient layer it holds, ascending, whose group has 2 or more members: the layer's
//   all-reduce, or under ZeRO-1 (a uniform group) its reduce-scatter;
//   grad-norm; loss-norm all-reduce (world); optimizer (whole tensors); per ZeRO-1 layer,
//   ascending, the optimizer on the rank's chunk of the layer, then the layer's all-gather of
//   updated values; then, between this step and the next, the metrics all-gather (world) and the
//   plan agreement (world broadcast from rank 0).
// An idle rank (in the world, left out of the plan) runs only the three world collectives.
//
// Collectives are listed once, in the order every member enters them: each rank's collective
// ops refer to ascending indices, which is what keeps overlapping groups deadlock-free.
// Plain value types; functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "sched/plan_schedules.h"
#include "sched/schedule.h"
#include "spec/model_spec.h"
#include "spec/plan.h"

namespace motley::sched {

enum class StepOpKind {
  kZeroGrads,           // local: zero this rank's gradients
  kPipeline,            // local + p2p: the stage's pipeline action list (RankStep::actions)
  kLayerAllReduce,      // collective: sum one layer's gradients over its group (f32)
  kLayerReduceScatter,  // collective, ZeRO-1: reduce-scatter of one layer's gradients (f32)
  kGradNorm,            // local: squared norm of the gradients this rank counts
  kLossNormAllReduce,   // collective, world: loss sum and squared-norm share (f64)
  kOptimizer,           // local: AdamW on the elements this rank updates
  kLayerAllGather,      // collective, ZeRO-1: all-gather of one layer's updated values (f32)
  kMetricsAllGather,    // collective, world, between steps: per-rank step metrics (f64)
  kPlanAgreement,       // collective, world, between steps: broadcast from rank 0 (f64)
};

// "zero-grads", "pipeline", "all-reduce", "reduce-scatter", "grad-norm", "loss-norm",
// "optimizer", "all-gather", "metrics", "plan-agreement".
std::string_view StepOpKindName(StepOpKind kind);
// Every kind but the local ones (zero-grads, pipeline, grad-norm, optimizer). Inline: the
// predictor's walk asks it of every op of every rank.
inline bool IsCollective(StepOpKind kind) {
  switch (kind) {
    case StepOpKind::kZeroGrads:
    case StepOpKind::kPipeline:
    case StepOpKind::kGradNorm:
    case StepOpKind::kOptimizer: return false;
    default: return true;
  }
}
// The metrics all-gather and the plan agreement: after the step's last update, before the next.
inline bool IsBetweenSteps(StepOpKind kind) {
  return kind == StepOpKind::kMetricsAllGather || kind == StepOpKind::kPlanAgreement;
}

// One collective call, the same on every member.
struct Collective {
  StepOpKind kind = StepOpKind::kLayerAllReduce;
  int64_t layer = -1;        // layer collectives: the gradient layer (spec/plan_topology.h); -1
  bool mixed = false;        // a layer all-reduce over mixed TP degrees (full-size buffers)
  int tp_rank = 0;           // uniform layer groups: the TP rank whose shards the group sums
  int element_bytes = 4;     // 4 (f32 gradients and values) or 8 (f64 world messages)
  std::vector<int> members;  // world ranks, in the communicator's rank order (ascending)
  // Elements of the whole buffer: all-reduce and broadcast data, reduce-scatter input,
  // all-gather output.
  int64_t elements = 0;
  // Reduce-scatter and all-gather: each member's chunk (core/even_counts.h over `elements`);
  // empty for the others.
  std::vector<int64_t> chunks;

  // Bytes of the tensor member `q` (index into members) passes in: the whole buffer, except an
  // all-gather's input, which is the member's chunk.
  int64_t InputBytes(size_t q) const;
};

struct StepOp {
  StepOpKind kind = StepOpKind::kZeroGrads;
  int collective = -1;  // collectives: index into StepProgram::collectives
  // Layer collectives: the gradient layer (also in the collective); an optimizer op on a ZeRO-1
  // chunk: the layer whose chunk it updates (-1: the whole tensors).
  int64_t layer = -1;
  // Local ops: the elements the op touches on this rank. zero-grads: its parameters;
  // grad-norm: the gradient elements it squares on the device (pipeline 0 counts each logical
  // parameter once: TP rank 0 every local tensor, the others their shards; ZeRO-1 layers sum
  // their chunk on the host, not counted here); optimizer: the elements AdamW updates (the whole
  // tensors of layers not sharded; or, with `layer` set, the rank's chunk of that ZeRO-1 layer,
  // staged through host memory: three copies of the chunk beside the update).
  int64_t elements = 0;
};

// Tensor-parallel all-reduces (sum, f32, one (b, T, C) activation each) inside one micro-batch's
// Forward and Backward action on a stage of `num_blocks` blocks and TP degree > 1, in the model's
// call order (model/tp_group.h, Megatron's f and g): per block 2 in the forward (after o_proj and
// down_proj) and 2 in the backward (the input gradients of q/k/v and gate/up); full recompute
// reruns each block's forward inside its backward, 2 more per block. Embedding and head are
// replicated on every TP rank and communicate nothing. The predictor's stage costs read this.
struct TpAllReduces {
  int64_t forward = 0;   // per Forward action
  int64_t backward = 0;  // per Backward action
};
TpAllReduces TpAllReducesPerMicroBatch(int64_t num_blocks, spec::Recompute recompute);

// What a rank does for one model chunk it holds: one per device group's chunk under interleaved
// 1F1B (virtual stage chunk * p + stage, spec::PipelinePlan), one chunk without interleaving.
struct ChunkStep {
  int virtual_stage = 0;  // index into the pipeline's stages (plan order)
  // Pipeline peers, world ranks (spec::BoundaryPeer, BoundaryReceivers): the sender of this
  // chunk's activations (-1 on virtual stage 0) and the receivers of its own (the next virtual
  // stage's, across the wrap from device group p - 1 to group 0 under interleaving); the sender of
  // its output gradient (-1 on the last virtual stage) and the receivers of its input gradient. A
  // send action of this chunk sends one message to each receiver, a receive action takes one from
  // the sender.
  int forward_source = -1;
  std::vector<int> forward_destinations;
  int backward_source = -1;
  std::vector<int> backward_destinations;
  // Tensor parallelism (tp_degree > 1): the all-reduces of message_bytes each that every Forward
  // and Backward action of this chunk runs over the rank's TP group; zero without.
  TpAllReduces tp_all_reduces;
};

struct RankStep {
  int rank = 0;        // world rank
  int device = 0;      // cluster device id
  int pipeline = -1;   // -1 when idle
  int stage = -1;      // device group in the pipeline (0 .. p - 1)
  int tp_rank = 0;
  int tp_degree = 1;
  bool idle() const { return pipeline < 0; }
  std::vector<Action> actions;  // the pipeline op's action list; empty when idle
  // By model chunk (an action's `chunk` indexes it): one entry without interleaving, v with;
  // empty when idle.
  std::vector<ChunkStep> chunks;
  int64_t message_bytes = 0;  // one activation or gradient: micro_batch_size * seq_len * hidden f32
  // Tensor parallelism (tp_degree > 1): the stage's TP group as world ranks in TP-rank order.
  // Empty without tensor parallelism.
  std::vector<int> tp_members;
  std::vector<StepOp> ops;      // in execution order
};

struct StepProgram {
  spec::PipelineSchedule schedule = spec::PipelineSchedule::k1F1B;
  bool zero1 = false;
  std::vector<RankStep> ranks;          // by world rank
  std::vector<Collective> collectives;  // in entry order
  // Device id -> world rank, -1 for a device outside the world (ids up to the largest the world
  // or the plan names); RankOfDevice reads it.
  std::vector<int> rank_of_device;
  PlanSchedules schedules;  // the schedules the pipeline ops were built from
  // The world rank of `device`, -1 when it is not in the world.
  int RankOfDevice(int device) const {
    return device >= 0 && static_cast<size_t>(device) < rank_of_device.size()
               ? rank_of_device[static_cast<size_t>(device)]
               : -1;
  }
};

struct StepProgramOptions {
  // The world: rank r drives world_devices[r] (ascending, distinct). Empty: the plan's devices
  // (spec::PlanDevices). Devices the plan leaves out are idle ranks.
  std::vector<int> world_devices;
  // Straggler link reports on an emulated cluster: each rank's metrics carry
  // kLinkTrafficDoublesPerRank doubles per world rank beside kStepMetricsDoubles.
  bool link_reports = false;
  // Fill RankStep::actions (readers that walk the schedule themselves, as the predictor's closed
  // form does, skip the copy).
  bool with_actions = true;
};

// Builds the program of one step of `plan` (structurally valid: spec::ValidatePlan) for `model`
// at sequence length `seq_len`.
// Errors when a world is given that lacks a device of the plan, or when a pipeline's schedule
// cannot be built.
Result<StepProgram> BuildStepProgram(const spec::Plan& plan, const spec::ModelSpec& model,
                                     int64_t seq_len, const StepProgramOptions& options = {});

// The collectives that start together: runs of consecutive collectives of one layer and kind
// (a layer's data-parallel groups, its TP colours, which their members enter at once); a world
// collective is a run of its own. [first, end) index ranges into program.collectives, in order.
// The predictor counts the flows of one run as sharing the network at once.
std::vector<std::pair<size_t, size_t>> ConcurrentCollectiveSets(const StepProgram& program);
// The cluster devices of a collective's members, in member order.
std::vector<int> CollectiveDevices(const StepProgram& program, const Collective& collective);

// Checks the program's own consistency: every collective's members list it exactly once, at
// ascending positions in their op lists, with its members ascending; chunks sum to the buffer.
// Errors name the rank and op.
Status CheckStepProgram(const StepProgram& program);

// Human-readable listing, a block per rank (docs/formats/step-program.md), e.g.
//   rank 1 (device 1): pipeline 0 stage 1, tp 0 of 1
//     zero-grads 3328
//     pipeline RF0 F0 B0 SB0 (from 0; gradients to [0]; 4096 B)
//     all-reduce layer 3 [1 3] 4224 B
// A rank of a TP group adds a line under its pipeline op, e.g.
//       tp all-reduces [2 3]: 4 per forward, 4 per backward, 4096 B
// `max_actions` caps the actions printed per pipeline op (then "... (N more)"); 0: all.
std::string StepProgramToString(const StepProgram& program, int64_t max_actions = 0);

}  // namespace motley::sched
