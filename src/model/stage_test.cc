// Tests of Stage: a model split into 2 or 3 stages chained by hand gives the loss and gradients of
// the single full Stage; micro-batch accumulation equals one big micro-batch; several micro-batches
// in flight reuse their activation slots.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "model/model_test_util.h"
#include "model/stage.h"

namespace motley::model {
namespace {

using tensor::Shape;
using tensor::Tensor;
using testing::DeviceI32;
using testing::RandomTokens;
using testing::TinySpec;
using testing::ToHost;

using Grads = std::map<std::string, std::vector<float>>;

struct StepResult {
  double loss_sum = 0;
  Grads grads;
};

// One forward + backward of micro-batch 0 through `layouts` chained in order.
StepResult RunChain(tensor::Backend& backend, const spec::ModelSpec& model,
                    const std::vector<StageLayout>& layouts, int64_t b, int64_t t,
                    const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                    float loss_scale) {
  std::vector<std::unique_ptr<Stage>> stages;
  for (const StageLayout& layout : layouts) {
    auto s = Stage::Create(backend, model, layout, b, t, 77);
    MOTLEY_CHECK(s.ok(), s.status().message());
    stages.push_back(std::move(s).value());
  }
  Tensor x = DeviceI32(backend, Shape{b, t}, tokens);
  const Tensor y = DeviceI32(backend, Shape{b, t}, targets);
  for (size_t i = 0; i + 1 < stages.size(); ++i) x = stages[i]->Forward(0, x);
  StepResult r;
  r.loss_sum = stages.back()->ForwardLoss(0, x, y);
  Tensor d = stages.back()->BackwardLoss(0, loss_scale);
  for (size_t i = stages.size() - 1; i-- > 0;) d = stages[i]->Backward(0, d);
  EXPECT_FALSE(d.defined());  // the first stage ends in the embedding
  for (const auto& s : stages) {
    EXPECT_EQ(s->num_in_flight(), 0);
    for (const Parameter& p : s->params()) r.grads[p.name()] = ToHost(backend, p.grad);
  }
  return r;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return m;
}

double MaxAbs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// (b) Splitting into 2 or 3 stages changes neither the loss nor any gradient.
TEST(Stage, SplitsMatchTheFullModel) {
  backend::CpuBackend backend;
  const auto model = TinySpec();
  const int64_t b = 2, t = 5;
  const auto tokens = RandomTokens(b * t, model.vocab_size, 1);
  const auto targets = RandomTokens(b * t, model.vocab_size, 2);
  const float scale = 1.0F / static_cast<float>(b * t);
  const StepResult full =
      RunChain(backend, model, {StageLayout::Full(model)}, b, t, tokens, targets, scale);
  EXPECT_NEAR(full.loss_sum / static_cast<double>(b * t), std::log(32.0), 0.2);
  ASSERT_EQ(full.grads.size(), 21U);

  const std::vector<std::vector<StageLayout>> splits = {
      {{0, 1, true, false}, {1, 1, false, true}},
      {{0, 0, true, false}, {0, 1, false, false}, {1, 1, false, true}},
      {{0, 1, true, false}, {1, 1, false, false}, {2, 0, false, true}},
  };
  for (const auto& split : splits) {
    const StepResult r = RunChain(backend, model, split, b, t, tokens, targets, scale);
    EXPECT_NEAR(r.loss_sum, full.loss_sum, 1e-6 * std::fabs(full.loss_sum));
    ASSERT_EQ(r.grads.size(), full.grads.size());
    for (const auto& [name, g] : full.grads) {
      ASSERT_TRUE(r.grads.count(name)) << name;
      EXPECT_GT(MaxAbs(g), 0.0) << name;  // every tensor receives a gradient
      EXPECT_LE(MaxAbsDiff(r.grads.at(name), g), 1e-6 * std::max(1.0, MaxAbs(g))) << name;
    }
  }
}

// (d) Two micro-batches of B/2 with loss_scale 1/(B*T), both in flight at once, accumulate the
// gradients of one micro-batch of B.
TEST(Stage, MicroBatchAccumulationMatchesOneBigBatch) {
  backend::CpuBackend backend;
  const auto model = TinySpec();
  const int64_t b = 4, t = 5;
  const auto tokens = RandomTokens(b * t, model.vocab_size, 3);
  const auto targets = RandomTokens(b * t, model.vocab_size, 4);
  const float scale = 1.0F / static_cast<float>(b * t);
  const StepResult big =
      RunChain(backend, model, {StageLayout::Full(model)}, b, t, tokens, targets, scale);

  auto small = Stage::Create(backend, model, StageLayout::Full(model), b / 2, t, 77);
  ASSERT_TRUE(small.ok());
  Stage& stage = **small;
  const auto half = static_cast<size_t>(b / 2 * t);
  double loss = 0;
  for (int64_t mb = 0; mb < 2; ++mb) {  // both forwards first: two micro-batches in flight
    const auto off = static_cast<std::ptrdiff_t>(static_cast<size_t>(mb) * half);
    std::vector<int32_t> x(tokens.begin() + off,
                           tokens.begin() + off + static_cast<std::ptrdiff_t>(half));
    std::vector<int32_t> y(targets.begin() + off,
                           targets.begin() + off + static_cast<std::ptrdiff_t>(half));
    loss += stage.ForwardLoss(mb, DeviceI32(backend, Shape{b / 2, t}, x),
                              DeviceI32(backend, Shape{b / 2, t}, y));
  }
  EXPECT_EQ(stage.num_in_flight(), 2);
  EXPECT_FALSE(stage.BackwardLoss(1, scale).defined());  // any order
  EXPECT_FALSE(stage.BackwardLoss(0, scale).defined());
  EXPECT_EQ(stage.num_in_flight(), 0);

  EXPECT_NEAR(loss, big.loss_sum, 1e-5 * std::fabs(big.loss_sum));
  for (const Parameter& p : stage.params()) {
    const auto& ref = big.grads.at(p.name());
    EXPECT_LE(MaxAbsDiff(ToHost(backend, p.grad), ref), 1e-5 * std::max(1.0, MaxAbs(ref)))
        << p.name();
  }
}

// 1F1B-style interleaving keeps at most (in-flight depth) activation slots: no allocation after
// warm-up, and each micro-batch's backward uses its own saved activations.
TEST(Stage, ActivationSlotsAreReusedAcrossSteps) {
  backend::CpuBackend backend;
  const auto model = TinySpec();
  const int64_t b = 1, t = 4;
  std::vector<Tensor> tokens;
  tokens.reserve(6);
  for (uint64_t i = 0; i < 6; ++i)
    tokens.push_back(DeviceI32(backend, Shape{b, t}, RandomTokens(b * t, 32, 10 + i)));
  Tensor ones = backend.Empty(Shape{b, t, model.hidden}, tensor::DType::kF32);
  backend.Fill(ones, 1.0F);

  auto interleaved = Stage::Create(backend, model, StageLayout{0, 1, true, false}, b, t, 5);
  ASSERT_TRUE(interleaved.ok());
  Stage& s = **interleaved;
  for (int64_t step = 0; step < 3; ++step) {  // two micro-batches in flight, three times
    const int64_t mb0 = 2 * step;
    const int64_t mb1 = 2 * step + 1;
    s.Forward(mb0, tokens[static_cast<size_t>(mb0)]);
    s.Forward(mb1, tokens[static_cast<size_t>(mb1)]);
    EXPECT_EQ(s.num_in_flight(), 2);
    s.Backward(mb0, ones);
    s.Backward(mb1, ones);
    EXPECT_EQ(s.num_activation_slots(), 2);
  }
  // A discarded forward frees its slot too.
  s.Forward(42, tokens[0]);
  s.Discard(42);
  EXPECT_EQ(s.num_in_flight(), 0);
  EXPECT_EQ(s.num_activation_slots(), 2);

  // One micro-batch at a time: one slot, and the same accumulated gradients.
  auto sequential = Stage::Create(backend, model, StageLayout{0, 1, true, false}, b, t, 5);
  ASSERT_TRUE(sequential.ok());
  for (int64_t mb = 0; mb < 6; ++mb) {
    (*sequential)->Forward(mb, tokens[static_cast<size_t>(mb)]);
    (*sequential)->Backward(mb, ones);
  }
  EXPECT_EQ((*sequential)->num_activation_slots(), 1);
  for (size_t i = 0; i < s.params().size(); ++i) {
    const auto g_seq = ToHost(backend, (*sequential)->params()[i].grad);
    EXPECT_GT(MaxAbs(g_seq), 0.0) << s.params()[i].name();
    EXPECT_EQ(ToHost(backend, s.params()[i].grad), g_seq) << s.params()[i].name();
  }
}

}  // namespace
}  // namespace motley::model
