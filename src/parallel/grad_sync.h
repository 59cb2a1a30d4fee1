// GradientSync: per-layer data-parallel gradient groups across replicas of any shape
// (docs/architecture.md §5).
//
// Layers: the embedding, each transformer block, and the head (final norm + LM head) are layers of
// their own. The group of a layer is every rank, in any pipeline, whose stage holds it, so
// replicas with different stage splits still sum the right gradients. Two layouts per group:
//  - uniform (every holding stage has the same TP degree d): one group per TP rank, holding the
//    matching shard of every replica; the local gradients are summed as they are (ordinary DP);
//  - mixed TP degrees: one group of all holders; each rank writes its shards into a zeroed buffer
//    of the layer's full (logical) size, replicated tensors only from TP rank 0, the buffer is
//    summed over the group, and each rank takes its slices back ("gather to a common layout").
// After Reduce every holder of a tensor (slice) holds the same sum, so AdamW on every rank's own
// copy keeps the replicas equal.
//
// ZeRO-1 (the plan's optimizer_sharding, as the step program lists it): each uniform layer group of two or more members shards its AdamW
// moments instead (parallel/zero1.h): Reduce reduce-scatters the layer's gradients, StepSharded
// updates each member's chunk and all-gathers the values. The rank's model::Optimizer must skip
// those tensors (sharded_params()). Mixed-TP groups and ranks alone with a layer keep the
// replicated path.
//
// The global gradient norm counts each logical parameter once: the ranks of pipeline 0 (which,
// like every pipeline, holds the whole model) contribute their shards, replicated tensors from TP
// rank 0 only; the caller sums NormContribution over the world. A ZeRO-1 layer counts each
// member's chunk instead (every pipeline), replicated tensors from TP rank 0's group only.
//
// Ownership: references the Backend and ParameterSet (must outlive it); owns its communicators.
// Thread safety: used by its rank's thread only. Collectives run in ascending layer order on every
// rank, which keeps overlapping groups deadlock-free.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/parameters.h"
#include "parallel/rank_clock.h"
#include "parallel/world_layout.h"
#include "parallel/zero1.h"
#include "sched/step_program.h"
#include "spec/model_spec.h"
#include "tensor/backend.h"

namespace motley::parallel {

// Layer index of a parameter name: 0 embedding, 1 + i block i, num_blocks + 1 the head; -1 when
// the name is not a model parameter.
int LayerOfParameter(std::string_view name, int64_t num_blocks);

class GradientSync {
 public:
  // The groups, their sizes and which of them shard ZeRO-1 state are the step program's
  // (sched/step_program.h, built for this layout's world): rank `rank` joins, per layer, the
  // layer collective its RankStep lists. Errors when the program disagrees with the parameters
  // the rank holds (a layer it holds without parameters, a buffer size that differs).
  // Collective over `world` (num_blocks + 2 Split calls, the same on every rank of the layout,
  // idle ranks included: they hold no layer).
  static Result<std::unique_ptr<GradientSync>> Create(const WorldLayout& layout, int rank,
                                                      const spec::ModelSpec& model,
                                                      const sched::StepProgram& program,
                                                      comm::Communicator& world,
                                                      tensor::Backend& backend,
                                                      model::ParameterSet& params,
                                                      RankClock clock = {});

  // Sums every gradient over its layer's group, in place. Collective over the groups.
  Status Reduce();
  // Sum of squared gradient entries that this rank counts for the global norm (see above).
  double NormContribution() const;
  // ZeRO-1: AdamW (`adamw`, weight decay `weight_decay` on tensors marked for it) on this rank's
  // chunks, then the values all-gathered. Collective over the ZeRO-1 groups; no-op without them.
  Status StepSharded(const tensor::AdamWParams& adamw, float weight_decay);
  // ZeRO-1: makes every tensor's AdamW moments whole (Parameter::m, ::v) for a checkpoint or a
  // migration; the next StepSharded shards them again. Collective; no-op without ZeRO-1.
  Status GatherMoments();
  // sharded_params()[i]: params[i] is updated by StepSharded, not by the rank's Optimizer.
  std::vector<bool> sharded_params() const;
  // Seconds (rank clock: emulated time on an emulated cluster) spent in Reduce since construction.
  double comm_seconds() const { return comm_s_; }

 private:
  struct Layer {
    int id = 0;
    bool mixed = false;                        // full-size buffer (mixed TP degrees)
    std::vector<size_t> params;                // indices into the ParameterSet
    std::unique_ptr<comm::Communicator> comm;  // nullptr when this rank is alone in its group
    tensor::Tensor buffer;                     // host staging, f32 (replicated path)
    std::unique_ptr<Zero1Layer> zero1;         // ZeRO-1 path (then no buffer)
  };

  GradientSync(tensor::Backend& backend, model::ParameterSet& params, bool counts_norm,
               int tp_rank, RankClock clock)
      : backend_(backend),
        params_(params),
        counts_norm_(counts_norm),
        tp_rank_(tp_rank),
        clock_(clock) {}
  void Pack(Layer& layer);
  void Unpack(Layer& layer);

  tensor::Backend& backend_;
  model::ParameterSet& params_;
  bool counts_norm_;
  int tp_rank_;
  RankClock clock_;
  std::vector<Layer> layers_;
  double comm_s_ = 0.0;
};

}  // namespace motley::parallel
