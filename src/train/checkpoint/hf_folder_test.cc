// Hugging Face folders as input: config.json plus one or more safetensors files, with or without
// an index, in BF16 or F16 (converted exactly to fp32), tied embeddings untied; configs motley's
// model cannot express, or of another model, are refused naming the field. The folders are made
// byte by byte here (the real save_pretrained is exercised by tests/hf).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_test_util.h"
#include "train/checkpoint/model_config.h"

namespace motley::train {
namespace {

namespace fs = std::filesystem;
using testing::Model4;
using testing::TempDir;

struct HalfTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<uint16_t> bits;
  std::vector<float> values;  // what motley must read
};

// A safetensors file of 16-bit tensors (`dtype` "BF16" or "F16").
void WriteHalfFile(const std::string& path, const std::vector<HalfTensor>& tensors,
                   const std::string& dtype) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t offset = 0;
  std::string data;
  for (const HalfTensor& t : tensors) {
    const uint64_t bytes = t.bits.size() * 2;
    header[t.name] = {
        {"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    data.append(reinterpret_cast<const char*>(t.bits.data()), bytes);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  testing::WriteBytes(path, out + text + data);
}

// The tensors of `m` (all but `skip`) with random 16-bit values: BF16 as the top half of a
// float, F16 as random sign/exponent/mantissa bits in the normal range.
std::vector<HalfTensor> RandomTensors(const spec::ModelSpec& m, bool bf16,
                                      const std::string& skip = "") {
  std::mt19937 rng(3);
  std::vector<HalfTensor> out;
  for (const model::ParamInfo& info : model::StageParamInfos(m, model::StageLayout::Full(m))) {
    if (info.name == skip) continue;
    HalfTensor t{info.name, info.shape.dims(), {}, {}};
    std::normal_distribution<float> normal(0.0F, 0.05F);
    for (int64_t i = 0; i < info.shape.numel(); ++i) {
      uint16_t bits = 0;
      if (bf16) {
        bits = static_cast<uint16_t>(std::bit_cast<uint32_t>(normal(rng)) >> 16);
      } else {
        bits = static_cast<uint16_t>((rng() & 0x8000U) | (((rng() % 29U) + 1U) << 10) |
                                     (rng() & 0x3FFU));
      }
      t.bits.push_back(bits);
      t.values.push_back(bf16 ? Bfloat16ToFloat(bits) : HalfToFloat(bits));
    }
    out.push_back(std::move(t));
  }
  return out;
}

void WriteConfig(const std::string& dir, const spec::ModelSpec& m, bool tied,
                 const std::function<void(nlohmann::ordered_json&)>& edit = {}) {
  nlohmann::ordered_json j = ModelToHfConfig(m);
  j["tie_word_embeddings"] = tied;
  j["torch_dtype"] = "bfloat16";
  if (edit) edit(j);
  testing::WriteBytes(dir + "/" + std::string(kHfConfigFile), j.dump(2));
}

const HalfTensor& Named(const std::vector<HalfTensor>& ts, const std::string& name) {
  for (const HalfTensor& t : ts)
    if (t.name == name) return t;
  ADD_FAILURE() << name;
  return ts.front();
}

TEST(HfFolder, HalfToFloatIsExact) {
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0F);
  EXPECT_EQ(HalfToFloat(0xC000), -2.0F);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0F);               // largest normal
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0F, -14));  // smallest normal
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0F, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x03FF), std::ldexp(1023.0F, -24));
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125F);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)) && HalfToFloat(0x8000) == 0.0F);
  EXPECT_EQ(HalfToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
  EXPECT_EQ(Bfloat16ToFloat(0x3F80), 1.0F);
  EXPECT_EQ(Bfloat16ToFloat(0xC2F7), -123.5F);
}

