// (a) The whole model's hand-written backward against central finite differences, on the tiny
// config (L=2, C=16, NH=4, NKV=2, F=32, V=32, B=2, T=5) in fp32, for a sample of entries of every
// parameter tensor.
//
// Weights are re-drawn larger than the training init (std 0.3 for matrices, 1 +- 0.1 for norm
// weights) so that attention, SwiGLU and RMSNorm work in their non-linear range and every gradient
// is well above the fp32 noise of the difference quotient. The loss is the double sum of fp32
// token losses times 1/(B*T); eps = 1e-2.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "model/init.h"
#include "model/model_test_util.h"
#include "model/stage.h"

namespace motley::model {
namespace {

using tensor::Shape;
using tensor::Tensor;
using testing::DeviceI32;
using testing::FromHost;
using testing::RandomTokens;
using testing::TinySpec;
using testing::ToHost;

// Tolerance on each sampled entry: |numeric - analytic| <= kRel * |numeric| + kAbs.
constexpr double kRel = 1e-2;
constexpr double kAbs = 1e-4;
constexpr float kEps = 1e-2F;

TEST(GradCheck, WholeModelMatchesCentralDifferences) {
  backend::CpuBackend backend;
  const auto model = TinySpec();
  const int64_t b = 2, t = 5;
  auto created = Stage::Create(backend, model, StageLayout::Full(model), b, t, 11);
  ASSERT_TRUE(created.ok()) << created.status().message();
  Stage& stage = **created;
  for (Parameter& p : stage.params()) {
    std::vector<float> v = NormalInit(99, p.name(), p.value.numel(), 0.3);
    if (p.info.init == InitKind::kOnes)
      for (float& x : v) x = 1.0F + x / 3.0F;
    FromHost(backend, p.value, v);
  }
  const auto token_ids = RandomTokens(b * t, model.vocab_size, 5);
  const Tensor tokens = DeviceI32(backend, Shape{b, t}, token_ids);
  const Tensor targets = DeviceI32(backend, Shape{b, t}, RandomTokens(b * t, model.vocab_size, 6));
  const double scale = 1.0 / static_cast<double>(b * t);
  auto loss = [&] {
    const double l = stage.ForwardLoss(1, tokens, targets) * scale;
    stage.Discard(1);
    return l;
  };

  stage.ForwardLoss(0, tokens, targets);
  stage.BackwardLoss(0, static_cast<float>(scale));

  std::mt19937_64 rng(2024);
  int checked = 0;
  int significant = 0;
  double worst_rel = 0;
  for (Parameter& p : stage.params()) {
    const std::vector<float> grad = ToHost(backend, p.grad);
    std::vector<float> value = ToHost(backend, p.value);
    const auto numel = static_cast<uint64_t>(p.value.numel());
    std::vector<size_t> idx;
    idx.reserve(10);
    for (int i = 0; i < 6; ++i) idx.push_back(static_cast<size_t>(rng() % numel));
    if (p.name() == "model.embed_tokens.weight") {  // rows actually looked up
      for (int i = 0; i < 4; ++i)
        idx.push_back(static_cast<size_t>(token_ids[static_cast<size_t>(i)]) *
                          static_cast<size_t>(model.hidden) +
                      static_cast<size_t>(i));
    }
    double tensor_max = 0;
    for (size_t i : idx) {
      const float saved = value[i];
      value[i] = saved + kEps;
      FromHost(backend, p.value, value);
      const double plus = loss();
      value[i] = saved - kEps;
      FromHost(backend, p.value, value);
      const double minus = loss();
      value[i] = saved;
      FromHost(backend, p.value, value);
      const double numeric = (plus - minus) / (2.0 * static_cast<double>(kEps));
      const auto analytic = static_cast<double>(grad[i]);
      const double err = std::fabs(numeric - analytic);
      EXPECT_LE(err, kRel * std::fabs(numeric) + kAbs)
          << p.name() << "[" << i << "] numeric " << numeric << " analytic " << analytic;
      tensor_max = std::max(tensor_max, std::fabs(analytic));
      if (std::fabs(numeric) > 1e-3) {
        ++significant;
        worst_rel = std::max(worst_rel, err / std::fabs(numeric));
      }
      ++checked;
    }
    // Every tensor's sample includes gradients far above the absolute tolerance.
    EXPECT_GT(tensor_max, 10 * kAbs) << p.name();
  }
  std::printf("gradcheck: %d entries, %d with |g| > 1e-3, worst relative error %.3g\n", checked,
              significant, worst_rel);
  EXPECT_GT(significant, checked / 2);
}

}  // namespace
}  // namespace motley::model
