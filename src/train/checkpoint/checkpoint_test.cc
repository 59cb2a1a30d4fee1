// Checkpoints: round trips across stage layouts, the on-disk layout, keep-last-K, and saves
// interrupted at every phase never replacing the last good checkpoint.
#include "train/checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#include "train/checkpoint/checkpoint_test_util.h"

namespace motley::train {
namespace {

namespace fs = std::filesystem;
using testing::Layout;
using testing::MakeSet;
using testing::Model4;
using testing::TempDir;

CheckpointMetadata Meta(int64_t step) {
  CheckpointMetadata m;
  m.step = step;
  m.consumed_samples = step * 8;
  m.config_hash = "cfg-abc123";
  m.rng = {{"seed", 1234}};
  m.data_loader = {{"next_step", step + 1}};
  m.plan = {{"name", "plan-A"}, {"stages", 2}};
  return m;
}

// Plan A: two stages [emb + blocks 0-1], [blocks 2-3 + head].
struct PlanA {
  model::ParameterSet s0, s1;
  PlanA(tensor::Backend& be, uint64_t seed, float salt)
      : s0(MakeSet(be, Model4(), Layout(0, 2, true, false), seed, salt)),
        s1(MakeSet(be, Model4(), Layout(2, 2, false, true), seed, salt)) {}
  std::vector<StageToSave> stages(tensor::Backend& be) { return {{&be, &s0}, {&be, &s1}}; }
};

TEST(Checkpoint, WrittenUnderOneLayoutLoadsIntoAnyOther) {
  backend::CpuBackend be;
  TempDir tmp;
  PlanA a(be, 7, 0.25F);
  auto saved = SaveCheckpoint(tmp.path(), Meta(10), a.stages(be));
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  EXPECT_EQ(*saved, tmp.path() + "/step-00000010");

  const model::ParameterSet full =
      MakeSet(be, Model4(), model::StageLayout::Full(Model4()), 7, 0.25F);
  // Plan B: three stages of 1, 2 and 1 blocks; plus the whole model; plus a middle-only stage.
  for (const model::StageLayout& layout :
       {Layout(0, 1, true, false), Layout(1, 2, false, false), Layout(3, 1, false, true),
        model::StageLayout::Full(Model4()), Layout(1, 1, false, false)}) {
    model::ParameterSet target = MakeSet(be, Model4(), layout, /*seed=*/99, /*salt=*/5.0F);
    auto meta = LoadIntoStage(tmp.path(), be, target);
    ASSERT_TRUE(meta.ok()) << meta.status().message();
    testing::ExpectSameAs(be, full, target);
    EXPECT_EQ(meta->step, 10);
    EXPECT_EQ(meta->consumed_samples, 80);
    EXPECT_EQ(meta->config_hash, "cfg-abc123");
    EXPECT_EQ(meta->rng["seed"], 1234);
    EXPECT_EQ(meta->data_loader["next_step"], 11);
    EXPECT_EQ(meta->plan["name"], "plan-A");
  }
  // Values only: the moments stay as they were.
  model::ParameterSet values_only = MakeSet(be, Model4(), Layout(0, 4, true, true), 99, 5.0F);
  const model::ParameterSet before = MakeSet(be, Model4(), Layout(0, 4, true, true), 99, 5.0F);
  ASSERT_TRUE(LoadIntoStage(tmp.path(), be, values_only, /*load_optimizer=*/false).ok());
  for (const model::Parameter& p : values_only) {
    EXPECT_EQ(testing::Host(be, p.value), testing::Host(be, full.Find(p.name())->value));
    EXPECT_EQ(testing::Host(be, p.m), testing::Host(be, before.Find(p.name())->m));
  }
}

TEST(Checkpoint, FolderHoldsStageFilesIndicesSidecarAndLatest) {
  backend::CpuBackend be;
  TempDir tmp;
  PlanA a(be, 7, 0.0F);
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(3), a.stages(be)).ok());
  const std::string dir = tmp.path() + "/step-00000003";
  for (const char* f :
       {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "optimizer-00001-of-00002.safetensors", "optimizer-00002-of-00002.safetensors",
        kModelIndexFile, kOptimizerIndexFile, kSidecarFile}) {
    EXPECT_TRUE(fs::is_regular_file(dir + "/" + f)) << f;
  }
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-00000003.tmp"));
  EXPECT_EQ(testing::ReadBytes(tmp.path() + "/latest"), "step-00000003\n");

