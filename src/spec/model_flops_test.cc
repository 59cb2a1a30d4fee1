// Golden tests of the FLOP counts against the anchors of performance-model.md (Korthikanti et al.
// 2022, Table 5: GPT-3 175B on 64 A100, 13.75 s per iteration <-> 51.4% MFU).
#include "spec/model_flops.h"

#include <gtest/gtest.h>

namespace motley::spec {
namespace {

// GPT-3 175B in Llama form: an MLP of 4h with two matrices has the parameters and FLOPs of a
// SwiGLU of width 8h/3 with three, so the counts match Megatron's accounting exactly.
ModelSpec Gpt3() {
  ModelSpec m;
  m.name = "gpt3-175b";
  m.num_blocks = 96;
  m.hidden = 12288;
  m.num_heads = 96;
  m.num_kv_heads = 96;
  m.ffn_hidden = 12288 * 8 / 3;
  m.vocab_size = 51200;
  m.max_seq_len = 2048;
  return m;
}

TEST(FlopsTest, Gpt3ModelFlopsMatchMegatronAccounting) {
  const ModelSpec m = Gpt3();
  const double B = 64, s = 2048, L = 96, h = 12288, V = 51200;
  const double megatron = 72.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * L * h));
  const Flops ours = ModelFlopsPerIteration(m, 64, 2048);
  EXPECT_NEAR(ours / megatron, 1.0, 1e-12);
  // The published anchor: 1.411e17 model FLOPs per iteration.
  EXPECT_NEAR(ours / 1.411e17, 1.0, 1e-3);
}

TEST(FlopsTest, Gpt3MfuAnchor) {
  const Flops flops = ModelFlopsPerIteration(Gpt3(), 64, 2048);
  const double tokens = 64.0 * 2048;
  const double mfu = Mfu(ModelFlopsPerToken(Gpt3(), 2048), tokens / 13.75, 64 * 312e12);
  EXPECT_NEAR(mfu, 0.514, 0.001);
  // 160 TFLOP/s per GPU.
  EXPECT_NEAR(flops / 13.75 / 64 / 1e12, 160.0, 1.0);
}

TEST(FlopsTest, TpShardsSumToWholeBlock) {
  const ModelSpec m = Gpt3();
  const BlockMatmuls whole = BlockForwardMatmuls(m, 2, 512, 1);
  const BlockMatmuls shard = BlockForwardMatmuls(m, 2, 512, 8);
  auto total = [](const BlockMatmuls& mm) {
    return mm.qkv.flops() + mm.out.flops() + mm.gate_up.flops() + mm.down.flops() +
           mm.head_batch * (mm.scores.flops() + mm.context.flops());
  };
  EXPECT_NEAR(total(shard) * 8 / total(whole), 1.0, 1e-12);
  EXPECT_NEAR(total(whole), BlockForwardFlops(m, 2, 512), 1.0);
}

TEST(FlopsTest, GqaShrinksKvProjection) {
  ModelSpec mha = Gpt3();
  ModelSpec gqa = mha;
  gqa.num_kv_heads = 8;
  EXPECT_LT(BlockForwardFlops(gqa, 1, 2048), BlockForwardFlops(mha, 1, 2048));
  // The score products do not depend on the kv heads.
  EXPECT_DOUBLE_EQ(AttentionScoreForwardFlops(gqa, 1, 2048),
                   AttentionScoreForwardFlops(mha, 1, 2048));
}

// The per-token count is PaLM's 6 N + 12 L h s, N the matmul weights (every parameter but the
// embedding and the norms), also with grouped-query attention and a SwiGLU of any width.
TEST(FlopsTest, PerTokenIsSixNPlusAttention) {
  ModelSpec m = Gpt3();
  m.num_kv_heads = 8;
  m.ffn_hidden = 3 * m.hidden + 64;
  const double norms = static_cast<double>(2 * m.num_blocks * m.hidden + m.hidden);
  const double n = static_cast<double>(m.NonEmbeddingParams()) - norms;  // the matmul weights
  const double palm = 6.0 * n + 12.0 * 96 * 12288 * 2048;
  EXPECT_NEAR(ModelFlopsPerToken(m, 2048) / palm, 1.0, 1e-12);
}

TEST(FlopsTest, MfuIsZeroWithoutAPeak) {
  EXPECT_EQ(Mfu(1e9, 100.0, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(Mfu(1e9, 100.0, 4e11), 0.25);
}

}  // namespace
}  // namespace motley::spec
