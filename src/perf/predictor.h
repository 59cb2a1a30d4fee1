// Iteration-time predictor (docs/architecture.md §8): the time of a plan's training step on a
// cluster, for uneven pipelines and replicas of different shapes, modelled on the step motley's
// runtime runs (predict_step.cc, the step program op by op): per-stage forward/backward time
// (compute model + TP all-reduces + recompute + the stage's transfer copies, times the slowest
// device's straggler rate); each pipeline's action list walked with eager sends over its
// boundary links (perf/step_model.h); per-layer data-parallel collectives in layer order (every
// stage in any pipeline holding the layer); the world all-reduce of loss and gradient norm; the
// optimizer step; and the skew the per-step metrics all-gather leaves between ranks (the step is
// the makespan from the earliest rank's start to the latest rank's end, as the runtime reports
// it). Transfers share the network (perf/network.h) in closed form: per set of transfers that
// start together, plus the other sets' transfers that overlap them in time as weighted
// background. Plus memory per device, tokens/s and MFU. PipelineClosedForm (below) is the
// planner's fast closed-form estimate of one pipeline. The simulator (sim/) replays the same
// step program event by event over the same network model; it is the predictor's reference.
//
// Ownership: a Predictor keeps references to the cluster, model, train spec and compute model,
// which must outlive it. Thread safety: const methods are thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/units.h"
#include "perf/comm_model.h"
#include "perf/compute_model.h"
#include "perf/memory_model.h"
#include "perf/network.h"
#include "perf/settings.h"
#include "sched/step_program.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "spec/plan.h"
#include "spec/train_spec.h"

namespace motley::perf {

// Straggler rate per global device id (measured / expected time; 1 = healthy). Empty = all 1.
using StragglerRates = std::vector<double>;

// Straggler rate per link (docs/architecture.md §9): device pair -> slowdown of every transfer
// between the two devices, both directions (measured / expected time; 1 = healthy; a pair not
// listed is healthy). Carried next to StragglerRates and applied where the predictor computes a
// link's time (Predictor::LinkOf): latency times the rate, bandwidth over it.
struct LinkRates {
  std::map<std::pair<int, int>, double> slowdown;  // key (a, b) with a < b
  bool empty() const { return slowdown.empty(); }
  // The slowdown of a <-> b (1 when not listed).
  double At(int a, int b) const;
  // Sets a <-> b to `rate` (a rate of 1 removes the entry).
  void Set(int a, int b, double rate);
  bool operator==(const LinkRates& other) const { return slowdown == other.slowdown; }
};

struct StageCost {
  Seconds forward_s = 0;   // one micro-batch, TP comm included
  Seconds backward_s = 0;  // one micro-batch, recompute and TP comm included
};

// Closed-form timing of one pipeline.
struct PipelineTiming {
  Seconds time_s = 0;                       // start of the step to the last backward of stage 0
  std::vector<Seconds> last_backward_end_s;  // per stage
};

// One pipeline's stage costs and boundary transfer times -> closed form (see predictor.cc).
PipelineTiming PipelineClosedForm(const std::vector<StageCost>& stages,
                                  const std::vector<Seconds>& p2p_s, int64_t micro_batches,
                                  spec::PipelineSchedule schedule);

// One pipeline phase of p device groups with equal stages and no communication, in units of one
// micro-batch's forward and backward through one group: m + (p - 1) / v. With one chunk (v = 1)
// this is PipelineClosedForm's fill + (m - 1) * worst for equal stages; interleaved over v chunks
// (m a multiple of p) it is Megatron-LM's bubble (p - 1) / v. Both equal the exact walk of the
// step program's action lists (PipelinePhaseEnds; tested). What the planner scales a predicted
// phase by to estimate the same pipeline at another micro-batch count or chunk count.
double EqualStagePhaseSlots(int64_t groups, int64_t micro_batches, int chunks);

struct StagePrediction {
  StageCost cost;
  Seconds p2p_next_s = 0;      // activation (and gradient) transfer to/from the next stage
  Seconds last_backward_end_s = 0;
  Seconds dp_start_s = 0;      // when every stage sharing a layer has finished its backwards
  Seconds dp_sync_s = 0;       // layer collectives of the stage (all-reduces; ZeRO-1 RS + AG)
  Seconds optimizer_s = 0;
  Seconds finish_s = 0;        // end of the optimizer step
  StageMemory memory;          // per device (interleaved: its group's chunks, on each of them)
  Bytes capacity = 0;          // device memory
  int device_type = 0;
};

struct Prediction {
  Seconds iteration_s = 0;
  Seconds pipeline_s = 0;       // the slowest pipeline's backward end
  Seconds exposed_dp_s = 0;     // iteration_s - pipeline_s - the optimizer step on that path
  Seconds optimizer_s = 0;      // the longest optimizer step
  double tokens_per_s = 0;
  double mfu = 0;               // model FLOPs / (iteration * sum of used devices' peak)
  Flops model_flops = 0;        // per iteration, no recompute
  std::vector<Seconds> pipeline_time_s;            // per pipeline
  std::vector<std::vector<StagePrediction>> stages;  // [pipeline][stage]
  std::vector<Bytes> peak_memory_per_type;          // max over that type's devices; 0 if unused
  bool fits_memory = true;
  std::string memory_violation;  // the worst over-capacity stage, "" when it fits
};

class Predictor {
 public:
  Predictor(const spec::ClusterSpec& cluster, const spec::ModelSpec& model,
            const spec::TrainSpec& train, const ComputeModel& compute, PerfSettings settings);