// save_pretrained of a tied model in BF16: one model.safetensors without lm_head.weight.
TEST(HfFolder, Bf16TiedSingleFileLoadsUntied) {
  backend::CpuBackend be;
  TempDir tmp;
  const spec::ModelSpec m = Model4();
  const std::vector<HalfTensor> ts = RandomTensors(m, /*bf16=*/true, "lm_head.weight");
  WriteHalfFile(tmp.path() + "/model.safetensors", ts, "BF16");
  WriteConfig(tmp.path(), m, /*tied=*/true);

  auto reader = CheckpointReader::OpenFor(tmp.path(), m);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  EXPECT_EQ(reader->kind(), CheckpointReader::Kind::kHuggingFace);
  EXPECT_TRUE(reader->tied());
  EXPECT_FALSE(reader->has_optimizer_state());
  const std::string described = reader->Describe();
  EXPECT_NE(described.find("BF16 weights converted to fp32 master weights"), std::string::npos)
      << described;
  EXPECT_NE(described.find("lm_head.weight untied, copied from model.embed_tokens.weight"),
            std::string::npos)
      << described;

  model::ParameterSet full = testing::MakeSet(be, m, model::StageLayout::Full(m), 1);
  ASSERT_TRUE(reader->LoadIntoStage(be, full, /*load_optimizer=*/false).ok());
  for (const HalfTensor& t : ts) {
    EXPECT_EQ(testing::Host(be, full.Find(t.name)->value), t.values) << t.name;
  }
  EXPECT_EQ(testing::Host(be, full.Find("lm_head.weight")->value),
            Named(ts, "model.embed_tokens.weight").values);
  const Status moments = reader->LoadIntoStage(be, full, /*load_optimizer=*/true);
  ASSERT_FALSE(moments.ok());
  EXPECT_NE(moments.message().find("holds no optimizer state"), std::string::npos);
  // Also through the generic entry points: a folder given where a checkpoint is expected.
  model::ParameterSet head = testing::MakeSet(be, m, model::StageLayout{0, 0, false, true}, 1);
  EXPECT_TRUE(LoadIntoStage(tmp.path(), be, head, false).ok());
}

// Several F16 files, with the index save_pretrained writes for them, then without it.
TEST(HfFolder, F16ShardsWithAndWithoutAnIndex) {
  backend::CpuBackend be;
  TempDir tmp;
  const spec::ModelSpec m = Model4();
  const std::vector<HalfTensor> ts = RandomTensors(m, /*bf16=*/false);
  const size_t half = ts.size() / 2;
  const std::vector<HalfTensor> a(ts.begin(), ts.begin() + static_cast<std::ptrdiff_t>(half));
  const std::vector<HalfTensor> b(ts.begin() + static_cast<std::ptrdiff_t>(half), ts.end());
  WriteHalfFile(tmp.path() + "/model-00001-of-00002.safetensors", a, "F16");
  WriteHalfFile(tmp.path() + "/model-00002-of-00002.safetensors", b, "F16");
  nlohmann::json map = nlohmann::json::object();
  for (const HalfTensor& t : a) map[t.name] = "model-00001-of-00002.safetensors";
  for (const HalfTensor& t : b) map[t.name] = "model-00002-of-00002.safetensors";
  const std::string index = tmp.path() + "/" + kModelIndexFile;
  testing::WriteBytes(
      index, nlohmann::json{{"metadata", {{"total_size", 1}}}, {"weight_map", map}}.dump());
  WriteConfig(tmp.path(), m, /*tied=*/false);

  for (const bool with_index : {true, false}) {
    SCOPED_TRACE(with_index ? "index" : "no index");
    if (!with_index) fs::remove(index);
    auto reader = CheckpointReader::OpenFor(tmp.path(), m);
    ASSERT_TRUE(reader.ok()) << reader.status().message();
    EXPECT_NE(reader->Describe().find("2 safetensors files"), std::string::npos);
    EXPECT_NE(reader->Describe().find("F16 weights converted"), std::string::npos);
    model::ParameterSet full = testing::MakeSet(be, m, model::StageLayout::Full(m), 1);
    ASSERT_TRUE(reader->LoadIntoStage(be, full, false).ok());
    for (const HalfTensor& t : ts) {
      EXPECT_EQ(testing::Host(be, full.Find(t.name)->value), t.values) << t.name;
    }
  }
  // An index naming a file that is not there.
  map["lm_head.weight"] = "model-00003-of-00003.safetensors";
  testing::WriteBytes(index, nlohmann::json{{"weight_map", map}}.dump());
  const Status missing = CheckpointReader::Open(tmp.path()).status();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("model-00003-of-00003.safetensors: missing"), std::string::npos)
      << missing.message();
}

