// Tests of the parameter layout (HF names and shapes), the portable initialiser and
// plan-independent initialisation (same tensor values whatever the split into stages).
#include <cmath>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "model/init.h"
#include "model/model_test_util.h"
#include "model/parameters.h"
#include "model/stage.h"

namespace motley::model {
namespace {

using testing::TinySpec;
using testing::ToHost;

TEST(NormalInit, DeterministicPerSeedAndName) {
  const auto a = NormalInit(7, "model.norm.weight", 64, 1.0);
  EXPECT_EQ(a, NormalInit(7, "model.norm.weight", 64, 1.0));
  EXPECT_NE(a, NormalInit(8, "model.norm.weight", 64, 1.0));
  EXPECT_NE(a, NormalInit(7, "lm_head.weight", 64, 1.0));
  EXPECT_NE(ParameterSeed(7, "model.layers.1.mlp.up_proj.weight"),
            ParameterSeed(7, "model.layers.10.mlp.up_proj.weight"));
}

// Golden values from an independent Python implementation of the same specification
// (mt19937_64 as in [rand.predef], FNV-1a + splitmix64 seed, Box-Muller in double): pins the
// generator so that a given (seed, name) gives the same weights on every platform and version.
TEST(NormalInit, MatchesTheSpecifiedGenerator) {
  EXPECT_EQ(ParameterSeed(1234, "lm_head.weight"), 0x12709697fdde6fb1ULL);
  const auto x = NormalInit(1234, "lm_head.weight", 5, 1.0);
  const float golden[] = {-0.304744691F, -0.609475493F, -0.740555048F, -1.40709698F, -0.057201121F};
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(x[i], golden[i], 1e-6F) << i;
}

TEST(NormalInit, PrefixStableAndScaled) {
  const auto four = NormalInit(3, "w", 4, 1.0);
  const auto three = NormalInit(3, "w", 3, 1.0);
  ASSERT_EQ(three.size(), 3U);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(three[i], four[i]);
  const auto scaled = NormalInit(3, "w", 4, 0.5);
  for (size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(scaled[i], 0.5F * four[i]);
}

TEST(NormalInit, MomentsOfAStandardNormal) {
  const int64_t n = 200000;
  const auto x = NormalInit(42, "moments", n, 2.0);
  double sum = 0, sum2 = 0, sum4 = 0;
  for (float f : x) {
    const auto d = static_cast<double>(f);
    sum += d;
    sum2 += d * d;
    sum4 += d * d * d * d;
  }
  const double mean = sum / static_cast<double>(n);
  const double var = sum2 / static_cast<double>(n) - mean * mean;
  // Standard errors: mean 2/sqrt(n) = 0.0045, var about 4*sqrt(2/n) = 0.013.
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(var, 4.0, 0.06);
  // Kurtosis of a normal is 3 (a uniform would give 1.8).
  EXPECT_NEAR(sum4 / static_cast<double>(n) / (var * var), 3.0, 0.1);
}

TEST(StageParamInfos, HuggingFaceNamesShapesAndInit) {
  const auto model = TinySpec();
  const auto infos = StageParamInfos(model, StageLayout::Full(model));
  ASSERT_EQ(infos.size(), 1 + 9 * 2 + 2U);
  EXPECT_EQ(infos[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(infos[0].shape, (tensor::Shape{32, 16}));
  EXPECT_EQ(infos[1].name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(infos[1].init, InitKind::kOnes);
  EXPECT_FALSE(infos[1].weight_decay);
  EXPECT_EQ(infos[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(infos[2].shape, (tensor::Shape{16, 16}));
  EXPECT_EQ(infos[3].name, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(infos[3].shape, (tensor::Shape{8, 16}));  // NKV*HS = 2*4
  EXPECT_EQ(infos[4].shape, (tensor::Shape{8, 16}));
  EXPECT_EQ(infos[5].name, "model.layers.0.self_attn.o_proj.weight");
  EXPECT_DOUBLE_EQ(infos[5].init_std, 0.02 / std::sqrt(4.0));  // 1/sqrt(2L), L = 2
  EXPECT_EQ(infos[6].name, "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(infos[7].shape, (tensor::Shape{32, 16}));  // gate (F, C)
  EXPECT_EQ(infos[9].name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(infos[9].shape, (tensor::Shape{16, 32}));  // down (C, F)
  EXPECT_DOUBLE_EQ(infos[9].init_std, 0.01);
  EXPECT_TRUE(infos[9].weight_decay);
  EXPECT_EQ(infos[10].name, "model.layers.1.input_layernorm.weight");
  EXPECT_EQ(infos[19].name, "model.norm.weight");
  EXPECT_EQ(infos[20].name, "lm_head.weight");
  EXPECT_DOUBLE_EQ(infos[20].init_std, 0.02);
}

// The tensors laid out for the presets add up to spec's parameter count; Llama-2-7B's is the
// 6,738,415,616 of the Hugging Face checkpoint (32 x 202,383,360 per block + 2 x 131,072,000 + 4096).
TEST(StageParamInfos, PresetsMatchTheSpecParameterCounts) {
  for (const char* name : {"tiny", "tiny-gqa", "small", "llama2-7b", "llama2-70b"}) {
    auto model = spec::ModelPreset(name);
    ASSERT_TRUE(model.ok()) << model.status().message();
    ASSERT_TRUE(ValidateStageLayout(*model, StageLayout::Full(*model), name).ok()) << name;
    int64_t total = 0;
    for (const ParamInfo& info : StageParamInfos(*model, StageLayout::Full(*model)))
      total += info.shape.numel();
    EXPECT_EQ(total, model->TotalParams()) << name;
    int64_t one_block = 0;
    for (const ParamInfo& info : StageParamInfos(*model, StageLayout{1, 1, false, false}))
      one_block += info.shape.numel();
    EXPECT_EQ(one_block, model->BlockParams()) << name;
  }
  auto llama = spec::ModelPreset("llama2-7b");
  ASSERT_TRUE(llama.ok());
  int64_t total = 0;
  for (const ParamInfo& info : StageParamInfos(*llama, StageLayout::Full(*llama)))
    total += info.shape.numel();
  EXPECT_EQ(total, 6738415616LL);
}

TEST(ValidateStageLayout, RejectsBadLayoutsWithAReason) {
  const auto model = TinySpec();
  EXPECT_TRUE(ValidateStageLayout(model, StageLayout::Full(model), "t").ok());
  Status s = ValidateStageLayout(model, StageLayout{1, 2, false, true}, "plan.json: stage 1");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("plan.json: stage 1: blocks [1, 3)"), std::string::npos)
      << s.message();
  EXPECT_FALSE(ValidateStageLayout(model, StageLayout{0, 0, false, false}, "t").ok());
  auto bad = model;
  bad.num_kv_heads = 3;
  s = ValidateStageLayout(bad, StageLayout::Full(bad), "t");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("num_kv_heads"), std::string::npos) << s.message();
  backend::CpuBackend backend;
  EXPECT_FALSE(Stage::Create(backend, model, StageLayout{0, 3, true, false}, 2, 5, 1).ok());
  EXPECT_FALSE(Stage::Create(backend, model, StageLayout::Full(model), 0, 5, 1).ok());
  auto too_long = Stage::Create(backend, model, StageLayout::Full(model), 1, 17, 1);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("max_seq_len 16"), std::string::npos);
}

// (c) Every split of the model holds bit-identical tensors under each name.
TEST(PlanIndependentInit, SameValuesWhateverTheSplit) {
  backend::CpuBackend backend;
  const auto model = TinySpec();
  auto full = Stage::Create(backend, model, StageLayout::Full(model), 2, 5, 1234);
  ASSERT_TRUE(full.ok()) << full.status().message();
  const std::vector<std::vector<StageLayout>> splits = {
      {{0, 1, true, false}, {1, 1, false, true}},
      {{0, 0, true, false}, {0, 1, false, false}, {1, 1, false, true}},
      {{0, 2, true, false}, {2, 0, false, true}},
  };
  for (const auto& split : splits) {
    std::set<std::string> seen;
    for (const StageLayout& layout : split) {
      auto stage = Stage::Create(backend, model, layout, 1, 3, 1234);
      ASSERT_TRUE(stage.ok()) << stage.status().message();
      for (const Parameter& p : (*stage)->params()) {
        const Parameter* ref = (*full)->params().Find(p.name());
        ASSERT_NE(ref, nullptr) << p.name();
        EXPECT_EQ(ToHost(backend, p.value), ToHost(backend, ref->value)) << p.name();
        EXPECT_TRUE(seen.insert(p.name()).second) << "held twice: " << p.name();
      }
    }
    EXPECT_EQ(seen.size(), (*full)->params().size());
  }
  // The values are the documented distributions.
  const auto ones = ToHost(backend, (*full)->params().Find("model.norm.weight")->value);
  for (float x : ones) EXPECT_EQ(x, 1.0F);
  const auto lm = ToHost(backend, (*full)->params().Find("lm_head.weight")->value);
  double sum2 = 0;
  for (float x : lm) sum2 += static_cast<double>(x) * static_cast<double>(x);
  EXPECT_NEAR(std::sqrt(sum2 / static_cast<double>(lm.size())), 0.02, 0.002);  // 512 samples
  // A different seed gives different weights.
  auto other = Stage::Create(backend, model, StageLayout::Full(model), 2, 5, 1235);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(ToHost(backend, (*other)->params()[0].value),
            ToHost(backend, (*full)->params()[0].value));
}

TEST(Checksums, MatchHostSums) {
  backend::CpuBackend backend;
  const auto model = TinySpec();
  auto stage = Stage::Create(backend, model, StageLayout{1, 1, false, true}, 1, 3, 9);
  ASSERT_TRUE(stage.ok());
  const auto sums = Checksums(backend, (*stage)->params());
  ASSERT_EQ(sums.size(), (*stage)->params().size());
  for (size_t i = 0; i < sums.size(); ++i) {
    const auto host = ToHost(backend, (*stage)->params()[i].value);
    double s = 0, s2 = 0;
    for (float f : host) {
      const auto x = static_cast<double>(f);
      s += x;
      s2 += x * x;
    }
    EXPECT_EQ(sums[i].name, (*stage)->params()[i].name());
    EXPECT_NEAR(sums[i].value_sum, s, 1e-9);
    EXPECT_NEAR(sums[i].value_sum_squares, s2, 1e-9);
    EXPECT_EQ(sums[i].m_sum, 0.0);
  }
}

}  // namespace
}  // namespace motley::model
