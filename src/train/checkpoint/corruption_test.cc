// Damaged checkpoints are rejected with a clear error, one test per kind of damage. Damage that a
// checksum would catch first is also made with the checksums recomputed (RehashSidecar), so that
// each deeper check is exercised on its own.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_test_util.h"

namespace motley::train {
namespace {

namespace fs = std::filesystem;
using testing::Layout;
using testing::MakeSet;
using testing::Model4;

class Corruption : public ::testing::Test {
 protected:
  void SetUp() override {
    s0_ = MakeSet(be_, Model4(), Layout(0, 2, true, false), 7);
    s1_ = MakeSet(be_, Model4(), Layout(2, 2, false, true), 7);
    CheckpointMetadata meta;
    meta.step = 10;
    auto r = SaveCheckpoint(tmp_.path(), meta, {{&be_, &s0_}, {&be_, &s1_}});
    ASSERT_TRUE(r.ok()) << r.status().message();
    dir_ = *r;
  }
  std::string File(const std::string& name) const { return dir_ + "/" + name; }
  std::string Model0() const { return File("model-00001-of-00002.safetensors"); }

  // Opening and loading into a full model fails with a message holding every one of `parts`.
  void ExpectRejected(std::initializer_list<const char*> parts) {
    model::ParameterSet target = MakeSet(be_, Model4(), model::StageLayout::Full(Model4()), 1);
    auto r = LoadIntoStage(tmp_.path(), be_, target);
    ASSERT_FALSE(r.ok()) << "the damaged checkpoint loaded";
    for (const char* part : parts) {
      EXPECT_NE(r.status().message().find(part), std::string::npos)
          << "'" << part << "' not in: " << r.status().message();
    }
  }

