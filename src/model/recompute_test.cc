// Activation recompute in Stage (block.h, stage.h): under selective and full recompute a stage
// gives bit for bit the losses, input gradients and parameter gradients of the same stage without
// recompute, with several micro-batches in flight in 1F1B order (forwards and backwards
// interleaved, so a slot's kept tensors and the shared recompute buffers must not be confused),
// on a first (embedding), middle and last (head) stage. What it saves in memory and adds in
// FLOPs: tests/parallel/recompute_test.cc on the emulated backend.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "model/model_test_util.h"
#include "model/stage.h"

namespace motley::model {
namespace {

using spec::Recompute;
using tensor::Shape;
using tensor::Tensor;
using testing::DeviceI32;
using testing::FromHost;
using testing::RandomTokens;
using testing::TinySpec;
using testing::ToHost;

struct Trace {
  std::vector<double> losses;                   // last stage: per micro-batch
  std::vector<std::vector<float>> outputs;      // non-last stage: forward outputs
  std::vector<std::vector<float>> input_grads;  // non-first stage: returned dL/d(input)
  std::vector<std::vector<float>> param_grads;  // after all micro-batches
};

// Runs micro-batches 0..m-1 through one stage in the 1F1B order of a stage with `warmup`
// forwards ahead: F0..F(w-1), then (F(k+w), B(k)) pairs, then the remaining backwards.
Trace RunOneFOneB(tensor::Backend& backend, const StageLayout& layout, int64_t m, int64_t warmup) {
  const spec::ModelSpec model = TinySpec();
  const int64_t b = 2, t = 6, c = model.hidden;
  auto created = Stage::Create(backend, model, layout, b, t, 21);
  MOTLEY_CHECK(created.ok(), created.status().message());
  Stage& stage = **created;
  Trace trace;
  auto forward = [&](int64_t k) {
    const auto seed = static_cast<uint64_t>(100 + k);
    Tensor input;
    if (layout.has_embedding) {
      input = DeviceI32(backend, Shape{b, t}, RandomTokens(b * t, model.vocab_size, seed));
    } else {
      input = backend.Empty(Shape{b, t, c}, tensor::DType::kF32);
      std::vector<float> x(static_cast<size_t>(b * t * c));
      for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01F * static_cast<float>((i * 7 + k) % 13);
      FromHost(backend, input, x);
    }
    if (layout.has_head) {
      const Tensor y =
          DeviceI32(backend, Shape{b, t}, RandomTokens(b * t, model.vocab_size, seed + 50));
      trace.losses.push_back(stage.ForwardLoss(k, input, y));
    } else {
      trace.outputs.push_back(ToHost(backend, stage.Forward(k, input)));
    }
  };
  auto backward = [&](int64_t k) {
    Tensor dinput;
    if (layout.has_head) {
      dinput = stage.BackwardLoss(k, 1.0F / static_cast<float>(m * b * t));
    } else {
      Tensor dout = backend.Empty(Shape{b, t, c}, tensor::DType::kF32);
      std::vector<float> g(static_cast<size_t>(b * t * c));
      for (size_t i = 0; i < g.size(); ++i) g[i] = 0.001F * static_cast<float>((i * 3 + k) % 11);
      FromHost(backend, dout, g);
      dinput = stage.Backward(k, dout);
    }
    if (!layout.has_embedding) trace.input_grads.push_back(ToHost(backend, dinput));
  };
  int64_t next_forward = 0;
  for (; next_forward < warmup; ++next_forward) forward(next_forward);
  for (int64_t k = 0; k < m; ++k) {
    if (next_forward < m) forward(next_forward++);
    backward(k);
  }
  EXPECT_EQ(stage.num_in_flight(), 0);
  EXPECT_EQ(stage.recompute(), layout.recompute);
  for (const Parameter& p : stage.params()) trace.param_grads.push_back(ToHost(backend, p.grad));
  return trace;
}

class RecomputeTest : public ::testing::TestWithParam<Recompute> {};

TEST_P(RecomputeTest, SameNumbersAsWithoutRecompute) {
  backend::CpuBackend backend(1);
  const spec::ModelSpec model = TinySpec();  // 2 blocks
  const std::vector<std::pair<std::string, StageLayout>> layouts = {
      {"whole model", StageLayout::Full(model)},
      {"first stage", StageLayout{0, 2, true, false}},
      {"middle stage", StageLayout{0, 2, false, false}},
      {"last stage", StageLayout{1, 1, false, true}},
  };
  for (const auto& [name, base] : layouts) {
    SCOPED_TRACE(name);
    const Trace want = RunOneFOneB(backend, base, /*m=*/5, /*warmup=*/2);
    StageLayout layout = base;
    layout.recompute = GetParam();
    const Trace got = RunOneFOneB(backend, layout, 5, 2);
    EXPECT_EQ(got.losses, want.losses);
    EXPECT_EQ(got.outputs, want.outputs);
    EXPECT_EQ(got.input_grads, want.input_grads);
    ASSERT_EQ(got.param_grads.size(), want.param_grads.size());
    for (size_t i = 0; i < want.param_grads.size(); ++i) {
      EXPECT_EQ(got.param_grads[i], want.param_grads[i]) << "parameter " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, RecomputeTest,
                         ::testing::Values(Recompute::kSelective, Recompute::kFull),
                         [](const ::testing::TestParamInfo<Recompute>& p) {
                           return p.param == Recompute::kFull ? "Full" : "Selective";
                         });

}  // namespace
}  // namespace motley::model
