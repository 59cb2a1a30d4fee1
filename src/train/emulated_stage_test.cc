// A model Stage on the emulated backend: the same losses and gradients as on the CPU bit for bit,
// virtual time that scales with the device speed, and the capacity check the runtime makes after
// building a stage.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/emulated/emulated_backend.h"
#include "model/stage.h"

namespace motley::train {
namespace {

spec::ModelSpec Tiny() {
  spec::ModelSpec m;
  m.name = "emu-stage";
  m.num_blocks = 2;
  m.hidden = 16;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.ffn_hidden = 32;
  m.vocab_size = 32;
  m.max_seq_len = 8;
  return m;
}

spec::DeviceType Device(double speed, double memory = 1e9) {
  spec::DeviceType t;
  t.name = speed == 1.0 ? "slow" : "fast";
  t.vendor = "cpu";
  t.memory_bytes = memory;
  t.emulated = spec::EmulatedProfile{1e9 * speed, 1e10 * speed};
  return t;
}

struct StepResult {
  double loss = 0.0;
  std::vector<std::vector<float>> grads;
};

StepResult RunStep(tensor::Backend& be) {
  const spec::ModelSpec m = Tiny();
  auto stage = model::Stage::Create(be, m, model::StageLayout::Full(m), 2, 8, 11);
  EXPECT_TRUE(stage.ok()) << stage.status().message();
  std::vector<int32_t> in(16), tg(16);
  for (int i = 0; i < 16; ++i) {
    in[static_cast<size_t>(i)] = (i * 5) % 32;
    tg[static_cast<size_t>(i)] = (i * 5 + 1) % 32;
  }
  tensor::Tensor inputs = be.Empty(tensor::Shape{2, 8}, tensor::DType::kI32);
  tensor::Tensor targets = be.Empty(tensor::Shape{2, 8}, tensor::DType::kI32);
  be.CopyFromHost(inputs, in.data(), in.size() * sizeof(int32_t));
  be.CopyFromHost(targets, tg.data(), tg.size() * sizeof(int32_t));
  StepResult r;
  r.loss = (*stage)->ForwardLoss(0, inputs, targets);
  (*stage)->BackwardLoss(0, 1.0F / 16.0F);
  for (const model::Parameter& p : (*stage)->params()) {
    std::vector<float> g(static_cast<size_t>(p.grad.numel()));
    be.CopyToHost(g.data(), p.grad, p.grad.bytes());
    r.grads.push_back(std::move(g));
  }
  return r;
}

TEST(EmulatedStage, SameNumbersAsTheCpuAndTimeScalesWithSpeed) {
  backend::CpuBackend cpu;
  const StepResult want = RunStep(cpu);

  VirtualClock slow_clock, fast_clock;
  auto slow = backend::EmulatedBackend::Create(Device(1.0), &slow_clock);
  auto fast = backend::EmulatedBackend::Create(Device(3.0), &fast_clock);
  ASSERT_TRUE(slow.ok() && fast.ok());
  const StepResult got_slow = RunStep(**slow);
  const StepResult got_fast = RunStep(**fast);
  EXPECT_EQ(got_slow.loss, want.loss);
  EXPECT_EQ(got_slow.grads, want.grads);
  EXPECT_EQ(got_fast.grads, want.grads);
  EXPECT_GT(slow_clock.now(), 0.0);
  // Each op is charged exactly 3x (a sum of hundreds of terms: equal up to rounding).
  EXPECT_NEAR(slow_clock.now(), 3.0 * fast_clock.now(), 1e-12 * slow_clock.now());
  EXPECT_GT((*slow)->stats(backend::EmulatedOp::kAttentionBackward).calls, 0);
  EXPECT_TRUE((*slow)->memory_status().ok());
  EXPECT_GT((*slow)->peak_bytes(), 0);
}

TEST(EmulatedStage, BuildingAStagePastTheCapacityIsReported) {
  VirtualClock clock;
  auto be = backend::EmulatedBackend::Create(Device(1.0, /*memory=*/64.0 * 1024), &clock, 2);
  ASSERT_TRUE(be.ok());
  const spec::ModelSpec m = Tiny();
  auto stage = model::Stage::Create(**be, m, model::StageLayout::Full(m), 2, 8, 11);
  ASSERT_TRUE(stage.ok());
  const Status mem = (*be)->memory_status();  // what the runtime checks after building a stage
  ASSERT_FALSE(mem.ok());
  EXPECT_NE(mem.message().find("emulated:2"), std::string::npos) << mem.message();
  EXPECT_NE(mem.message().find("out of memory"), std::string::npos) << mem.message();
  EXPECT_NE(mem.message().find("65536 bytes"), std::string::npos) << mem.message();
}

}  // namespace
}  // namespace motley::train
