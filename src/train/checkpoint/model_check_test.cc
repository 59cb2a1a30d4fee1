// Checkpoints never load into the wrong model: the config record (checkpoint.json "model") and
// config.json are written; a checkpoint for another model is refused naming each differing field
// and both values; unknown tensors and non-finite values are errors; the writer refuses stages
// that do not make the recorded model.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_test_util.h"
#include "train/checkpoint/model_config.h"

namespace motley::train {
namespace {

using testing::Layout;
using testing::MakeSet;
using testing::Model4;
using testing::TempDir;

CheckpointMetadata MetaFor(const spec::ModelSpec& m, int64_t step = 3) {
  CheckpointMetadata md;
  md.step = step;
  md.model = m;
  return md;
}

// Saves the whole of `m` (one stage), with `m` as the config record when `record`.
std::string SaveWhole(tensor::Backend& be, const std::string& root, const spec::ModelSpec& m,
                      bool record = true, uint64_t seed = 7) {
  model::ParameterSet set = MakeSet(be, m, model::StageLayout::Full(m), seed);
  CheckpointMetadata md = record ? MetaFor(m) : CheckpointMetadata{};
  auto saved = SaveCheckpoint(root, md, {{&be, &set}});
  EXPECT_TRUE(saved.ok()) << saved.status().message();
  return saved.ok() ? *saved : "";
}

void ExpectHas(const Status& s, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(s.ok()) << "loaded";
  for (const std::string& part : parts) {
    EXPECT_NE(s.message().find(part), std::string::npos)
        << "'" << part << "' not in: " << s.message();
  }
}

TEST(ModelCheck, TheConfigRecordAndConfigJsonAreWritten) {
  backend::CpuBackend be;
  TempDir tmp;
  spec::ModelSpec m = Model4();
  m.rope_theta = 500000.0F;
  m.norm_eps = 1e-6F;
  const std::string dir = SaveWhole(be, tmp.path(), m);
  const auto sidecar = nlohmann::json::parse(testing::ReadBytes(dir + "/" + kSidecarFile));
  EXPECT_EQ(sidecar["version"], 2);
  EXPECT_EQ(sidecar["model"]["num_blocks"], 4);
  EXPECT_EQ(sidecar["model"]["num_kv_heads"], 2);
  EXPECT_EQ(sidecar["model"]["rope_theta"], 500000.0);
  EXPECT_EQ(sidecar["model"]["norm_eps"], 1e-6);  // the float's shortest form, not 9.99e-07
  EXPECT_TRUE(sidecar["files"].contains(kHfConfigFile));
  EXPECT_FALSE(sidecar["files"].contains(kMarkerFile));  // a label of the folder, not content
  EXPECT_TRUE(std::filesystem::is_regular_file(dir + "/" + kMarkerFile));

  const std::string config = testing::ReadBytes(dir + "/" + kHfConfigFile);
  auto hf = ParseHfConfig(config, "config.json", "x");
  ASSERT_TRUE(hf.ok()) << hf.status().message();
  EXPECT_TRUE(CompareModelConfigs(hf->model, m, "here").ok());
  EXPECT_FALSE(hf->tied);
  const auto j = nlohmann::json::parse(config);
  EXPECT_EQ(j["architectures"], nlohmann::json({"LlamaForCausalLM"}));
  EXPECT_EQ(j["num_hidden_layers"], 4);
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["intermediate_size"], 32);
  EXPECT_EQ(j["max_position_embeddings"], 16);
  EXPECT_EQ(j["tie_word_embeddings"], false);

