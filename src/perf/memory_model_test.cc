// Golden tests of the memory model: activation bytes per block against Korthikanti et al. 2022,
// Table 2, evaluated by hand for GPT-3 175B (s=2048, b=1, h=12288, a=96, t=8); state bytes per
// parameter (ZeRO paper); 1F1B in-flight depth.
#include "perf/memory_model.h"

#include <gtest/gtest.h>

namespace motley::perf {
namespace {

spec::ModelSpec Gpt3() {
  spec::ModelSpec m;
  m.num_blocks = 96;
  m.hidden = 12288;
  m.num_heads = 96;
  m.num_kv_heads = 96;
  m.ffn_hidden = 32768;
  m.vocab_size = 51200;
  m.max_seq_len = 2048;
  return m;
}

PerfSettings Bf16(bool sp, bool flash) {
  PerfSettings s;
  s.precision = spec::Precision::kBf16;
  s.sequence_parallel = sp;
  s.flash_attention = flash;
  return s;
}

TEST(MemoryModelTest, KorthikantiTable2Rows) {
  const spec::ModelSpec m = Gpt3();
  using spec::Recompute;
  // sbh = 2048 * 12288 = 25,165,824; 5as/h = 80.
  // no parallelism: sbh (34 + 80)
  EXPECT_DOUBLE_EQ(ActivationBytesPerBlock(m, 1, 2048, 1, Recompute::kNone, Bf16(false, false)),
                   2868903936.0);
  // TP without SP: sbh (10 + 24/8 + 80/8)
  EXPECT_DOUBLE_EQ(ActivationBytesPerBlock(m, 1, 2048, 8, Recompute::kNone, Bf16(false, false)),
                   578813952.0);
  // TP + SP: sbh (34 + 80) / 8
  EXPECT_DOUBLE_EQ(ActivationBytesPerBlock(m, 1, 2048, 8, Recompute::kNone, Bf16(true, false)),
                   358612992.0);
  // TP + SP + selective recompute: 34 sbh / 8
  EXPECT_DOUBLE_EQ(
      ActivationBytesPerBlock(m, 1, 2048, 8, Recompute::kSelective, Bf16(true, false)),
      106954752.0);
  // Full recompute with SP: 2 sbh / 8
  EXPECT_DOUBLE_EQ(ActivationBytesPerBlock(m, 1, 2048, 8, Recompute::kFull, Bf16(true, false)),
                   6291456.0);
  // A fused attention drops the score term like selective recompute does.
  EXPECT_DOUBLE_EQ(ActivationBytesPerBlock(m, 1, 2048, 8, Recompute::kNone, Bf16(true, true)),
                   106954752.0);
  // fp32 doubles.
  PerfSettings fp32 = Bf16(true, true);
  fp32.precision = spec::Precision::kFp32;
  EXPECT_DOUBLE_EQ(ActivationBytesPerBlock(m, 1, 2048, 8, Recompute::kNone, fp32), 2 * 106954752.0);
}

TEST(MemoryModelTest, StateBytesPerParameter) {
  spec::ModelSpec m = Gpt3();
  StageMemoryInput in;
  in.num_blocks = 1;
  in.tp = 1;
  in.in_flight = 0;
  const double params = static_cast<double>(m.BlockParams());
  StageMemory mem = StageMemoryPerDevice(m, in, Bf16(true, true));
  EXPECT_DOUBLE_EQ(mem.weights + mem.gradients + mem.optimizer, 16.0 * params);
  in.sharding = spec::OptimizerSharding::kZero1;
  in.dp_degree = 8;
  mem = StageMemoryPerDevice(m, in, Bf16(true, true));
  EXPECT_DOUBLE_EQ(mem.weights + mem.gradients + mem.optimizer, (4.0 + 12.0 / 8.0) * params);
  PerfSettings fp32 = Bf16(true, true);
  fp32.precision = spec::Precision::kFp32;
  mem = StageMemoryPerDevice(m, in, fp32);
  EXPECT_DOUBLE_EQ(mem.weights + mem.gradients + mem.optimizer, (8.0 + 8.0 / 8.0) * params);
}

// motley's runtime splits a block's attention and MLP weights over the TP ranks and keeps its
// norms, the embedding and the head whole on every rank (model/parameters.h).
TEST(MemoryModelTest, EmbeddingHeadAndNormsAreWholeOnEveryTpRank) {
  const spec::ModelSpec m = Gpt3();
  const double c = static_cast<double>(m.hidden);
  const double v = static_cast<double>(m.vocab_size);
  StageMemoryInput in;
  in.num_blocks = 2;
  in.tp = 8;
  in.in_flight = 0;
  const PerfSettings s = Bf16(true, true);
  const double blocks = StageMemoryPerDevice(m, in, s).weights;
  EXPECT_DOUBLE_EQ(blocks, 2.0 * 2 * ((static_cast<double>(m.BlockParams()) - 2 * c) / 8 + 2 * c));
  in.has_embedding = true;
  EXPECT_DOUBLE_EQ(StageMemoryPerDevice(m, in, s).weights - blocks, 2.0 * v * c);
  in.has_embedding = false;
  in.has_head = true;
  EXPECT_DOUBLE_EQ(StageMemoryPerDevice(m, in, s).weights - blocks, 2.0 * (c + v * c));
}

TEST(MemoryModelTest, ActivationsScaleWithInFlightAndStageExtras) {
  const spec::ModelSpec m = Gpt3();
  StageMemoryInput in;
  in.num_blocks = 12;
  in.tp = 8;
  in.seq_len = 2048;
  in.in_flight = 8;  // stage 0 of 8 under 1F1B
  const PerfSettings s = Bf16(true, true);
  const StageMemory first = StageMemoryPerDevice(m, in, s);
  EXPECT_DOUBLE_EQ(first.activations, 8 * 12 * 106954752.0);
  in.in_flight = 1;  // last stage
  in.has_head = true;
  const StageMemory last = StageMemoryPerDevice(m, in, s);
  EXPECT_DOUBLE_EQ(last.activations, 12 * 106954752.0);
  // fp32 logits over the whole vocabulary: the head is replicated on every TP rank.
  EXPECT_DOUBLE_EQ(last.buffers, 4.0 * 2048 * 51200);
  EXPECT_GT(last.weights, first.weights);                   // the head's parameters
}

}  // namespace
}  // namespace motley::perf
