// Generation: a small model trained on a repeating string, saved as a checkpoint, continues the
// string from a prompt; sampling helpers behave as documented.
#include "train/generate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "backend/cpu/cpu_backend.h"
#include "model/optimizer.h"
#include "train/byte_tokenizer.h"
#include "train/checkpoint/checkpoint.h"

namespace motley::train {
namespace {

spec::ModelSpec SmallByteModel() {
  spec::ModelSpec m;
  m.name = "gen-test";
  m.num_blocks = 2;
  m.hidden = 32;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.ffn_hidden = 64;
  m.vocab_size = 256;
  m.max_seq_len = 16;
  return m;
}

class TempRoot {
 public:
  TempRoot()
      : path_((std::filesystem::temp_directory_path() /
               ("motley-generate-test-" + std::to_string(::getpid())))
                  .string()) {
    std::filesystem::remove_all(path_);
  }
  ~TempRoot() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Trains on random windows of "hello motley! " repeated, then saves a checkpoint under `root`.
void TrainAndSave(const spec::ModelSpec& m, const std::string& root) {
  backend::CpuBackend be;
  const int64_t B = 8, T = 16, steps = 150;
  auto stage = model::Stage::Create(be, m, model::StageLayout::Full(m), B, T, 42);
  ASSERT_TRUE(stage.ok()) << stage.status().message();
  spec::OptimizerSpec opt;
  opt.lr = 1e-2F;
  opt.min_lr = 1e-3F;
  opt.warmup_steps = 10;
  opt.weight_decay = 0.0F;
  model::Optimizer optimizer(be, (*stage)->params(), opt, steps);
  std::string text;
  while (text.size() < 600) text += "hello motley! ";
  const std::vector<int32_t> ids = ByteTokenizer::Encode(text);
  std::mt19937_64 rng(7);
  tensor::Tensor inputs = be.Empty(tensor::Shape{B, T}, tensor::DType::kI32);
  tensor::Tensor targets = be.Empty(tensor::Shape{B, T}, tensor::DType::kI32);
  double loss = 0.0;
  for (int64_t step = 1; step <= steps; ++step) {
    std::vector<int32_t> in, tg;
    for (int64_t b = 0; b < B; ++b) {
      const size_t off = rng() % (ids.size() - static_cast<size_t>(T) - 1);
      in.insert(in.end(), ids.begin() + static_cast<std::ptrdiff_t>(off),
                ids.begin() + static_cast<std::ptrdiff_t>(off) + T);
      tg.insert(tg.end(), ids.begin() + static_cast<std::ptrdiff_t>(off) + 1,
                ids.begin() + static_cast<std::ptrdiff_t>(off) + T + 1);
    }
    be.CopyFromHost(inputs, in.data(), in.size() * sizeof(int32_t));
    be.CopyFromHost(targets, tg.data(), tg.size() * sizeof(int32_t));
    optimizer.ZeroGrads();
    loss = (*stage)->ForwardLoss(0, inputs, targets) / static_cast<double>(B * T);
    (*stage)->BackwardLoss(0, 1.0F / static_cast<float>(B * T));
    optimizer.Step(step, model::ClipScale(optimizer.GradSquaredNorm(), opt.grad_clip));
  }
  EXPECT_LT(loss, 0.2) << "the model did not learn the repeating string";
  CheckpointMetadata meta;
  meta.step = steps;
  auto saved = SaveCheckpoint(root, meta, {{&be, &(*stage)->params()}});
  ASSERT_TRUE(saved.ok()) << saved.status().message();
}

TEST(Generate, TrainedModelContinuesTheRepeatingString) {
  const spec::ModelSpec m = SmallByteModel();
  TempRoot root;
  TrainAndSave(m, root.path());
  if (HasFatalFailure()) return;

  GenerateOptions opt;
  opt.prompt = "hello mo";
  opt.max_new_tokens = 24;  // longer than the 16-token window: the window slides
  auto text = GenerateFromCheckpoint(m, root.path(), opt);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text, "hello motley! hello motley! hell");

  // Low-temperature sampling on a confident model gives the same continuation, reproducibly.
  opt.temperature = 0.05F;
  opt.seed = 3;
  auto sampled = GenerateFromCheckpoint(m, root.path(), opt);
  ASSERT_TRUE(sampled.ok());
  EXPECT_EQ(*sampled, *text);
}

TEST(Generate, Errors) {
  const spec::ModelSpec m = SmallByteModel();
  TempRoot root;
  GenerateOptions opt;
  opt.prompt = "x";
  auto missing = GenerateFromCheckpoint(m, root.path(), opt);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("generate"), std::string::npos);

