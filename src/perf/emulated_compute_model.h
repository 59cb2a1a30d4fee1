// EmulatedComputeModel: the compute model of the runtime on emulated devices (docs/architecture.md
// §6). It walks the op sequence that model/ (block.cc, stage.cc), the stage executor and the
// optimizer issue for one block, the embedding, the head, a stage's transfer copies and the
// per-step work, and charges every op exactly as backend/emulated does: max(FLOPs / flop/s, bytes /
// bandwidth) with FLOPs and bytes from the one cost table, spec/op_costs.h. So on an emulated
// cluster the predictor's compute times are the runtime's charged times, and what remains to
// predict is the schedule and the communication. TP ranks run their shard of the heads and of F;
// the embedding and head are replicated on every TP rank, as in model/parameters.cc.
//
// A device type without an `emulated` profile is charged at its fp32 peak and memory bandwidth
// (an ideal-kernel roofline). The model follows the op sequence of the code it mirrors; a change
// there needs the same change here (plan_vs_runtime_test fails otherwise).
//
// Immutable after construction; const methods are thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "perf/compute_model.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "spec/op_costs.h"

namespace motley::perf {

class EmulatedComputeModel final : public ComputeModel {
 public:
  EmulatedComputeModel(const spec::ClusterSpec& cluster, const spec::ModelSpec& model);
  PassTimes Block(int device_type, int tp, int64_t b, int64_t s) const override;
  // What selective recompute adds to a block's backward (spec/block_costs.h).
  Seconds AttentionRecompute(int device_type, int tp, int64_t b, int64_t s) const override;
  PassTimes Embedding(int device_type, int tp, int64_t b, int64_t s) const override;
  PassTimes Head(int device_type, int tp, int64_t b, int64_t s) const override;
  PassTimes StageCopies(int device_type, int tp, int64_t b, int64_t s, bool has_prev,
                        bool has_next) const override;
  Seconds OptimizerStep(int device_type, double params) const override;
  Seconds ZeroGrads(int device_type, double params) const override;
  Seconds GradNorm(int device_type, double params) const override;
  Seconds GradStaging(int device_type, double params) const override;

 private:
  struct Speed {
    FlopsPerSecond flops = 0;
    BytesPerSecond bandwidth = 0;
  };
  // Charged time of one op on a device of this type.
  Seconds Op(int device_type, const spec::costs::OpCost& cost) const;

  spec::ModelSpec model_;
  std::vector<Speed> speeds_;
};

}  // namespace motley::perf