  const auto index = nlohmann::json::parse(testing::ReadBytes(dir + "/" + kModelIndexFile));
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["model.layers.3.mlp.down_proj.weight"],
            "model-00002-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["lm_head.weight"], "model-00002-of-00002.safetensors");
  EXPECT_FALSE(index["weight_map"].contains("optimizer.m.lm_head.weight"));
  EXPECT_EQ(index["weight_map"].size(), 2 + 4 * model::kParamsPerBlock + 1);

  const auto sidecar = nlohmann::json::parse(testing::ReadBytes(dir + "/" + kSidecarFile));
  EXPECT_EQ(sidecar["step"], 3);
  EXPECT_EQ(sidecar["files"].size(), 6U);  // 4 safetensors + 2 indices
  const std::string model0 = dir + "/model-00001-of-00002.safetensors";
  EXPECT_EQ(sidecar["files"]["model-00001-of-00002.safetensors"]["sha256"],
            Sha256Hex(testing::ReadBytes(model0)));

  auto header = ReadSafetensorsHeader(model0);
  ASSERT_TRUE(header.ok()) << header.status().message();
  EXPECT_EQ(header->metadata.at("format"), "pt");
  EXPECT_EQ(header->data_start % 8, 0U);  // header padded to 8 bytes
  const SafetensorsEntry* emb = header->Find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{32, 16}));

  auto reader = CheckpointReader::Open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  EXPECT_TRUE(reader->has_optimizer_state());
  EXPECT_EQ(reader->TensorNames().size(), 2 + 4 * model::kParamsPerBlock + 1);
  auto wte = reader->ReadTensor("model.embed_tokens.weight");
  ASSERT_TRUE(wte.ok());
  EXPECT_EQ(*wte, testing::Host(be, a.s0.Find("model.embed_tokens.weight")->value));
}

TEST(Checkpoint, KeepsTheLastKAndFindsTheLatest) {
  backend::CpuBackend be;
  TempDir tmp;
  PlanA a(be, 7, 0.0F);
  SaveOptions opt;
  opt.keep_last = 2;
  for (int64_t step : {1, 2, 3, 4, 5}) {
    ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(step), a.stages(be), opt).ok());
  }
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-00000003"));
  EXPECT_TRUE(fs::exists(tmp.path() + "/step-00000004"));
  EXPECT_TRUE(fs::exists(tmp.path() + "/step-00000005"));
  auto latest = FindLatestCheckpoint(tmp.path());
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, tmp.path() + "/step-00000005");

  // A dangling `latest` falls back to the highest complete step.
  testing::WriteBytes(tmp.path() + "/latest", "step-00000099\n");
  latest = FindLatestCheckpoint(tmp.path());
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, tmp.path() + "/step-00000005");
  // Saving the same step again replaces it.
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(5), a.stages(be), opt).ok());
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-00000005.old"));
  EXPECT_TRUE(CheckpointReader::Open(tmp.path()).ok());
}

TEST(Checkpoint, SaveInterruptedAtAnyPhaseKeepsTheLastGoodCheckpoint) {
  backend::CpuBackend be;
  TempDir tmp;
  PlanA good(be, 7, 0.0F);
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(10), good.stages(be)).ok());
  const model::ParameterSet want = MakeSet(be, Model4(), model::StageLayout::Full(Model4()), 7);

  PlanA newer(be, 8, 1.0F);  // different values
  for (const char* fail_at :
       {"begin", "stage 0", "stage 1", "index", "sidecar", "fsync", "rename", "latest"}) {
    SCOPED_TRACE(fail_at);
    SaveOptions opt;
    opt.keep_last = 1;  // pruning would delete step 10 if the save got that far
    std::vector<std::string> phases;
    opt.fault_hook = [&](std::string_view phase) {
      phases.emplace_back(phase);
      return phase == fail_at ? Err("injected failure at {}", phase) : Status::Ok();
    };
    auto r = SaveCheckpoint(tmp.path(), Meta(20), newer.stages(be), opt);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("injected failure"), std::string::npos);
    EXPECT_EQ(phases.back(), fail_at);

    auto latest = FindLatestCheckpoint(tmp.path());
    ASSERT_TRUE(latest.ok()) << latest.status().message();
    EXPECT_EQ(*latest, tmp.path() + "/step-00000010");
    model::ParameterSet loaded = MakeSet(be, Model4(), model::StageLayout::Full(Model4()), 1, 9.0F);
    auto meta = LoadIntoStage(tmp.path(), be, loaded);
    ASSERT_TRUE(meta.ok()) << meta.status().message();
    EXPECT_EQ(meta->step, 10);
    testing::ExpectSameAs(be, want, loaded);
  }
  // The next complete save succeeds over the leftovers and becomes the latest.
  ASSERT_TRUE(SaveCheckpoint(tmp.path(), Meta(20), newer.stages(be)).ok());
  EXPECT_FALSE(fs::exists(tmp.path() + "/step-00000020.tmp"));
  auto meta = CheckpointReader::Open(tmp.path());
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->metadata().step, 20);
}

