// See compute_model.h.
#include "perf/compute_model.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace motley::perf {

PassTimes ComputeModel::StageCopies(int /*device_type*/, int /*tp*/, int64_t /*b*/,
                                    int64_t /*s*/, bool /*has_prev*/, bool /*has_next*/) const {
  return {};
}
Seconds ComputeModel::ZeroGrads(int /*device_type*/, double /*params*/) const { return 0; }
Seconds ComputeModel::GradNorm(int /*device_type*/, double /*params*/) const { return 0; }
Seconds ComputeModel::GradStaging(int /*device_type*/, double /*params*/) const { return 0; }

namespace {

Kernel Gemm(const char* name, double m, double n, double k, double batch = 1) {
  Kernel kernel;
  kernel.kind = Kernel::Kind::kGemm;
  kernel.name = name;
  kernel.gemm = {m, n, k, batch};
  return kernel;
}

Kernel Stream(const char* name, Bytes bytes) {
  Kernel kernel;
  kernel.kind = Kernel::Kind::kStream;
  kernel.name = name;
  kernel.bytes = bytes;
  return kernel;
}

Kernel Fused(const char* name, Flops flops, Bytes bytes) {
  Kernel kernel;
  kernel.kind = Kernel::Kind::kFusedAttention;
  kernel.name = name;
  kernel.flops = flops;
  kernel.bytes = bytes;
  return kernel;
}

// Appends the input-gradient and weight-gradient GEMMs of a forward GEMM (m, n, k).
void BackwardGemms(const Kernel& fwd, std::vector<Kernel>* out) {
  const GemmShape& g = fwd.gemm;
  out->push_back(Gemm(fwd.name, g.m, g.k, g.n, g.batch));  // dX = dY W^T
  out->push_back(Gemm(fwd.name, g.k, g.n, g.m, g.batch));  // dW = X^T dY
}

// Shapes of one block on one TP rank (letters as in flops.h).
struct Dims {
  double n = 0;     // tokens b*s
  double n_sp = 0;  // tokens of the norms and residual adds (n / tp under sequence parallelism)
  double b = 0, s = 0, h = 0, hs = 0, kv = 0, f = 0, t = 0;
  double heads = 0;  // a / tp
  double e = 0;      // bytes per element
};

Dims DimsOf(const spec::ModelSpec& model, int64_t b, int64_t s, int tp,
            const PerfSettings& settings) {
  MOTLEY_CHECK(tp >= 1 && b >= 1 && s >= 1, "compute model needs positive b, s and tp");
  Dims d;
  d.t = tp;
  d.b = static_cast<double>(b);
  d.s = static_cast<double>(s);
  d.n = d.b * d.s;
  d.n_sp = settings.sequence_parallel ? d.n / d.t : d.n;
  d.h = static_cast<double>(model.hidden);
  d.hs = static_cast<double>(model.head_size());
  d.kv = static_cast<double>(model.num_kv_heads * model.head_size());
  d.f = static_cast<double>(model.ffn_hidden);
  d.heads = static_cast<double>(model.num_heads) / d.t;
  d.e = ActivationElementBytes(settings);
  return d;
}

// Forward FLOPs of the attention products of one rank (the full s x s square, spec/model_flops.h's
// convention); a fused causal kernel performs half of them.
Flops AttentionSquareFlops(const Dims& d) {
  return 4.0 * d.b * d.heads * d.s * d.s * d.hs;
}

// Dropout on the (b, a/t, s, s) probabilities, unfused (PyTorch's dropout, as Megatron-LM runs
// it after its fused softmax): the forward reads P and writes the dropped P and a one-byte mask;
// the backward reads the incoming gradient and the mask and writes the gradient.
Bytes AttentionDropoutBytes(const Dims& d) { return d.b * d.heads * d.s * d.s * (2.0 * d.e + 1.0); }

void AttentionForward(const Dims& d, bool fused, bool dropout, std::vector<Kernel>* out) {
  if (fused) {
    const Bytes bytes = (2.0 * d.n * d.h / d.t + 2.0 * d.n * d.kv / d.t) * d.e;  // q, o, k, v
    out->push_back(Fused("flash attention", 0.5 * AttentionSquareFlops(d), bytes));
    return;
  }
  const double heads = d.b * d.heads;
  out->push_back(Gemm("attention scores", d.s, d.s, d.hs, heads));
  out->push_back(Stream("softmax", 2.0 * heads * d.s * d.s * d.e));
  if (dropout) out->push_back(Stream("attention dropout", AttentionDropoutBytes(d)));
  out->push_back(Gemm("attention context", d.s, d.hs, d.s, heads));
}

void AttentionBackward(const Dims& d, bool fused, bool dropout, std::vector<Kernel>* out) {
  if (fused) {
    const Bytes bytes = (3.0 * d.n * d.h / d.t + 2.0 * d.n * d.kv / d.t) * d.e * 2.0;
    out->push_back(Fused("flash attention backward", 2.5 * 0.5 * AttentionSquareFlops(d), bytes));
    return;
  }
  const double heads = d.b * d.heads;
  out->push_back(Gemm("attention dP = dO V^T", d.s, d.s, d.hs, heads));
  out->push_back(Gemm("attention dV = P^T dO", d.s, d.hs, d.s, heads));
  if (dropout) out->push_back(Stream("attention dropout backward", AttentionDropoutBytes(d)));
  out->push_back(Stream("softmax backward", 3.0 * heads * d.s * d.s * d.e));
  out->push_back(Gemm("attention dQ = dS K", d.s, d.hs, d.s, heads));
  out->push_back(Gemm("attention dK = dS^T Q", d.s, d.hs, d.s, heads));
}

}  // namespace

