// Compute cost models (docs/architecture.md §8): the time of one transformer block, the embedding
// and the LM head, forward and backward, for one micro-batch on one device of a TP group.
// Tensor-parallel communication is not included (the predictor adds it from the link classes).
//
// Contract: ComputeModel implementations are immutable after construction; all methods are const
// and thread-safe. `device_type` indexes ClusterSpec::device_types of the cluster the model was
// built for. Callers own the models; a ProfiledComputeModel keeps a reference to its fallback,
// which must outlive it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/units.h"
#include "perf/flops.h"
#include "perf/profile.h"
#include "perf/settings.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"

namespace motley::perf {

struct PassTimes {
  Seconds forward_s = 0;
  Seconds backward_s = 0;  // without recompute
};

class ComputeModel {
 public:
  virtual ~ComputeModel() = default;
  // One transformer block on one rank of a TP group of `tp` devices.
  virtual PassTimes Block(int device_type, int tp, int64_t b, int64_t s) const = 0;
  // Forward time that selective recompute repeats in the backward (the attention products).
  virtual Seconds AttentionRecompute(int device_type, int tp, int64_t b, int64_t s) const = 0;
  // Token embedding (lookup forward, scatter-add backward).
  virtual PassTimes Embedding(int device_type, int tp, int64_t b, int64_t s) const = 0;
  // Final norm + LM head + softmax cross-entropy.
  virtual PassTimes Head(int device_type, int tp, int64_t b, int64_t s) const = 0;
  // Copies a stage makes around its pipeline transfers, per micro-batch: with `has_prev` the
  // received activation is copied in (forward) and the input gradient copied out for sending
  // (backward); with `has_next` the received output gradient is copied in (backward). Default 0.
  virtual PassTimes StageCopies(int device_type, int tp, int64_t b, int64_t s, bool has_prev,
                                bool has_next) const;
  // Per-step work of one device on the `params` parameters it holds (not per micro-batch):
  // the optimizer update (AdamW), zeroing the gradients before the step, the gradient-norm pass,
  // and staging the gradients through host memory around a data-parallel all-reduce (read and
  // write back). Only OptimizerStep is required; the others default to 0 (folded into it).
  virtual Seconds OptimizerStep(int device_type, double params) const = 0;
  virtual Seconds ZeroGrads(int device_type, double params) const;
  virtual Seconds GradNorm(int device_type, double params) const;
  virtual Seconds GradStaging(int device_type, double params) const;
};

// Achieved fraction of peak FLOP/s as a step function of one matmul's FLOPs. Default steps from
// Calculon (Isaev et al. SC'23) for A100, as quoted in performance-model.md: >= 128 GFLOP -> 0.99,
// >= 16 -> 0.90, >= 1 -> 0.60; smaller matmuls also get 0.60 and are usually limited by the
// memory roofline instead (an assumption, not from the source).
struct EfficiencyCurve {
  std::vector<std::pair<Flops, double>> steps = {{128e9, 0.99}, {16e9, 0.90}, {1e9, 0.60}};
  double below = 0.60;
  double At(Flops flops) const;
  double Max() const;  // the best efficiency of the curve (for the compute bound)
};

// Roofline with an efficiency curve: each matmul takes max(FLOPs / (peak * eff), bytes / memory
// bandwidth); the memory-bound elementwise ops (norms, residuals, RoPE, SwiGLU, softmax without
// fused attention, cross-entropy) take bytes / memory bandwidth. Backward: twice the forward.
class RooflineComputeModel final : public ComputeModel {
 public:
  RooflineComputeModel(const spec::ClusterSpec& cluster, const spec::ModelSpec& model,
                       const PerfSettings& settings, EfficiencyCurve curve = {});
  PassTimes Block(int device_type, int tp, int64_t b, int64_t s) const override;
  Seconds AttentionRecompute(int device_type, int tp, int64_t b, int64_t s) const override;
  PassTimes Embedding(int device_type, int tp, int64_t b, int64_t s) const override;
  PassTimes Head(int device_type, int tp, int64_t b, int64_t s) const override;
  // Memory-bound AdamW: bytes touched per parameter / memory bandwidth (see compute_model.cc).
  Seconds OptimizerStep(int device_type, double params) const override;
  const EfficiencyCurve& curve() const { return curve_; }

 private:
  struct TypeSpeed {
    FlopsPerSecond peak = 0;
    BytesPerSecond memory_bandwidth = 0;
  };
  Seconds MatmulTime(const TypeSpeed& speed, const MatmulShape& mm, double batch) const;
  const TypeSpeed& Speed(int device_type) const;

  spec::ModelSpec model_;
  PerfSettings settings_;
  EfficiencyCurve curve_;
  std::vector<TypeSpeed> speeds_;
};

// Measured per-block times from a profile (docs/formats/profile.md) where an entry matches the
// device type name, TP degree and sequence length; another micro-batch size of the same (type, tp,
// s) is scaled by the fallback's time ratio (so the measured efficiency carries over); anything
// else goes to the fallback.
class ProfiledComputeModel final : public ComputeModel {
 public:
  ProfiledComputeModel(Profile profile, const spec::ClusterSpec& cluster,
                       const ComputeModel& fallback);
  PassTimes Block(int device_type, int tp, int64_t b, int64_t s) const override;
  Seconds AttentionRecompute(int device_type, int tp, int64_t b, int64_t s) const override;
  PassTimes Embedding(int device_type, int tp, int64_t b, int64_t s) const override;
  PassTimes Head(int device_type, int tp, int64_t b, int64_t s) const override;
  // Not profiled: the fallback's.
  PassTimes StageCopies(int device_type, int tp, int64_t b, int64_t s, bool has_prev,
                        bool has_next) const override;
  Seconds OptimizerStep(int device_type, double params) const override;
  Seconds ZeroGrads(int device_type, double params) const override;
  Seconds GradNorm(int device_type, double params) const override;
  Seconds GradStaging(int device_type, double params) const override;
  // True when some profile entry covers this device type.
  bool Covers(int device_type) const;

 private:
  enum class Part { kBlock, kEmbedding, kHead };
  Seconds StepPerParam(int device_type) const;  // 0 when not measured
  PassTimes Lookup(Part part, int device_type, int tp, int64_t b, int64_t s) const;

  Profile profile_;
  const ComputeModel& fallback_;
  std::vector<int> profile_of_type_;  // index into profile_.devices, -1 when none
};

}  // namespace motley::perf
