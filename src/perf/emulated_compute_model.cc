// See emulated_compute_model.h. Each function lists the ops in the order the runtime issues them
// (model/block.cc BlockForward / BlockBackward, model/stage.cc, parallel/stage_executor.cc,
// model/optimizer.cc, parallel/grad_sync.cc); f32 and i32 elements are 4 bytes.
#include "perf/emulated_compute_model.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "spec/block_costs.h"

namespace motley::perf {

namespace c = spec::costs;

namespace {
constexpr double kElem = 4.0;  // bytes of an f32 / i32 element, as the emulated backend counts
}  // namespace

EmulatedComputeModel::EmulatedComputeModel(const spec::ClusterSpec& cluster,
                                           const spec::ModelSpec& model)
    : model_(model) {
  for (const spec::DeviceType& type : cluster.device_types) {
    Speed speed;
    if (type.emulated.has_value()) {
      speed.flops = type.emulated->flops_per_s;
      speed.bandwidth = type.emulated->memory_bandwidth;
    } else {
      speed.flops = type.peak_fp32_flops;
      speed.bandwidth = type.memory_bandwidth;
    }
    MOTLEY_CHECK(speed.flops > 0 && speed.bandwidth > 0,
                 "device type '" + type.name + "' needs positive flop/s and memory bandwidth");
    speeds_.push_back(speed);
  }
}

Seconds EmulatedComputeModel::Op(int device_type, const c::OpCost& cost) const {
  MOTLEY_CHECK(device_type >= 0 && device_type < static_cast<int>(speeds_.size()),
               "device type index out of range");
  const Speed& sp = speeds_[static_cast<size_t>(device_type)];
  return std::max(cost.flops / sp.flops, cost.bytes / sp.bandwidth);
}

PassTimes EmulatedComputeModel::Block(int device_type, int tp, int64_t b, int64_t s) const {
  MOTLEY_CHECK(model_.SplitsForTensorParallel(tp),
               "tp must divide num_heads, num_kv_heads and ffn_hidden");
  const int64_t n = b * s;
  const int64_t ch = model_.hidden;
  const int64_t hs = model_.head_size();
  const int64_t nh = model_.num_heads / tp;
  const int64_t nkv = model_.num_kv_heads / tp;
  const int64_t f = model_.ffn_hidden / tp;
  const int64_t q = nh * hs;
  const int64_t kv = nkv * hs;
  auto op = [&](const c::OpCost& cost) { return Op(device_type, cost); };
  auto zero = [&](int64_t elements) {
    return op(c::WriteBytes(kElem * static_cast<double>(elements)));
  };
  PassTimes t;
  // Forward: the block's op inventory (spec/block_costs.h; TP all-reduces are the predictor's).
  for (const c::OpCost& cost : c::BlockForwardOps(c::BlockShape{b, s, ch, nh, nkv, hs, f})) {
    t.forward_s += op(cost);
  }
  auto matmul_backward = [&](int64_t rows, int64_t in, int64_t out) {
    c::OpCost cost = c::MatmulBackwardInput(rows, in, out);
    cost += c::MatmulBackwardWeight(rows, in, out);
    return op(cost);
  };
  // Backward: MLP half, then the attention half, each zeroing its scratch gradients first.
  t.backward_s = zero(n * f) + matmul_backward(n, f, ch) + 2.0 * zero(n * f) +
                 op(c::SwiGluBackward(n * f)) + zero(n * ch) + 2.0 * matmul_backward(n, ch, f) +
                 op(c::RmsNormBackward(n, ch)) + zero(n * q) + matmul_backward(n, q, ch) +
                 zero(n * q) + 2.0 * zero(n * kv) + op(c::AttentionBackward(b, s, nh, nkv, hs)) +
                 zero(n * q) + zero(n * kv) + op(c::RopeBackward(n * q)) +
                 op(c::RopeBackward(n * kv)) + zero(n * ch) + matmul_backward(n, ch, q) +
                 2.0 * matmul_backward(n, ch, kv) + op(c::RmsNormBackward(n, ch));
  return t;
}

Seconds EmulatedComputeModel::AttentionRecompute(int device_type, int tp, int64_t b,
                                                 int64_t s) const {
  const c::BlockShape shape{b,
                            s,
                            model_.hidden,
                            model_.num_heads / tp,
                            model_.num_kv_heads / tp,
                            model_.head_size(),
                            model_.ffn_hidden / tp};
  Seconds t = 0;
  for (const c::OpCost& cost : c::BlockRecomputeOps(spec::Recompute::kSelective, shape)) {
    t += Op(device_type, cost);
  }
  return t;
}

PassTimes EmulatedComputeModel::Embedding(int device_type, int /*tp*/, int64_t b,
                                          int64_t s) const {
  const int64_t n = b * s;
  const double token_bytes = kElem * static_cast<double>(n);
  // Forward: tokens from the host, copied into the micro-batch's slot, then the lookup.
  PassTimes t;
  t.forward_s = Op(device_type, c::WriteBytes(token_bytes)) +
                Op(device_type, c::CopyBytes(token_bytes)) +
                Op(device_type, c::EmbeddingForward(n, model_.hidden));
  t.backward_s = Op(device_type, c::EmbeddingBackward(n, model_.hidden));
  return t;
}

PassTimes EmulatedComputeModel::Head(int device_type, int /*tp*/, int64_t b, int64_t s) const {
  const int64_t n = b * s;
  const int64_t ch = model_.hidden;
  const int64_t v = model_.vocab_size;
  const double token_bytes = kElem * static_cast<double>(n);
  auto op = [&](const c::OpCost& cost) { return Op(device_type, cost); };
  PassTimes t;
  // Forward: targets from the host, final norm, LM head, targets copied, cross-entropy, loss sum.
  t.forward_s = op(c::WriteBytes(token_bytes)) + op(c::RmsNormForward(n, ch)) +
                op(c::MatmulForward(n, ch, v)) + op(c::CopyBytes(token_bytes)) +
                op(c::CrossEntropyForward(n, v)) + op(c::Sum(n));
  c::OpCost lm = c::MatmulBackwardInput(n, ch, v);
  lm += c::MatmulBackwardWeight(n, ch, v);
  const double nc_bytes = kElem * static_cast<double>(n * ch);
  t.backward_s = op(c::WriteBytes(kElem * static_cast<double>(n * v))) +
                 op(c::CrossEntropyBackward(n, v)) + op(c::WriteBytes(nc_bytes)) + op(lm) +
                 op(c::WriteBytes(nc_bytes)) + op(c::RmsNormBackward(n, ch));
  return t;
}

PassTimes EmulatedComputeModel::StageCopies(int device_type, int /*tp*/, int64_t b, int64_t s,
                                            bool has_prev, bool has_next) const {
  const Seconds copy =
      Op(device_type, c::CopyBytes(kElem * static_cast<double>(b * s * model_.hidden)));
  PassTimes t;
  if (has_prev) {
    t.forward_s += copy;   // received activation into the first residual
    t.backward_s += copy;  // input gradient into a send buffer
  }
  if (has_next) t.backward_s += copy;  // received output gradient into the residual gradient
  return t;
}

Seconds EmulatedComputeModel::OptimizerStep(int device_type, double params) const {
  return Op(device_type, c::AdamW(std::llround(params)));
}

Seconds EmulatedComputeModel::ZeroGrads(int device_type, double params) const {
  return Op(device_type, c::WriteBytes(kElem * params));
}

Seconds EmulatedComputeModel::GradNorm(int device_type, double params) const {
  return Op(device_type, c::SumSquares(std::llround(params)));
}

Seconds EmulatedComputeModel::GradStaging(int device_type, double params) const {
  return Op(device_type, c::ReadBytes(kElem * params)) +
         Op(device_type, c::WriteBytes(kElem * params));
}

}  // namespace motley::perf