PassKernels BlockKernels(const spec::ModelSpec& model, int64_t b, int64_t s, int tp,
                         const PerfSettings& settings) {
  const Dims d = DimsOf(model, b, s, tp, settings);
  const bool fused = settings.flash_attention;
  const Kernel qkv = Gemm("qkv", d.n, (d.h + 2.0 * d.kv) / d.t, d.h);
  const Kernel out = Gemm("attention output", d.n, d.h, d.h / d.t);
  const Kernel gate_up = Gemm("gate/up", d.n, 2.0 * d.f / d.t, d.h);
  const Kernel down = Gemm("down", d.n, d.h, d.f / d.t);
  const Kernel norm = Stream("rmsnorm", 2.0 * d.n_sp * d.h * d.e);
  const Kernel residual = Stream("residual add", 3.0 * d.n_sp * d.h * d.e);
  const Kernel rope = Stream("rope", 2.0 * d.n * (d.h + d.kv) / d.t * d.e);
  const Kernel swiglu = Stream("swiglu", 3.0 * d.n * d.f / d.t * d.e);
  PassKernels k;
  k.forward = {norm, qkv, rope};
  const bool dropout = settings.attention_dropout > 0;
  AttentionForward(d, fused, dropout, &k.forward);
  k.forward.insert(k.forward.end(), {out, residual, norm, gate_up, swiglu, down, residual});

  const Kernel norm_bwd = Stream("rmsnorm backward", 3.0 * d.n_sp * d.h * d.e);
  std::vector<Kernel>& bw = k.backward;
  BackwardGemms(down, &bw);
  bw.push_back(Stream("swiglu backward", 5.0 * d.n * d.f / d.t * d.e));
  BackwardGemms(gate_up, &bw);
  bw.push_back(norm_bwd);
  bw.push_back(residual);
  BackwardGemms(out, &bw);
  AttentionBackward(d, fused, dropout, &bw);
  bw.push_back(Stream("rope backward", rope.bytes));
  BackwardGemms(qkv, &bw);
  bw.push_back(norm_bwd);
  bw.push_back(residual);
  return k;
}

std::vector<Kernel> AttentionCoreKernels(const spec::ModelSpec& model, int64_t b, int64_t s, int tp,
                                         const PerfSettings& settings) {
  std::vector<Kernel> k;
  AttentionForward(DimsOf(model, b, s, tp, settings), settings.flash_attention,
                   settings.attention_dropout > 0, &k);
  return k;
}

PassKernels EmbeddingKernels(const spec::ModelSpec& model, int64_t b, int64_t s, int tp,
                             const PerfSettings& settings) {
  const Dims d = DimsOf(model, b, s, tp, settings);
  PassKernels k;
  k.forward = {Stream("embedding gather", 2.0 * d.n * d.h * d.e)};
  k.backward = {Stream("embedding scatter-add", 3.0 * d.n * d.h * d.e)};
  return k;
}

PassKernels HeadKernels(const spec::ModelSpec& model, int64_t b, int64_t s, int tp,
                        const PerfSettings& settings) {
  const Dims d = DimsOf(model, b, s, tp, settings);
  const double v = static_cast<double>(model.vocab_size) / d.t;
  const Kernel logits = Gemm("lm head", d.n, v, d.h);
  PassKernels k;
  k.forward = {Stream("final rmsnorm", 2.0 * d.n_sp * d.h * d.e), logits,
               Stream("cross-entropy", 3.0 * d.n * v * 4.0)};
  k.backward = {Stream("cross-entropy backward", 2.0 * d.n * v * 4.0)};
  BackwardGemms(logits, &k.backward);
  k.backward.push_back(Stream("final rmsnorm backward", 3.0 * d.n_sp * d.h * d.e));
  return k;
}

