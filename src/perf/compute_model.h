// Compute cost models (docs/architecture.md §8): the time of one transformer block, the embedding
// and the LM head, forward and backward, for one micro-batch on one device of a TP group.
// Tensor-parallel communication is not included (the predictor adds it from the link classes).
// Three implementations: RooflineComputeModel (below: the analytical kernel model, for any
// device), ProfiledComputeModel (measured by `motley profile`; overrides the analytical model
// where it has entries) and EmulatedComputeModel (emulated_compute_model.h: the runtime's own op
// costs on emulated devices).
//
// Contract: ComputeModel implementations are immutable after construction; all methods are const
// and thread-safe. `device_type` indexes ClusterSpec::device_types of the cluster the model was
// built for. Callers own the models; a ProfiledComputeModel keeps a reference to its fallback,
// which must outlive it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/units.h"
#include "perf/compute_model_kernels.h"
#include "perf/profile.h"
#include "perf/settings.h"
#include "spec/cluster_spec.h"
#include "spec/model_flops.h"
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

// One kernel of a pass, as the analytical model times it (compute_model_kernels.h).
struct Kernel {
  enum class Kind { kGemm, kStream, kFusedAttention };
  Kind kind = Kind::kStream;
  const char* name = "";
  GemmShape gemm;   // kGemm
  Flops flops = 0;  // kFusedAttention: the FLOPs it performs
  Bytes bytes = 0;  // kStream and kFusedAttention: bytes read plus written
};
struct PassKernels {
  std::vector<Kernel> forward;
  std::vector<Kernel> backward;
};

// The kernels of one Llama block on one of `tp` TP ranks for a micro-batch of b sequences of s
// tokens (n = b*s; element bytes e from settings.precision; with sequence parallelism the
// norms and residual adds run on n/tp tokens). Forward: RMSNorm, fused QKV GEMM, RoPE on q and k,
// attention, output projection, residual add, RMSNorm, fused gate/up GEMM, SwiGLU, down GEMM,
// residual add. Attention unfused (settings.flash_attention false): the scores GEMM batched over
// b*a/tp heads, a fused scale-mask-softmax (read and write the s x s scores), the context GEMM;
// fused: one kernel performing the causal half of 4*b*(a/tp)*s^2*hs FLOPs. Backward: every GEMM
// (m, n, k) becomes its input gradient (m, k, n) and weight gradient (k, n, m); the unfused
// attention four batched GEMMs and the softmax backward (read probabilities and their gradient,
// write the scores' gradient); the fused one a kernel of 2.5x the forward FLOPs (FlashAttention-2's
// count, with its recompute); each memory-bound kernel its backward (norm: read x and dy, write
// dx; residual: one add; SwiGLU: read gate, up and dy, write two gradients; RoPE: as forward).
PassKernels BlockKernels(const spec::ModelSpec& model, int64_t b, int64_t s, int tp,
                         const PerfSettings& settings);
// The forward kernels that selective recompute repeats: the attention core (scores, softmax,
// context; or the fused kernel).
std::vector<Kernel> AttentionCoreKernels(const spec::ModelSpec& model, int64_t b, int64_t s, int tp,
                                         const PerfSettings& settings);
// Token embedding: a gather (read rows, write the (n, h) activation) and its scatter-add.
PassKernels EmbeddingKernels(const spec::ModelSpec& model, int64_t b, int64_t s, int tp,
                             const PerfSettings& settings);
// Final RMSNorm, the LM head GEMM over this rank's V/tp vocabulary rows, and the softmax cross-
// entropy in fp32 (forward: read logits, write probabilities, read them back; backward: two
// passes), with the backward GEMMs and norm.
PassKernels HeadKernels(const spec::ModelSpec& model, int64_t b, int64_t s, int tp,
                        const PerfSettings& settings);

// Time of one kernel, and of a list run back to back, on a device with these rates.
Seconds KernelTime(const KernelRates& rates, const Kernel& kernel);
Seconds KernelsTime(const KernelRates& rates, const std::vector<Kernel>& kernels);

// The analytical compute model (named for the roofline each kernel is: the larger of its
// compute and memory time): every pass is its kernels above, each timed by the formulas of
// compute_model_kernels.h with the device type's calibration (spec::DeviceType; presets fill it
// from spec/device_presets.h). Thread-safe (an internal cache is locked). The optimizer step (with the gradient zeroing and norm it folds in)
// is its bytes at the achievable bandwidth.
class RooflineComputeModel final : public ComputeModel {
 public:
  RooflineComputeModel(const spec::ClusterSpec& cluster, const spec::ModelSpec& model,
                       const PerfSettings& settings);
  PassTimes Block(int device_type, int tp, int64_t b, int64_t s) const override;
  Seconds AttentionRecompute(int device_type, int tp, int64_t b, int64_t s) const override;
  PassTimes Embedding(int device_type, int tp, int64_t b, int64_t s) const override;
  PassTimes Head(int device_type, int tp, int64_t b, int64_t s) const override;
  // Memory-bound: bytes touched per parameter / achievable bandwidth (compute_model.cc), the
  // zeroing and norm passes included (ZeroGrads and GradNorm stay 0).
  Seconds OptimizerStep(int device_type, double params) const override;
  // The rates the kernels of `device_type` run at (the run's precision).
  const KernelRates& Rates(int device_type) const;

 private:
  enum class Part { kBlock, kEmbedding, kHead, kAttentionCore };
  // The pass times of a part, computed once per (part, type, tp, b, s) and then remembered (the
  // planner asks for the same shapes many times); the cache is guarded by a mutex.
  PassTimes Cached(Part part, int device_type, int tp, int64_t b, int64_t s) const;

  spec::ModelSpec model_;
  PerfSettings settings_;
  std::vector<KernelRates> rates_;
  mutable std::mutex cache_mutex_;
  mutable std::map<std::tuple<Part, int, int, int64_t, int64_t>, PassTimes> cache_;
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