TEST(Checkpoint, TensorParallelShardsAreSavedWholeAndLoadIntoAnyDegree) {
  backend::CpuBackend be;
  TempDir tmp;
  const spec::ModelSpec m = Model4();
  auto tp = [](int rank, int degree) { return model::StageLayout{0, 4, true, true, rank, degree}; };
  const model::ParameterSet r0 = MakeSet(be, m, tp(0, 2), 7, 0.25F);
  const model::ParameterSet r1 = MakeSet(be, m, tp(1, 2), 7, 0.25F);
  ASSERT_TRUE(r0.Find("model.layers.0.self_attn.o_proj.weight")->info.sharded());

  // Written from a TP group of 2 (one stage): the files hold whole tensors.
  auto saved = SaveCheckpoint(tmp.path() + "/tp", Meta(4), {{&be, &r0, {{&be, &r1}}}});
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  model::ParameterSet full = MakeSet(be, m, model::StageLayout::Full(m), 1, 9.0F);
  ASSERT_TRUE(LoadIntoStage(tmp.path() + "/tp", be, full).ok());
  testing::ExpectSameAs(be, MakeSet(be, m, model::StageLayout::Full(m), 7, 0.25F), full);

  // Written by plan A (no TP), loaded by each rank of a TP group of 4 heads / 2.
  PlanA a(be, 7, 0.25F);
  ASSERT_TRUE(SaveCheckpoint(tmp.path() + "/a", Meta(4), a.stages(be)).ok());
  for (int rank : {0, 1}) {
    model::ParameterSet shard = MakeSet(be, m, tp(rank, 2), 1, 9.0F);
    auto r = LoadIntoStage(tmp.path() + "/a", be, shard);
    ASSERT_TRUE(r.ok()) << r.status().message();
    testing::ExpectSameAs(be, rank == 0 ? r0 : r1, shard);
  }

  // One rank's shards alone do not make whole tensors.
  auto partial = SaveCheckpoint(tmp.path() + "/partial", Meta(4), {{&be, &r0}});
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("the TP shards cover"), std::string::npos)
      << partial.status().message();
}

TEST(Checkpoint, StageFilesTravelAsJson) {
  StageFiles f;
  f.stage = 2;
  f.model = {"model-00003-of-00004.safetensors", 1234, "ab", {"x", "y"}};
  auto back = StageFilesFromJson(StageFilesToJson(f));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->stage, 2);
  EXPECT_EQ(back->model.tensors, f.model.tensors);
  EXPECT_FALSE(back->optimizer.has_value());
  EXPECT_FALSE(StageFilesFromJson(nlohmann::json::array()).ok());
}

TEST(Checkpoint, TwoStagesWritingTheSameTensorIsAnError) {
  backend::CpuBackend be;
  TempDir tmp;
  model::ParameterSet s = MakeSet(be, Model4(), Layout(0, 1, true, false), 7);
  auto r = SaveCheckpoint(tmp.path(), Meta(1), {{&be, &s}, {&be, &s}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("written by two stages"), std::string::npos);
  EXPECT_FALSE(FindLatestCheckpoint(tmp.path()).ok());
}

}  // namespace
}  // namespace motley::train
