// ModelSpec: parameter counts against the published Llama-2 sizes, presets and structural checks.
#include "spec/model_spec.h"

#include <gtest/gtest.h>

namespace motley::spec {
namespace {

ModelSpec Preset(std::string_view name) {
  Result<ModelSpec> m = ModelPreset(name);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *m : ModelSpec{};
}

// Exact parameter counts of the released Hugging Face Llama-2 checkpoints.
TEST(ModelSpecTest, Llama2ParameterCountsMatchReleasedCheckpoints) {
  EXPECT_EQ(Preset("llama2-7b").TotalParams(), 6'738'415'616);
  EXPECT_EQ(Preset("llama2-13b").TotalParams(), 13'015'864'320);
  EXPECT_EQ(Preset("llama2-70b").TotalParams(), 68'976'648'192);
}

TEST(ModelSpecTest, BlockParamsCountsGqaProjections) {
  const ModelSpec m = Preset("llama2-70b");
  // q, o: 8192^2 each; k, v: 8192 * 1024 each (8 kv heads of 128); MLP 3 * 8192 * 28672; 2 norms.
  EXPECT_EQ(m.BlockParams(), 2 * 8192LL * 8192 + 2 * 8192LL * 1024 + 3 * 8192LL * 28672 + 2 * 8192);
  EXPECT_EQ(m.head_size(), 128);
}

TEST(ModelSpecTest, PresetShapes) {
  const ModelSpec tiny = Preset("tiny");
  EXPECT_EQ(tiny.num_blocks, 2);
  EXPECT_EQ(tiny.hidden, 64);
  EXPECT_EQ(tiny.num_kv_heads, 2);
  const ModelSpec gpt2 = Preset("gpt2-124m");
  EXPECT_EQ(gpt2.num_blocks, 12);
  EXPECT_EQ(gpt2.vocab_size, 50304);
  EXPECT_EQ(gpt2.ffn_hidden, 2048);
  // 12 blocks of 4*768^2 + 3*768*2048 + 2*768, embedding and untied head of 50304*768.
  EXPECT_EQ(gpt2.TotalParams(), 12 * (4 * 768LL * 768 + 3 * 768LL * 2048 + 2 * 768) +
                                    2 * 50304LL * 768 + 768);
  const ModelSpec big = Preset("llama-140b");
  EXPECT_NEAR(static_cast<double>(big.TotalParams()), 140e9, 0.5e9);
  EXPECT_EQ(big.num_kv_heads, 8);
  for (const std::string& name : ModelPresetNames()) {
    const ModelSpec m = Preset(name);
    EXPECT_EQ(m.name, name);
    EXPECT_TRUE(ValidateModelSpec(m, "preset").ok()) << name;
  }
  EXPECT_EQ(ModelPresetNames().size(), 8u);
}

TEST(ModelSpecTest, UnknownPresetListsKnownOnes) {
  Result<ModelSpec> m = ModelPreset("llama-9000");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'llama-9000'"), std::string::npos);
  EXPECT_NE(m.status().message().find("llama2-70b"), std::string::npos);
}

TEST(ModelSpecTest, ValidationNamesTheField) {
  ModelSpec m = Preset("tiny");
  m.num_heads = 5;
  EXPECT_EQ(ValidateModelSpec(m, "r.yaml: model").message(),
            "r.yaml: model.num_heads: 5 heads do not divide hidden 64");
  m = Preset("tiny");
  m.num_kv_heads = 3;
  EXPECT_EQ(ValidateModelSpec(m, "r.yaml: model").message(),
            "r.yaml: model.num_kv_heads: 3 kv heads do not divide 4 heads");
  m = Preset("tiny");
  m.vocab_size = 0;
  EXPECT_EQ(ValidateModelSpec(m, "w").message(), "w.vocab_size: must be positive, got 0");
  m = Preset("tiny");
  m.hidden = 12;
  m.num_heads = 4;
  m.num_kv_heads = 4;  // head size 3: odd
  EXPECT_NE(ValidateModelSpec(m, "w").message().find("even for RoPE"), std::string::npos);
}

}  // namespace
}  // namespace motley::spec