Seconds KernelTime(const KernelRates& rates, const Kernel& kernel) {
  switch (kernel.kind) {
    case Kernel::Kind::kGemm: return GemmTime(rates, kernel.gemm);
    case Kernel::Kind::kStream: return StreamTime(rates, kernel.bytes);
    case Kernel::Kind::kFusedAttention:
      return FusedAttentionTime(rates, kernel.flops, kernel.bytes);
  }
  return 0;
}

Seconds KernelsTime(const KernelRates& rates, const std::vector<Kernel>& kernels) {
  Seconds total = 0;
  for (const Kernel& k : kernels) total += KernelTime(rates, k);
  return total;
}

RooflineComputeModel::RooflineComputeModel(const spec::ClusterSpec& cluster,
                                           const spec::ModelSpec& model,
                                           const PerfSettings& settings)
    : model_(model), settings_(settings) {
  for (const spec::DeviceType& type : cluster.device_types) {
    rates_.push_back(KernelRates::Of(type, settings.precision));
  }
}

const KernelRates& RooflineComputeModel::Rates(int device_type) const {
  MOTLEY_CHECK(device_type >= 0 && device_type < static_cast<int>(rates_.size()),
               "device type index out of range");
  return rates_[static_cast<size_t>(device_type)];
}

PassTimes RooflineComputeModel::Cached(Part part, int device_type, int tp, int64_t b,
                                       int64_t s) const {
  const auto key = std::make_tuple(part, device_type, tp, b, s);
  {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  const KernelRates& r = Rates(device_type);
  PassKernels k;
  switch (part) {
    case Part::kBlock: k = BlockKernels(model_, b, s, tp, settings_); break;
    case Part::kEmbedding: k = EmbeddingKernels(model_, b, s, tp, settings_); break;
    case Part::kHead: k = HeadKernels(model_, b, s, tp, settings_); break;
    case Part::kAttentionCore: k.forward = AttentionCoreKernels(model_, b, s, tp, settings_); break;
  }
  const PassTimes t{KernelsTime(r, k.forward), KernelsTime(r, k.backward)};
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_.emplace(key, t);
  return t;
}

PassTimes RooflineComputeModel::Block(int device_type, int tp, int64_t b, int64_t s) const {
  return Cached(Part::kBlock, device_type, tp, b, s);
}

Seconds RooflineComputeModel::AttentionRecompute(int device_type, int tp, int64_t b,
                                                 int64_t s) const {
  return Cached(Part::kAttentionCore, device_type, tp, b, s).forward_s;
}

PassTimes RooflineComputeModel::Embedding(int device_type, int tp, int64_t b, int64_t s) const {
  return Cached(Part::kEmbedding, device_type, tp, b, s);
}

PassTimes RooflineComputeModel::Head(int device_type, int tp, int64_t b, int64_t s) const {
  return Cached(Part::kHead, device_type, tp, b, s);
}

Seconds RooflineComputeModel::OptimizerStep(int device_type, double params) const {
  // The whole per-step work of a parameter, as memory-bound passes (bytes read + written):
  // mixed precision casts the 16-bit gradient to an fp32 main gradient (2 + 4), reads it for the
  // global norm (4), runs AdamW on the fp32 master and moments (read p, g, m, v: 16; write p, m,
  // v: 12), casts the master back to the 16-bit weight (4 + 2) and zeroes the 16-bit gradient
  // (2): 46 bytes. fp32: norm (4), AdamW (28), zeroing (4): 36 bytes. The passes are fused
  // multi-tensor kernels (Megatron-LM's and apex's optimizers): one launch each, 5 and 3.
  const bool fp32 = settings_.precision == spec::Precision::kFp32;
  const KernelRates& r = Rates(device_type);
  return (fp32 ? 3.0 : 5.0) * r.launch_s + params * (fp32 ? 36.0 : 46.0) / r.achievable_bandwidth;
}

ProfiledComputeModel::ProfiledComputeModel(Profile profile, const spec::ClusterSpec& cluster,
                                           const ComputeModel& fallback)
    : profile_(std::move(profile)), fallback_(fallback) {
  for (const spec::DeviceType& type : cluster.device_types) {
    int found = -1;
    for (size_t i = 0; i < profile_.devices.size(); ++i) {
      if (profile_.devices[i].device_type == type.name) found = static_cast<int>(i);
    }
    profile_of_type_.push_back(found);
  }
}

bool ProfiledComputeModel::Covers(int device_type) const {
  return device_type >= 0 && device_type < static_cast<int>(profile_of_type_.size()) &&
         profile_of_type_[static_cast<size_t>(device_type)] >= 0;
}

PassTimes ProfiledComputeModel::Lookup(Part part, int device_type, int tp, int64_t b,
                                       int64_t s) const {
  auto fallback = [&](int64_t bb) -> PassTimes {
    switch (part) {
      case Part::kBlock: return fallback_.Block(device_type, tp, bb, s);
      case Part::kEmbedding: return fallback_.Embedding(device_type, tp, bb, s);
      case Part::kHead: return fallback_.Head(device_type, tp, bb, s);
    }
    return {};
  };
  if (!Covers(device_type)) return fallback(b);
  const DeviceProfile& dp =
      profile_.devices[static_cast<size_t>(profile_of_type_[static_cast<size_t>(device_type)])];
  const ProfileEntry* best = nullptr;
  for (const ProfileEntry& e : dp.entries) {
    if (e.tp != tp || e.seq_len != s) continue;
    if (best == nullptr ||
        std::llabs(e.micro_batch_size - b) < std::llabs(best->micro_batch_size - b)) {
      best = &e;
    }
  }
  if (best == nullptr) return fallback(b);
  PassTimes measured;
  switch (part) {
    case Part::kBlock: measured = {best->block_forward_s, best->block_backward_s}; break;
    case Part::kEmbedding: measured = {best->embedding_forward_s, best->embedding_backward_s}; break;
    case Part::kHead: measured = {best->head_forward_s, best->head_backward_s}; break;
  }
  if (best->micro_batch_size == b) return measured;
  const PassTimes at_entry = fallback(best->micro_batch_size);
  const PassTimes wanted = fallback(b);
  auto scale = [](Seconds m, Seconds from, Seconds to) { return from > 0 ? m * to / from : to; };
  return {scale(measured.forward_s, at_entry.forward_s, wanted.forward_s),
          scale(measured.backward_s, at_entry.backward_s, wanted.backward_s)};
}

PassTimes ProfiledComputeModel::Block(int device_type, int tp, int64_t b, int64_t s) const {
  return Lookup(Part::kBlock, device_type, tp, b, s);
}

Seconds ProfiledComputeModel::AttentionRecompute(int device_type, int tp, int64_t b,
                                                 int64_t s) const {
  // Not profiled separately: the fallback's share of the block forward, applied to the measured one.
  const PassTimes fb = fallback_.Block(device_type, tp, b, s);
  const Seconds share = fb.forward_s > 0 ? fallback_.AttentionRecompute(device_type, tp, b, s) /
                                               fb.forward_s
                                         : 0.0;
  return share * Block(device_type, tp, b, s).forward_s;
}

PassTimes ProfiledComputeModel::Embedding(int device_type, int tp, int64_t b, int64_t s) const {
  return Lookup(Part::kEmbedding, device_type, tp, b, s);
}

PassTimes ProfiledComputeModel::Head(int device_type, int tp, int64_t b, int64_t s) const {
  return Lookup(Part::kHead, device_type, tp, b, s);
}

}  // namespace motley::perf

