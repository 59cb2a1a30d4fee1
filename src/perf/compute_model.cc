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

double EfficiencyCurve::At(Flops flops) const {
  for (const auto& [threshold, eff] : steps) {
    if (flops >= threshold) return eff;
  }
  return below;
}

double EfficiencyCurve::Max() const {
  double best = below;
  for (const auto& step : steps) best = std::max(best, step.second);
  return best;
}

RooflineComputeModel::RooflineComputeModel(const spec::ClusterSpec& cluster,
                                           const spec::ModelSpec& model,
                                           const PerfSettings& settings, EfficiencyCurve curve)
    : model_(model), settings_(settings), curve_(std::move(curve)) {
  for (const spec::DeviceType& type : cluster.device_types) {
    TypeSpeed speed;
    speed.peak = type.PeakFlops(settings.precision);
    if (speed.peak <= 0) speed.peak = type.peak_fp32_flops;
    speed.memory_bandwidth = type.memory_bandwidth;
    MOTLEY_CHECK(speed.peak > 0 && speed.memory_bandwidth > 0,
                 "device type '" + type.name + "' needs a positive peak and memory bandwidth");
    speeds_.push_back(speed);
  }
}

const RooflineComputeModel::TypeSpeed& RooflineComputeModel::Speed(int device_type) const {
  MOTLEY_CHECK(device_type >= 0 && device_type < static_cast<int>(speeds_.size()),
               "device type index out of range");
  return speeds_[static_cast<size_t>(device_type)];
}

Seconds RooflineComputeModel::MatmulTime(const TypeSpeed& speed, const MatmulShape& mm,
                                         double batch) const {
  const double elem = ActivationElementBytes(settings_);
  const Flops flops = mm.flops() * batch;
  const double bytes = (mm.m * mm.k + mm.k * mm.n + mm.m * mm.n) * elem * batch;
  return std::max(flops / (speed.peak * curve_.At(flops)), bytes / speed.memory_bandwidth);
}

PassTimes RooflineComputeModel::Block(int device_type, int tp, int64_t b, int64_t s) const {
  const TypeSpeed& speed = Speed(device_type);
  const BlockMatmuls mm = BlockForwardMatmuls(model_, b, s, tp);
  Seconds matmul = MatmulTime(speed, mm.qkv, 1) + MatmulTime(speed, mm.out, 1) +
                   MatmulTime(speed, mm.gate_up, 1) + MatmulTime(speed, mm.down, 1) +
                   MatmulTime(speed, mm.scores, mm.head_batch) +
                   MatmulTime(speed, mm.context, mm.head_batch);
  // Elementwise bytes per forward (read + write), per TP rank: two RMSNorms (4nh) and two residual
  // adds (6nh), split across ranks under sequence parallelism; RoPE on q and k; SwiGLU (3nF/t);
  // softmax over the score tensor when attention is not fused (read, write, mask: 3*b*a*s*s/t).
  const double t = tp;
  const double n = static_cast<double>(b * s);
  const double h = static_cast<double>(model_.hidden);
  const double kv = static_cast<double>(model_.num_kv_heads * model_.head_size());
  const double ffn = static_cast<double>(model_.ffn_hidden);
  double elems = 10.0 * n * h / (settings_.sequence_parallel ? t : 1.0);
  elems += 2.0 * n * (h + kv) / t + 3.0 * n * ffn / t;
  if (!settings_.flash_attention) {
    elems += 3.0 * static_cast<double>(b) * static_cast<double>(model_.num_heads) *
             static_cast<double>(s) * static_cast<double>(s) / t;
  }
  const Seconds elementwise = elems * ActivationElementBytes(settings_) / speed.memory_bandwidth;
  const Seconds forward = matmul + elementwise;
  return {forward, 2.0 * forward};
}

Seconds RooflineComputeModel::AttentionRecompute(int device_type, int tp, int64_t b,
                                                 int64_t s) const {
  const TypeSpeed& speed = Speed(device_type);
  const BlockMatmuls mm = BlockForwardMatmuls(model_, b, s, tp);
  return MatmulTime(speed, mm.scores, mm.head_batch) + MatmulTime(speed, mm.context, mm.head_batch);
}

PassTimes RooflineComputeModel::Embedding(int device_type, int tp, int64_t b, int64_t s) const {
  const TypeSpeed& speed = Speed(device_type);
  // Lookup: read rows and write the activation (2*n*h); backward scatter-adds the same amount.
  const double bytes = 2.0 * static_cast<double>(b * s) * static_cast<double>(model_.hidden) *
                       ActivationElementBytes(settings_) / (settings_.sequence_parallel ? tp : 1);
  const Seconds t = bytes / speed.memory_bandwidth;
  return {t, t};
}

PassTimes RooflineComputeModel::Head(int device_type, int tp, int64_t b, int64_t s) const {
  const TypeSpeed& speed = Speed(device_type);
  const double n = static_cast<double>(b * s);
  const MatmulShape logits{n, static_cast<double>(model_.vocab_size) / tp,
                           static_cast<double>(model_.hidden)};
  // Cross-entropy in fp32 over this rank's vocabulary slice: read logits, write probabilities and
  // read them back (3 passes forward, 2 backward).
  const double ce = n * static_cast<double>(model_.vocab_size) / tp * 4.0;
  const Seconds mm = MatmulTime(speed, logits, 1);
  return {mm + 3.0 * ce / speed.memory_bandwidth, 2.0 * mm + 2.0 * ce / speed.memory_bandwidth};
}

Seconds RooflineComputeModel::OptimizerStep(int device_type, double params) const {
  // Bytes touched per parameter by AdamW: mixed precision reads bf16 weight and grad, fp32 master
  // and two moments and writes them back (2+2+4+4+4 read, 4+4+4+2 written = 30); fp32 reads 4
  // tensors and writes 3 (28). performance-model.md: "roughly 16-30 bytes touched per parameter".
  const double bytes = settings_.precision == spec::Precision::kFp32 ? 28.0 : 30.0;
  return params * bytes / Speed(device_type).memory_bandwidth;
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