  auto reader = CheckpointReader::OpenFor(dir, m);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  ASSERT_TRUE(reader->model_config().has_value());
  EXPECT_EQ(reader->model_config()->num_blocks, 4);
}

// Each case of a model the checkpoint was not written for: more blocks, other heads, another
// RoPE base or norm epsilon (the last two change no shape: only the record catches them).
TEST(ModelCheck, AnotherModelIsRefusedNamingTheFieldAndBothValues) {
  backend::CpuBackend be;
  struct Case {
    const char* field;
    std::function<void(spec::ModelSpec&)> change;
    const char* in_checkpoint;
    const char* in_run;
  };
  const std::vector<Case> cases = {
      {"num_blocks", [](spec::ModelSpec& m) { m.num_blocks = 3; }, "3", "4"},
      {"num_heads",
       [](spec::ModelSpec& m) {
         m.num_heads = 2;
         m.num_kv_heads = 2;
       },
       "2", "4"},
      {"num_kv_heads", [](spec::ModelSpec& m) { m.num_kv_heads = 4; }, "4", "2"},
      {"ffn_hidden", [](spec::ModelSpec& m) { m.ffn_hidden = 48; }, "48", "32"},
      {"vocab_size", [](spec::ModelSpec& m) { m.vocab_size = 40; }, "40", "32"},
      {"rope_theta", [](spec::ModelSpec& m) { m.rope_theta = 500000.0F; }, "500000", "10000"},
      {"norm_eps", [](spec::ModelSpec& m) { m.norm_eps = 1e-6F; }, "1e-06", "1e-05"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    TempDir tmp;
    spec::ModelSpec written = Model4();
    c.change(written);
    const std::string dir = SaveWhole(be, tmp.path(), written);
    const std::string want = fmt::format("model.{}: {} in the checkpoint, {} in the run's model",
                                         c.field, c.in_checkpoint, c.in_run);
    ExpectHas(CheckpointReader::OpenFor(tmp.path(), Model4()).status(), {dir, want});
    // name and max_seq_len are not compared: a usage limit and a label.
    spec::ModelSpec same = written;
    same.name = "other";
    same.max_seq_len = 64;
    EXPECT_TRUE(CheckpointReader::OpenFor(tmp.path(), same).ok());
  }
}

// Without a config record (an older motley's checkpoint), the tensor set is still checked.
TEST(ModelCheck, UnknownAndMissingTensorsAreErrors) {
  backend::CpuBackend be;
  TempDir deeper, shallower;
  spec::ModelSpec five = Model4();
  five.num_blocks = 5;
  SaveWhole(be, deeper.path(), five, /*record=*/false);
  ExpectHas(CheckpointReader::OpenFor(deeper.path(), Model4()).status(),
            {"tensor 'model.layers.4.", "is not a tensor of the run's model"});
  spec::ModelSpec three = Model4();
  three.num_blocks = 3;
  SaveWhole(be, shallower.path(), three, /*record=*/false);
  ExpectHas(CheckpointReader::OpenFor(shallower.path(), Model4()).status(),
            {"'model.layers.3.input_layernorm.weight' is not in model.safetensors.index.json"});
  auto reader = CheckpointReader::OpenFor(shallower.path(), three);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  EXPECT_NE(reader->Describe().find("no model config record"), std::string::npos);
}

TEST(ModelCheck, NonFiniteValuesAreRefused) {
  backend::CpuBackend be;
  const spec::ModelSpec m = Model4();
  for (const bool in_moment : {false, true}) {
    SCOPED_TRACE(in_moment ? "moment" : "weight");
    TempDir tmp;
    model::ParameterSet set = MakeSet(be, m, model::StageLayout::Full(m), 7);
    model::Parameter& p = *set.Find("model.layers.1.mlp.up_proj.weight");
    std::vector<float> v = testing::Host(be, in_moment ? p.v : p.value);
    v[5] = in_moment ? std::numeric_limits<float>::infinity()
                     : std::numeric_limits<float>::quiet_NaN();
    be.CopyFromHost(in_moment ? p.v : p.value, v.data(), v.size() * sizeof(float));
    ASSERT_TRUE(SaveCheckpoint(tmp.path(), MetaFor(m), {{&be, &set}}).ok());
    auto reader = CheckpointReader::OpenFor(tmp.path(), m);
    ASSERT_TRUE(reader.ok()) << reader.status().message();  // values are read when loaded
    model::ParameterSet target = MakeSet(be, m, model::StageLayout::Full(m), 1);
    const Status s = reader->LoadIntoStage(be, target, /*load_optimizer=*/true);
    ExpectHas(s, {in_moment ? "optimizer.v.model.layers.1.mlp.up_proj.weight"
                            : "'model.layers.1.mlp.up_proj.weight'",
                  "non-finite value", in_moment ? "(inf)" : "(nan)", "element 5"});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    if (in_moment) {  // the weights alone are finite
      EXPECT_TRUE(reader->LoadIntoStage(be, target, /*load_optimizer=*/false).ok());
    }
  }
}

TEST(ModelCheck, TheWriterRefusesStagesThatDoNotMakeTheRecordedModel) {
  backend::CpuBackend be;
  TempDir tmp;
  const spec::ModelSpec m = Model4();
  model::ParameterSet first = MakeSet(be, m, Layout(0, 2, true, false), 7);
  auto r = SaveCheckpoint(tmp.path(), MetaFor(m), {{&be, &first}});
  ExpectHas(r.status(), {"no stage wrote tensor 'model.layers.2."});
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + "/step-00000003.tmp"));
}

}  // namespace
}  // namespace motley::train