namespace motley::perf {

PassTimes ProfiledComputeModel::StageCopies(int device_type, int tp, int64_t b, int64_t s,
                                            bool has_prev, bool has_next) const {
  return fallback_.StageCopies(device_type, tp, b, s, has_prev, has_next);
}
Seconds ProfiledComputeModel::StepPerParam(int device_type) const {
  if (!Covers(device_type)) return 0;
  return profile_.devices[static_cast<size_t>(profile_of_type_[static_cast<size_t>(device_type)])]
      .step_s_per_param;
}
// A measured per-parameter step time covers zeroing, the norm pass and AdamW together.
Seconds ProfiledComputeModel::OptimizerStep(int device_type, double params) const {
  const Seconds per = StepPerParam(device_type);
  return per > 0 ? per * params : fallback_.OptimizerStep(device_type, params);
}
Seconds ProfiledComputeModel::ZeroGrads(int device_type, double params) const {
  return StepPerParam(device_type) > 0 ? 0.0 : fallback_.ZeroGrads(device_type, params);
}
Seconds ProfiledComputeModel::GradNorm(int device_type, double params) const {
  return StepPerParam(device_type) > 0 ? 0.0 : fallback_.GradNorm(device_type, params);
}
Seconds ProfiledComputeModel::GradStaging(int device_type, double params) const {
  return fallback_.GradStaging(device_type, params);
}

}  // namespace motley::perf