TEST(HfFolder, AMissingHeadOfAnUntiedModelNamesTying) {
  TempDir tmp;
  const spec::ModelSpec m = Model4();
  WriteHalfFile(tmp.path() + "/model.safetensors", RandomTensors(m, true, "lm_head.weight"),
                "BF16");
  WriteConfig(tmp.path(), m, /*tied=*/false);
  const Status s = CheckpointReader::OpenFor(tmp.path(), m).status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'lm_head.weight' is missing"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("tie_word_embeddings is false"), std::string::npos) << s.message();
}

TEST(HfFolder, AConfigOfAnotherModelNamesBothNamesOfTheField) {
  TempDir tmp;
  spec::ModelSpec three = Model4();
  three.num_blocks = 3;
  WriteHalfFile(tmp.path() + "/model.safetensors", RandomTensors(three, true), "BF16");
  WriteConfig(tmp.path(), three, false);
  const Status s = CheckpointReader::OpenFor(tmp.path(), Model4()).status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("config.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("num_hidden_layers (model.num_blocks): 3 in the checkpoint, 4 in the "
                             "run's model"),
            std::string::npos)
      << s.message();
}

// Settings of LlamaConfig that motley's model cannot express, each refused naming the field.
TEST(HfFolder, ConfigsMotleyCannotExpressAreRefusedNamingTheField) {
  const spec::ModelSpec m = Model4();
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"model_type", "mistral"},
      {"architectures", nlohmann::json::array({"LlamaModel"})},
      {"hidden_act", "gelu"},
      {"attention_bias", true},
      {"mlp_bias", true},
      {"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}},
      {"head_dim", 8},
      {"attention_dropout", 0.1},
      {"quantization_config", {{"quant_method", "gptq"}}},
      {"num_attention_heads", 3},  // does not divide hidden_size 16
      {"hidden_size", "sixteen"},
  };
  for (const auto& [key, value] : cases) {
    SCOPED_TRACE(key);
    nlohmann::ordered_json j = ModelToHfConfig(m);
    j[key] = value;
    if (key == "num_attention_heads") j.erase("head_dim");
    auto parsed = ParseHfConfig(j.dump(), "dir/config.json", "x");
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("dir/config.json"), std::string::npos);
    const std::string named = key == "num_attention_heads" ? "num_heads" : key;
    EXPECT_NE(parsed.status().message().find(named), std::string::npos)
        << parsed.status().message();
  }
  nlohmann::ordered_json no_type = ModelToHfConfig(m);
  no_type.erase("model_type");
  EXPECT_FALSE(ParseHfConfig(no_type.dump(), "c.json", "x").ok());
  // LlamaConfig's defaults fill what is absent.
  nlohmann::ordered_json minimal = {{"model_type", "llama"},    {"hidden_size", 16},
                                    {"intermediate_size", 32},  {"num_hidden_layers", 4},
                                    {"num_attention_heads", 4}, {"vocab_size", 32}};
  auto parsed = ParseHfConfig(minimal.dump(), "c.json", "x");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->model.num_kv_heads, 4);
  EXPECT_EQ(parsed->model.norm_eps, 1e-6F);
  EXPECT_EQ(parsed->model.rope_theta, 10000.0F);
  EXPECT_EQ(parsed->model.max_seq_len, 2048);
  EXPECT_FALSE(parsed->tied);
}

}  // namespace
}  // namespace motley::train