  backend::CpuBackend be_;
  testing::TempDir tmp_;
  model::ParameterSet s0_, s1_;
  std::string dir_;
};

TEST_F(Corruption, MissingSidecar) {
  fs::remove(File(kSidecarFile));
  ExpectRejected({"no complete checkpoint"});
  model::ParameterSet target = MakeSet(be_, Model4(), model::StageLayout::Full(Model4()), 1);
  auto r = LoadIntoStage(dir_, be_, target);  // the folder itself
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("checkpoint.json"), std::string::npos);
  EXPECT_NE(r.status().message().find("not a complete checkpoint"), std::string::npos);
}

TEST_F(Corruption, GarbageSidecarJson) {
  testing::WriteBytes(File(kSidecarFile), "{\"format\": \"motley-checkpoint\", \"step\": 1");
  ExpectRejected({"checkpoint.json", "not valid JSON"});
}

TEST_F(Corruption, SidecarMissingAField) {
  auto j = nlohmann::json::parse(testing::ReadBytes(File(kSidecarFile)));
  j.erase("consumed_samples");
  testing::WriteBytes(File(kSidecarFile), j.dump());
  ExpectRejected({"checkpoint.json", "consumed_samples"});
}

TEST_F(Corruption, BadChecksum) {
  std::string bytes = testing::ReadBytes(Model0());
  bytes[bytes.size() - 5] = static_cast<char>(bytes[bytes.size() - 5] ^ 0x40);  // same size
  testing::WriteBytes(Model0(), bytes);
  ExpectRejected({"model-00001-of-00002.safetensors", "SHA-256 mismatch"});
}

TEST_F(Corruption, TruncatedFile) {
  const std::string bytes = testing::ReadBytes(Model0());
  testing::WriteBytes(Model0(), bytes.substr(0, bytes.size() - 100));
  ExpectRejected({"model-00001-of-00002.safetensors", "truncated"});
}

TEST_F(Corruption, TruncatedFileWithConsistentChecksum) {
  const std::string bytes = testing::ReadBytes(Model0());
  testing::WriteBytes(Model0(), bytes.substr(0, bytes.size() - 100));
  testing::RehashSidecar(dir_);
  ExpectRejected({"model-00001-of-00002.safetensors", "short data"});
}

TEST_F(Corruption, MissingFile) {
  fs::remove(File("optimizer-00002-of-00002.safetensors"));
  ExpectRejected({"optimizer-00002-of-00002.safetensors", "missing"});
}

TEST_F(Corruption, MissingIndexEntry) {
  auto j = nlohmann::json::parse(testing::ReadBytes(File(kModelIndexFile)));
  j["weight_map"].erase("model.layers.1.mlp.up_proj.weight");
  testing::WriteBytes(File(kModelIndexFile), j.dump());
  testing::RehashSidecar(dir_);
  ExpectRejected({"model.layers.1.mlp.up_proj.weight", "missing index entry"});
}

TEST_F(Corruption, IndexPointsToAFileWithoutTheTensor) {
  auto j = nlohmann::json::parse(testing::ReadBytes(File(kModelIndexFile)));
  j["weight_map"]["lm_head.weight"] = "model-00001-of-00002.safetensors";
  testing::WriteBytes(File(kModelIndexFile), j.dump());
  testing::RehashSidecar(dir_);
  ExpectRejected({"lm_head.weight", "does not hold it"});
}

TEST_F(Corruption, MalformedHeaderLength) {
  std::string bytes = testing::ReadBytes(Model0());
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>(0x7F);
  testing::WriteBytes(Model0(), bytes);
  testing::RehashSidecar(dir_);
  ExpectRejected({"model-00001-of-00002.safetensors", "malformed header"});
}

TEST_F(Corruption, GarbageHeaderJson) {
  std::string bytes = testing::ReadBytes(Model0());
  bytes.replace(8, 20, std::string(20, '#'));
  testing::WriteBytes(Model0(), bytes);
  testing::RehashSidecar(dir_);
  ExpectRejected({"model-00001-of-00002.safetensors", "header is not valid JSON"});
}

TEST_F(Corruption, OverlappingData) {
  testing::RewriteHeader(Model0(), [](nlohmann::json& h) {
    h["model.layers.0.post_attention_layernorm.weight"]["data_offsets"] =
        h["model.layers.0.input_layernorm.weight"]["data_offsets"];
  });
  testing::RehashSidecar(dir_);
  ExpectRejected({"model-00001-of-00002.safetensors", "overlap"});
}

TEST_F(Corruption, OffsetsDisagreeWithShape) {
  testing::RewriteHeader(Model0(), [](nlohmann::json& h) {
    h["model.layers.0.input_layernorm.weight"]["shape"] = {8};  // 16 floats stored
  });
  testing::RehashSidecar(dir_);
  ExpectRejected({"model.layers.0.input_layernorm.weight", "needs"});
}

// BF16 and F16 are read (converted to fp32); other dtypes are not.
TEST_F(Corruption, UnsupportedDtype) {
  testing::RewriteHeader(
      Model0(), [](nlohmann::json& h) { h["model.embed_tokens.weight"]["dtype"] = "F64"; });
  testing::RehashSidecar(dir_);
  ExpectRejected({"model.embed_tokens.weight", "F64", "not supported"});
}

TEST_F(Corruption, ShapeMismatchWithTheTargetModel) {
  spec::ModelSpec wider = Model4();
  wider.hidden = 32;
  wider.ffn_hidden = 64;
  model::ParameterSet target = MakeSet(be_, wider, Layout(0, 1, true, false), 1);
  auto r = LoadIntoStage(tmp_.path(), be_, target);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.embed_tokens.weight"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("the stage expects [32, 32]"), std::string::npos)
      << r.status().message();
}

TEST_F(Corruption, TensorAbsentFromTheCheckpoint) {
  spec::ModelSpec deeper = Model4();
  deeper.num_blocks = 6;
  model::ParameterSet target = MakeSet(be_, deeper, Layout(4, 2, false, false), 1);
  const std::vector<float> before = testing::Host(be_, target[0].value);
  auto r = LoadIntoStage(tmp_.path(), be_, target);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'model.layers.4.input_layernorm.weight' is not in "
                                      "model.safetensors.index.json"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(testing::Host(be_, target[0].value), before);  // nothing was written
}

TEST_F(Corruption, NoOptimizerStateWhenAskedFor) {
  testing::TempDir other;
  CheckpointMetadata meta;
  SaveOptions opt;
  opt.save_optimizer = false;
  ASSERT_TRUE(SaveCheckpoint(other.path(), meta, {{&be_, &s0_}, {&be_, &s1_}}, opt).ok());
  model::ParameterSet target = MakeSet(be_, Model4(), Layout(0, 1, true, false), 1);
  auto r = LoadIntoStage(other.path(), be_, target);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no optimizer state"), std::string::npos);
  EXPECT_TRUE(LoadIntoStage(other.path(), be_, target, /*load_optimizer=*/false).ok());
}

TEST_F(Corruption, EmptyRoot) {
  testing::TempDir empty;
  model::ParameterSet target = MakeSet(be_, Model4(), Layout(0, 1, true, false), 1);
  auto r = LoadIntoStage(empty.path(), be_, target);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no complete checkpoint"), std::string::npos);
}

}  // namespace
}  // namespace motley::train