  backend::CpuBackend be;
  auto gen = Generator::Create(be, m, 0);
  ASSERT_TRUE(gen.ok()) << gen.status().message();
  opt.prompt = "";
  EXPECT_FALSE((*gen)->Generate(opt).ok());
  EXPECT_FALSE(Generator::Create(be, m, 64).ok());  // past max_seq_len

  spec::ModelSpec small_vocab = m;
  small_vocab.vocab_size = 32;
  auto gen32 = Generator::Create(be, small_vocab, 8);
  ASSERT_TRUE(gen32.ok());
  opt.prompt = "A";  // byte 65 >= 32
  auto r = (*gen32)->Generate(opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside the model's vocabulary of 32"), std::string::npos);
}

// A checkpoint holding a NaN weight, or written for another model, is refused (it used to load
// and generate garbage).
TEST(Generate, NonFiniteWeightsAndOtherModelsAreRefused) {
  const spec::ModelSpec m = SmallByteModel();
  backend::CpuBackend be;
  TempRoot root;
  model::ParameterSet set =
      model::ParameterSet::Allocate(be, model::StageParamInfos(m, model::StageLayout::Full(m)));
  set.Initialize(be, 3);
  model::Parameter& q = *set.Find("model.layers.1.self_attn.q_proj.weight");
  std::vector<float> v(static_cast<size_t>(q.value.numel()));
  be.CopyToHost(v.data(), q.value, q.value.bytes());
  v[17] = std::nanf("");
  be.CopyFromHost(q.value, v.data(), v.size() * sizeof(float));
  CheckpointMetadata meta;
  meta.step = 1;
  meta.model = m;
  ASSERT_TRUE(SaveCheckpoint(root.path(), meta, {{&be, &set}}).ok());
  GenerateOptions opt;
  opt.prompt = "x";
  auto nan = GenerateFromCheckpoint(m, root.path(), opt);
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.status().message().find("'model.layers.1.self_attn.q_proj.weight' holds a "
                                        "non-finite value (nan) at element 17"),
            std::string::npos)
      << nan.status().message();
  spec::ModelSpec eps = m;
  eps.norm_eps = 1e-6F;
  auto other = GenerateFromCheckpoint(eps, root.path(), opt);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("model.norm_eps: 1e-05 in the checkpoint, 1e-06"),
            std::string::npos)
      << other.status().message();
}

TEST(Generate, SampleTokenGreedyAndTemperature) {
  const std::vector<float> logits = {0.0F, 2.0F, 1.0F, 5.0F};
  EXPECT_EQ(SampleToken(logits, 4, 0.0F, 0.9), 3);
  EXPECT_EQ(SampleToken(logits, 3, 0.0F, 0.9), 1);  // ids >= limit are never picked
  // Temperature 1 over {0, 2, 1}: p = e^0, e^2, e^1 / total; cumulative split points.
  const double total = 1.0 + std::exp(2.0) + std::exp(1.0);
  EXPECT_EQ(SampleToken(logits, 3, 1.0F, 0.5 / total), 0);
  EXPECT_EQ(SampleToken(logits, 3, 1.0F, (1.0 + 0.5) / total), 1);
  EXPECT_EQ(SampleToken(logits, 3, 1.0F, (1.0 + std::exp(2.0) + 0.5) / total), 2);
}

TEST(Generate, SampleTokenTopKDrawsOnlyAmongTheKMostLikely) {
  const std::vector<float> logits = {0.0F, 2.0F, 1.0F, 5.0F};
  // Top 2 of {0, 2, 1, 5}: ids 3 and 1, p = e^5, e^2 / (e^5 + e^2), in id order 1 then 3.
  const double total = std::exp(2.0) + std::exp(5.0);
  for (double u : {0.0, 0.3, 0.6, 0.999}) {
    const int32_t id = SampleToken(logits, 4, 1.0F, u, 2);
    EXPECT_TRUE(id == 1 || id == 3) << u;
  }
  EXPECT_EQ(SampleToken(logits, 4, 1.0F, 0.5 * std::exp(2.0) / total, 2), 1);
  EXPECT_EQ(SampleToken(logits, 4, 1.0F, (std::exp(2.0) + 1.0) / total, 2), 3);
  // k >= the candidates: no restriction.
  const double all = 1.0 + std::exp(2.0) + std::exp(1.0);
  EXPECT_EQ(SampleToken(logits, 3, 1.0F, 0.5 / all, 3), 0);
}

}  // namespace
}  // namespace motley::train
