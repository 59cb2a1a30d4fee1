// See optimizer.h.
#include "model/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/check.h"

namespace motley::model {

float LearningRate(const spec::OptimizerSpec& opt, int64_t step, int64_t total_steps) {
  MOTLEY_CHECK(step >= 1, "optimizer steps are 1-based");
  const auto lr = static_cast<double>(opt.lr);
  const auto min_lr = static_cast<double>(opt.min_lr);
  if (step <= opt.warmup_steps) {
    return static_cast<float>(lr * static_cast<double>(step) /
                              static_cast<double>(opt.warmup_steps));
  }
  const int64_t decay_steps = total_steps - opt.warmup_steps;
  if (decay_steps <= 0) return opt.min_lr;
  const double r = std::clamp(
      static_cast<double>(step - opt.warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * r));
  return static_cast<float>(min_lr + coeff * (lr - min_lr));
}

float ClipScale(double global_squared_norm, float grad_clip) {
  if (grad_clip <= 0.0F || global_squared_norm == 0.0) return 1.0F;
  const double norm = std::sqrt(global_squared_norm);
  return static_cast<float>(std::min(1.0, static_cast<double>(grad_clip) / norm));
}

Optimizer::Optimizer(tensor::Backend& backend, ParameterSet& params,
                     const spec::OptimizerSpec& spec, int64_t total_steps)
    : backend_(backend), params_(params), spec_(spec), total_steps_(total_steps) {}

void Optimizer::ZeroGrads() {
  for (Parameter& p : params_) backend_.SetZero(p.grad);
}

double Optimizer::GradSquaredNorm() const {
  double sum = 0.0;
  for (const Parameter& p : params_) sum += backend_.SumSquares(p.grad);
  return sum;
}

void Optimizer::ScaleGrads(float clip_scale) {
  if (clip_scale == 1.0F) return;
  for (Parameter& p : params_) backend_.Scale(p.grad, clip_scale);
}

tensor::AdamWParams Optimizer::StepParams(int64_t step, float clip_scale) const {
  tensor::AdamWParams a;
  a.grad_scale = clip_scale;  // applied inside AdamW: no separate pass over the gradients
  a.lr = LearningRate(spec_, step, total_steps_);
  a.beta1 = spec_.beta1;
  a.beta2 = spec_.beta2;
  a.eps = spec_.eps;
  a.step = step;
  a.weight_decay = 0.0F;
  return a;
}

float Optimizer::Step(int64_t step, float clip_scale) {
  tensor::AdamWParams a = StepParams(step, clip_scale);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (i < skip_.size() && skip_[i]) continue;
    Parameter& p = params_[i];
    a.weight_decay = p.info.weight_decay ? spec_.weight_decay : 0.0F;
    backend_.AdamW(p.value, p.grad, p.m, p.v, a);
  }
  return a.lr;
}

}  // namespace motley::model