  // Predicts a plan that passes spec::ValidatePlan (not re-checked here). `program`: the plan's
  // step program, StepProgramFor(plan), where the caller has it; nullptr: built here.
  Prediction Predict(const spec::Plan& plan, const StragglerRates& rates = {},
                     const LinkRates& links = {},
                     const sched::StepProgram* program = nullptr) const;
  // The step program Predict and StepLowerBound read: sched::BuildStepProgram over the plan's
  // devices, without the action lists (the predictor walks its own schedule).
  sched::StepProgram StepProgramFor(const spec::Plan& plan) const;
  // How each world rank of `program` (a step program of `plan`) is timed: its device's type and
  // its stage's straggler rate (GroupRate over the stage's devices); rate 1 on an idle rank.
  struct RankTiming {
    int type = 0;
    double rate = 1;
  };
  std::vector<RankTiming> RankTimings(const spec::Plan& plan, const sched::StepProgram& program,
                                      const StragglerRates& rates) const;
  // The link class between devices a and b (cluster().LinkBetween) slowed by `links`.
  spec::LinkClass LinkOf(int a, int b, const LinkRates& links) const;
  // The network path of a transfer from a to b over that slowed link (Network::Path).
  FlowPath PathOf(int a, int b, const LinkRates& links) const;

  // Building blocks shared with the simulator and the planner.
  StageCost StageCostOf(const spec::StagePlan& stage, int64_t micro_batch_size,
                        spec::Recompute recompute, const StragglerRates& rates,
                        const LinkRates& links = {}) const;
  // Same, for a stage described by its shape (device type, TP group's intra-node link; nullptr
  // leaves the TP all-reduces out: the stage's compute alone).
  StageCost StageCostOfShape(int device_type, int tp, const spec::LinkClass* intra_link,
                             int64_t num_blocks, bool has_embedding, bool has_head,
                             int64_t micro_batch_size, spec::Recompute recompute,
                             double rate) const;
  // Transfer times over every pipeline boundary of a plan, [pipeline][boundary] (boundary i joins
  // stages i and i + 1): an activation i -> i + 1 (fwd_s) and a gradient i + 1 -> i (bwd_s). Every
  // TP rank of the receiving stage takes the whole message from its boundary peer
  // (spec::BoundaryPeer), and replicas run in lockstep, so the transfers of one direction run at
  // once: their flows share the network (perf/network.h, FairShare) and a boundary's transfer
  // lasts until its slowest flow arrives, latency + message bytes / rate. 0 between stages on one
  // device.
  struct BoundaryTimes {
    std::vector<std::vector<Seconds>> fwd_s;
    std::vector<std::vector<Seconds>> bwd_s;
    // The least each transfer can take under any sharing, the same shape: its slowest flow
    // alone, latency + message bytes / the least of its cap and the capacities it crosses. At
    // most fwd_s / bwd_s, with or without costs (the bound of perf::PipelinePhaseLowerBound).
    std::vector<std::vector<Seconds>> fwd_floor_s;
    std::vector<std::vector<Seconds>> bwd_floor_s;
    // The slower direction of boundary `boundary` of pipeline `pipeline`.
    Seconds Of(size_t pipeline, size_t boundary) const {
      return std::max(fwd_s[pipeline][boundary], bwd_s[pipeline][boundary]);
    }
  };
  // With the plan's stage costs ([pipeline][stage]) and sharing on, the times are then refined
  // by when transfers overlap in a walk of the action lists (boundary_times.cc).
  BoundaryTimes SolveBoundaryTimes(
      const spec::Plan& plan, const LinkRates& links = {},
      const std::vector<std::vector<StageCost>>* costs = nullptr) const;
  // A proven lower bound on Predict(plan', rates, links).iteration_s for `plan` and every plan'
  // that differs from it only in stages' recompute (perf/step_bound.cc): the pipeline phase at
  // the lightest recompute and transfers at their floors, then each rank's local ops and
  // collectives at their floors. For the planner, to skip plans that cannot win; Predict's
  // callers may check it. Cheaper than Predict: no walk of the schedule, and no network solve
  // but SolveBoundaryTimes(plan, links) for the transfers' floors, which a caller that has it
  // passes as `boundary`, and StepProgramFor(plan), as `program` (as Predict's).
  Seconds StepLowerBound(const spec::Plan& plan, const StragglerRates& rates = {},
                         const LinkRates& links = {}, const BoundaryTimes* boundary = nullptr,
                         const sched::StepProgram* program = nullptr) const;
  // Whether a collective of this kind takes the best algorithm (TimeAllReduceSet): layer and
  // loss-norm all-reduces unless the runtime's ring engine is modelled (ring_collectives);
  // reduce-scatters, all-gathers and the broadcast are always its rings.
  bool UsesBestAllReduce(sched::StepOpKind kind) const {
    return !settings_.ring_collectives && (kind == sched::StepOpKind::kLayerAllReduce ||
                                           kind == sched::StepOpKind::kLossNormAllReduce);
  }
  // Bytes per element of a step-program collective as timed: a layer collective's gradients (or
  // values) at GradientElementBytes of the settings, the world's messages at their own size.
  double ElementBytesOf(const sched::Collective& collective) const {
    return collective.layer >= 0 ? GradientElementBytes(settings_)
                                 : static_cast<double>(collective.element_bytes);
  }
  // All-reduces of `bytes` each over concrete device groups that start together (one layer's
  // data-parallel groups, its TP colours; the world's loss-norm all-reduce alone), by the best
  // algorithm (comm_model.h AllReduceCandidates) with their flows sharing the network: for each
  // algorithm every group takes it (the ring where a group has no hierarchy), the set lasts as
  // long as its slowest group (ConcurrentCollectiveTimes), and the fastest algorithm is chosen,
  // as NCCL's tuner chooses one per call. The simulator replays the chosen `flows`.
  struct AllReduceSetTiming {
    std::vector<CollectiveFlows> flows;  // per group: the chosen algorithm's phases
    std::vector<Seconds> time_s;         // per group
  };
  AllReduceSetTiming TimeAllReduceSet(const std::vector<std::vector<int>>& groups, Bytes bytes,
                                      const LinkRates& links = {}) const;
  Bytes ActivationMessageBytes(int64_t micro_batch_size) const;
  // Optimizer step of a stage's devices (memory-bound: bytes touched per parameter / bandwidth).
  Seconds OptimizerTime(int device_type, double params_per_device, double rate) const;

