// Tests of the compute models: the efficiency curve, roofline monotonicity across device speeds and
// sizes, and the profile: JSON round trip, lookup, scaling to other micro-batch sizes, errors.
#include "perf/compute_model.h"

#include <gtest/gtest.h>

#include "core/file_util.h"
#include "motley_source_dir.h"
#include "perf/cluster_presets.h"

namespace motley::perf {
namespace {

spec::ClusterSpec TwoTypes() {
  auto c = MakeCluster("two", {{"h", "h100", 1, 8, "nvlink", ""}, {"a", "a100-80g", 1, 8, "nvlink", ""}},
                       "ib-hdr");
  MOTLEY_CHECK(c.ok(), c.status().message());
  return *c;
}

spec::ModelSpec Llama7b() {
  auto m = spec::ModelPreset("llama2-7b");
  MOTLEY_CHECK(m.ok(), "preset");
  return *m;
}

TEST(EfficiencyCurveTest, CalculonSteps) {
  EfficiencyCurve curve;
  EXPECT_DOUBLE_EQ(curve.At(200e9), 0.99);
  EXPECT_DOUBLE_EQ(curve.At(20e9), 0.90);
  EXPECT_DOUBLE_EQ(curve.At(2e9), 0.60);
  EXPECT_DOUBLE_EQ(curve.At(1e6), 0.60);
  EXPECT_DOUBLE_EQ(curve.Max(), 0.99);
}

TEST(RooflineComputeModelTest, FasterDeviceAndSmallerShardAreFaster) {
  const spec::ClusterSpec cluster = TwoTypes();
  const spec::ModelSpec model = Llama7b();
  const RooflineComputeModel rm(cluster, model, DefaultSettings(cluster));
  const int h100 = 0;
  const int a100 = 1;
  const PassTimes h = rm.Block(h100, 1, 1, 4096);
  const PassTimes a = rm.Block(a100, 1, 1, 4096);
  EXPECT_LT(h.forward_s, a.forward_s);
  EXPECT_DOUBLE_EQ(a.backward_s, 2 * a.forward_s);
  // A large block runs near the curve's efficiency: time >= FLOPs / peak.
  const Flops flops = BlockForwardFlops(model, 1, 4096);
  EXPECT_GT(a.forward_s, flops / 312e12);
  EXPECT_LT(a.forward_s, flops / (312e12 * 0.5));
  EXPECT_LT(rm.Block(a100, 4, 1, 4096).forward_s, a.forward_s / 2);
  EXPECT_GT(rm.Block(a100, 1, 4, 4096).forward_s, 3.5 * a.forward_s);
  EXPECT_GT(rm.Head(a100, 1, 1, 4096).forward_s, 0);
  EXPECT_LT(rm.AttentionRecompute(a100, 1, 1, 4096), a.forward_s);
}

Profile SmallProfile() {
  Profile p;
  const spec::ModelSpec m = Llama7b();
  p.hidden = m.hidden;
  p.num_heads = m.num_heads;
  p.num_kv_heads = m.num_kv_heads;
  p.ffn_hidden = m.ffn_hidden;
  p.vocab_size = m.vocab_size;
  p.precision = "bf16";
  DeviceProfile dp;
  dp.device_type = "a100-80g";
  ProfileEntry e;
  e.tp = 1;
  e.micro_batch_size = 1;
  e.seq_len = 4096;
  e.block_forward_s = 0.010;
  e.block_backward_s = 0.021;
  e.head_forward_s = 0.004;
  e.head_backward_s = 0.008;
  e.embedding_forward_s = 0.0001;
  e.embedding_backward_s = 0.0002;
  dp.entries.push_back(e);
  p.devices.push_back(dp);
  return p;
}

TEST(ProfileTest, RoundTripAndLookup) {
  const Profile p = SmallProfile();
  auto parsed = ParseProfile(ProfileToJson(p), "p.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  ASSERT_EQ(parsed->devices.size(), 1u);
  EXPECT_DOUBLE_EQ(parsed->devices[0].entries[0].block_backward_s, 0.021);
  EXPECT_TRUE(CheckProfileMatchesModel(*parsed, Llama7b()).ok());

  const spec::ClusterSpec cluster = TwoTypes();
  const RooflineComputeModel rm(cluster, Llama7b(), DefaultSettings(cluster));
  const ProfiledComputeModel pm(*parsed, cluster, rm);
  EXPECT_FALSE(pm.Covers(0));
  EXPECT_TRUE(pm.Covers(1));
  EXPECT_DOUBLE_EQ(pm.Block(1, 1, 1, 4096).forward_s, 0.010);
  EXPECT_DOUBLE_EQ(pm.Head(1, 1, 1, 4096).backward_s, 0.008);
  // Another micro-batch size: the measured time scaled by the roofline's ratio.
  const double ratio = rm.Block(1, 1, 2, 4096).forward_s / rm.Block(1, 1, 1, 4096).forward_s;
  EXPECT_NEAR(pm.Block(1, 1, 2, 4096).forward_s, 0.010 * ratio, 1e-12);
  // Uncovered type and TP degree: the fallback.
  EXPECT_DOUBLE_EQ(pm.Block(0, 1, 1, 4096).forward_s, rm.Block(0, 1, 1, 4096).forward_s);
  EXPECT_DOUBLE_EQ(pm.Block(1, 2, 1, 4096).forward_s, rm.Block(1, 2, 1, 4096).forward_s);
}

TEST(ProfileTest, ErrorsNameTheField) {
  auto bad = ParseProfile(R"({"format": "motley-profile", "version": 1,
      "model": {"hidden": 64, "num_heads": 4, "num_kv_heads": 4, "ffn_hidden": 128,
                "vocab_size": 256},
      "devices": [{"device_type": "cpu", "entries": [{"tp": 1, "micro_batch_size": 1,
                   "seq_len": 64, "block_forward_s": -1, "block_backward_s": 1}]}]})",
                          "prof.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("prof.json: devices[0].entries[0].block_forward_s"),
            std::string::npos)
      << bad.status().message();
  auto not_json = ParseProfile("{", "x.json");
  ASSERT_FALSE(not_json.ok());
  EXPECT_NE(not_json.status().message().find("x.json: JSON syntax error"), std::string::npos);
  Profile p = SmallProfile();
  p.hidden = 128;
  const Status mismatch = CheckProfileMatchesModel(p, Llama7b());
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.message().find("model.hidden"), std::string::npos) << mismatch.message();
}

TEST(ProfileTest, DocumentedExampleParses) {
  auto doc = ReadFile(std::string(MOTLEY_SOURCE_DIR) + "/docs/formats/profile.md");
  ASSERT_TRUE(doc.ok()) << doc.status().message();
  const size_t begin = doc->find("```json\n");
  ASSERT_NE(begin, std::string::npos);
  const size_t end = doc->find("```", begin + 8);
  auto p = ParseProfile(doc->substr(begin + 8, end - begin - 8), "profile.md example");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->devices.size(), 1u);
  EXPECT_EQ(p->devices[0].entries.size(), 2u);
  auto small = spec::ModelPreset("small");
  ASSERT_TRUE(small.ok());
  EXPECT_TRUE(CheckProfileMatchesModel(*p, *small).ok());
}

}  // namespace
}  // namespace motley::perf
