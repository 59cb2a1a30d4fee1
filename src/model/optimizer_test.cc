// Tests of the optimizer: LR schedule values, AdamW updates (with decay only on 2-D weights),
// clipping by global norm, and a tiny model that learns a repeating sequence.
#include <cmath>
#include <numbers>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "model/model_test_util.h"
#include "model/optimizer.h"
#include "model/stage.h"

namespace motley::model {
namespace {

using tensor::Shape;
using tensor::Tensor;
using testing::DeviceI32;
using testing::FromHost;
using testing::ToHost;

spec::OptimizerSpec Sched(float lr, float min_lr, int64_t warmup) {
  spec::OptimizerSpec o;
  o.lr = lr;
  o.min_lr = min_lr;
  o.warmup_steps = warmup;
  return o;
}

// (e) Warm-up endpoints, cosine midpoint, floor.
TEST(LearningRate, WarmupCosineAndFloor) {
  const auto o = Sched(1e-3F, 1e-4F, 10);
  EXPECT_FLOAT_EQ(LearningRate(o, 1, 110), 1e-4F);  // lr * 1/10
  EXPECT_FLOAT_EQ(LearningRate(o, 5, 110), 5e-4F);
  EXPECT_FLOAT_EQ(LearningRate(o, 10, 110), 1e-3F);    // peak at the end of warm-up
  EXPECT_FLOAT_EQ(LearningRate(o, 60, 110), 5.5e-4F);  // cosine midpoint: (lr + min_lr) / 2
  EXPECT_FLOAT_EQ(LearningRate(o, 110, 110), 1e-4F);   // floor at the last step
  EXPECT_FLOAT_EQ(LearningRate(o, 500, 110), 1e-4F);   // and after it
  EXPECT_LT(LearningRate(o, 11, 110), 1e-3F);
  EXPECT_GT(LearningRate(o, 11, 110), LearningRate(o, 12, 110));
  const auto no_warmup = Sched(2e-3F, 0.0F, 0);
  EXPECT_NEAR(LearningRate(no_warmup, 1, 4), 2e-3 * 0.5 * (1 + std::cos(std::numbers::pi / 4)),
              1e-9);
  EXPECT_FLOAT_EQ(LearningRate(no_warmup, 2, 4), 1e-3F);
}

struct TinySet {
  ParameterSet set;
  static TinySet Make(tensor::Backend& backend) {
    TinySet s;
    s.set =
        ParameterSet::Allocate(backend, {ParamInfo{"w", Shape{2, 2}, InitKind::kNormal, 0.02, true},
                                         ParamInfo{"norm", Shape{2}, InitKind::kOnes, 0.0, false}});
    FromHost(backend, s.set[0].value, {0.5F, -1.0F, 2.0F, 0.0F});
    FromHost(backend, s.set[1].value, {1.0F, 2.0F});
    return s;
  }
};

// (e) AdamW matches the formula in double for two steps; weight decay only on the 2-D weight.
TEST(Optimizer, AdamWStepsMatchTheFormula) {
  backend::CpuBackend backend;
  TinySet s = TinySet::Make(backend);
  spec::OptimizerSpec o = Sched(1e-2F, 1e-2F, 0);
  o.weight_decay = 0.1F;
  Optimizer opt(backend, s.set, o, 100);

  const std::vector<std::vector<float>> grads = {{0.1F, -0.2F, 0.0F, 3.0F}, {0.5F, -0.5F}};
  std::vector<std::vector<double>> p = {{0.5, -1.0, 2.0, 0.0}, {1.0, 2.0}};
  std::vector<std::vector<double>> m = {{0, 0, 0, 0}, {0, 0}}, v = m;
  const auto b1 = static_cast<double>(o.beta1);
  const auto b2 = static_cast<double>(o.beta2);
  const auto eps = static_cast<double>(o.eps);
  for (int64_t step = 1; step <= 2; ++step) {
    opt.ZeroGrads();
    for (size_t i = 0; i < 2; ++i) FromHost(backend, s.set[i].grad, grads[i]);
    const float lr = opt.Step(step, 1.0F);
    EXPECT_FLOAT_EQ(lr, 1e-2F);
    for (size_t t = 0; t < 2; ++t) {
      const double wd = t == 0 ? 0.1 : 0.0;
      const auto got = ToHost(backend, s.set[t].value);
      for (size_t i = 0; i < got.size(); ++i) {
        const auto g = static_cast<double>(grads[t][i]);
        m[t][i] = b1 * m[t][i] + (1 - b1) * g;
        v[t][i] = b2 * v[t][i] + (1 - b2) * g * g;
        const double mh = m[t][i] / (1 - std::pow(b1, static_cast<double>(step)));
        const double vh = v[t][i] / (1 - std::pow(b2, static_cast<double>(step)));
        p[t][i] -= static_cast<double>(lr) * (mh / (std::sqrt(vh) + eps) + wd * p[t][i]);
        EXPECT_NEAR(got[i], p[t][i], 1e-6) << s.set[t].name() << "[" << i << "] step " << step;
      }
    }
  }
  // Entry w[2] had zero gradient: only decay moved it, by (1 - lr*wd) per step.
  EXPECT_NEAR(ToHost(backend, s.set[0].value)[2], 2.0 * (1 - 1e-3) * (1 - 1e-3), 1e-6);
}

// (f) Clipping by global norm scales the gradients to the threshold; below it, nothing changes.
TEST(Optimizer, ClippingScalesGradsToTheThreshold) {
  backend::CpuBackend backend;
  TinySet s = TinySet::Make(backend);
  Optimizer opt(backend, s.set, Sched(1e-3F, 1e-4F, 0), 10);
  FromHost(backend, s.set[0].grad, {3.0F, 0.0F, 0.0F, 4.0F});
  FromHost(backend, s.set[1].grad, {0.0F, 12.0F});
  const double sq = opt.GradSquaredNorm();
  EXPECT_DOUBLE_EQ(sq, 9.0 + 16.0 + 144.0);  // norm 13
  const float scale = ClipScale(sq, 1.0F);
  EXPECT_FLOAT_EQ(scale, 1.0F / 13.0F);
  opt.ScaleGrads(scale);
  EXPECT_NEAR(std::sqrt(opt.GradSquaredNorm()), 1.0, 1e-6);
  EXPECT_NEAR(ToHost(backend, s.set[1].grad)[1], 12.0 / 13.0, 1e-6);
  EXPECT_FLOAT_EQ(ClipScale(0.25, 1.0F), 1.0F);   // norm 0.5 < 1: untouched
  EXPECT_FLOAT_EQ(ClipScale(169.0, 0.0F), 1.0F);  // clipping disabled
  EXPECT_FLOAT_EQ(ClipScale(0.0, 1.0F), 1.0F);
  // Split across two "ranks": the all-reduced squared norm gives the same scale.
  EXPECT_FLOAT_EQ(ClipScale(25.0 + 144.0, 6.5F), 0.5F);
  opt.ZeroGrads();
  EXPECT_EQ(opt.GradSquaredNorm(), 0.0);
}

// (g) A tiny model learns a repeating sequence: the loss falls from about ln V to near zero.
TEST(Optimizer, TinyModelLearnsARepeatingSequence) {
  backend::CpuBackend backend;
  spec::ModelSpec model = testing::TinySpec();
  model.vocab_size = 16;
  const int64_t b = 2, t = 8;
  auto created = Stage::Create(backend, model, StageLayout::Full(model), b, t, 3);
  ASSERT_TRUE(created.ok());
  Stage& stage = **created;
  // Period-6 cycle over tokens 3..8; each row starts at a different phase.
  std::vector<int32_t> x, y;
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t i = 0; i < t; ++i) {
      x.push_back(static_cast<int32_t>(3 + (r * 2 + i) % 6));
      y.push_back(static_cast<int32_t>(3 + (r * 2 + i + 1) % 6));
    }
  }
  const Tensor tokens = DeviceI32(backend, Shape{b, t}, x);
  const Tensor targets = DeviceI32(backend, Shape{b, t}, y);
  spec::OptimizerSpec o = Sched(1e-2F, 1e-3F, 10);
  o.weight_decay = 0.0F;
  o.grad_clip = 1.0F;
  const int64_t steps = 200;
  Optimizer opt(backend, stage.params(), o, steps);
  const float scale = 1.0F / static_cast<float>(b * t);
  double first = 0, last = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    opt.ZeroGrads();
    const double loss = stage.ForwardLoss(0, tokens, targets) * static_cast<double>(scale);
    stage.BackwardLoss(0, scale);
    const double sq = opt.GradSquaredNorm();
    ASSERT_TRUE(std::isfinite(sq));
    opt.Step(step, ClipScale(sq, o.grad_clip));
    if (step == 1) first = loss;
    last = loss;
  }
  std::printf("learning: loss %.4f -> %.4f in %lld steps\n", first, last,
              static_cast<long long>(steps));
  EXPECT_NEAR(first, std::log(16.0), 0.3);
  EXPECT_LT(last, 0.05);
}

}  // namespace
}  // namespace motley::model