  // A local op of the step program (zero-grads, grad-norm, optimizer; 0 for the others) on a
  // device of type `device_type` at straggler rate `rate`, as Predict charges it: a ZeRO-1
  // chunk's optimizer op (op.layer set) also copies the chunk three times through host memory.
  Seconds LocalOpTime(int device_type, double rate, const sched::StepOp& op) const;
  // Host staging of a layer collective's buffer of `params` elements on one member: packing
  // before and unpacking after (half each; a reduce-scatter's output stays on the host).
  Seconds StagingTime(int device_type, double rate, double params) const {
    return rate * compute_.GradStaging(device_type, params);
  }
  // Bytes per device of a stage described by `in`, by the memory model Predict uses: in the
  // runtime's configuration (RunsAsTheRuntime) RuntimeRankMemory with the 1F1B/GPipe transfer
  // buffers of the stage's position and AdamW moments of its parameters (divided by dp under
  // ZeRO-1, the largest tensor's share as the update temporaries), else StageMemoryPerDevice.
  // The planner's fast check of how many blocks a stage holds; Predict's per-rank figure from
  // the step program stays the final word (ZeRO-1 chunks may differ by a few elements).
  Bytes StageMemoryForPlanning(const StageMemoryInput& in, spec::PipelineSchedule schedule) const;
  // Predict's memory check of a plan without building its step program or its schedules: each
  // stage at its schedule's in-flight count (sched::InFlightWithoutInterleaving) and the ZeRO-1
  // degree the step program gives it (a layer is sharded over its holders when they are two or more
  // with one TP degree; a stage's degree is its layers' smallest, 1 when one of them is not
  // sharded). Outside the runtime's configuration that is Predict's own estimate, so the verdict is
  // exact (kFits or kOver, with Predict's violation text); in it, Predict counts each rank's ZeRO-1
  // chunks, which the stage estimate rounds differently by a few elements, so it says kFits with a
  // margin for that, else kUnknown. For the planner, which skips predicting plans it knows the
  // answer for.
  enum class MemoryVerdict { kFits, kOver, kUnknown };
  struct PlanMemoryCheck {
    MemoryVerdict verdict = MemoryVerdict::kUnknown;
    std::string violation;  // kOver: as Prediction::memory_violation
  };
  PlanMemoryCheck CheckPlanMemory(const spec::Plan& plan) const;
  // Predict(plan, rates, links), except for a plan CheckPlanMemory proves over memory, which is
  // not walked: its Prediction has only fits_memory false, Predict's memory_violation text and
  // iteration_s infinity. For searches that drop every plan over memory (the planner's polish,
  // reshaping and baselines), where it saves a prediction per move that does not fit.
  Prediction PredictIfFits(const spec::Plan& plan, const StragglerRates& rates = {},
                           const LinkRates& links = {}) const;
  // How many bytes more (negative: fewer) one device of stage `stage` of pipeline `pipeline`
  // holds when the stage's recompute changes from its own to `to`, by the memory model Predict
  // uses (FillMemoryAndRates); only the activations change. For the planner, which lightens a
  // stage's recompute where its memory allows without a full prediction per try.
  Bytes RecomputeMemoryChange(const spec::Plan& plan, int pipeline, int stage,
                              spec::Recompute to) const;

  // Sum of the devices' peak FLOP/s at the settings' precision (fp32 where a type gives none):
  // the denominator of MFU.
  FlopsPerSecond PeakFlopsSum(const std::vector<int>& devices) const;

  const spec::ClusterSpec& cluster() const { return cluster_; }
  const spec::ModelSpec& model() const { return model_; }
  const spec::TrainSpec& train() const { return train_; }
  const PerfSettings& settings() const { return settings_; }
  const ComputeModel& compute() const { return compute_; }
  // The shared network model (sharing on when the settings model NIC contention).
  const Network& network() const { return network_; }

 private:
  // Memory per stage (and the worst violation), tokens/s and MFU of a predicted step.
  // In the runtime's configuration (RunsAsTheRuntime) the memory is RuntimeRankMemory of each
  // stage's largest rank, from `program` (the step program Predict walked); else the
  // StageMemoryPerDevice estimate.
  void FillMemoryAndRates(const spec::Plan& plan, const sched::StepProgram& program,
                          Prediction* pred) const;
  // fp32 with unfused attention and no sequence parallelism: what motley's runtime runs, whose
  // tensors RuntimeRankMemory counts exactly.
  bool RunsAsTheRuntime() const;
  const spec::ClusterSpec& cluster_;
  const spec::ModelSpec& model_;
  const spec::TrainSpec& train_;
  const ComputeModel& compute_;
  PerfSettings settings_;
  Network network_;
};

// Max straggler rate over `devices` (1 when rates is empty).
double GroupRate(const StragglerRates& rates, const std::vector<int>& devices);

}  // namespace motley::perf
