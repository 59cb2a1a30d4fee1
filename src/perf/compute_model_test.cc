// Tests of the compute models: the analytical model's kernels (counts, launch costs, FLOPs, the
// settings that change them), its monotonicity across device speeds and sizes, and the profile:
// JSON round trip, lookup, scaling to other micro-batch sizes, errors.
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

TEST(RooflineComputeModelTest, FasterDeviceAndSmallerShardAreFaster) {
  const spec::ClusterSpec cluster = TwoTypes();
  const spec::ModelSpec model = Llama7b();
  const RooflineComputeModel rm(cluster, model, DefaultSettings(cluster));
  const int h100 = 0;
  const int a100 = 1;
  const PassTimes h = rm.Block(h100, 1, 1, 4096);
  const PassTimes a = rm.Block(a100, 1, 1, 4096);
  EXPECT_LT(h.forward_s, a.forward_s);
  // The backward runs two GEMMs per forward GEMM: about twice the forward.
  EXPECT_GT(a.backward_s, 1.8 * a.forward_s);
  EXPECT_LT(a.backward_s, 2.3 * a.forward_s);
  // A GEMM-bound block runs below the preset's GEMM efficiency, but not far below it.
  const Flops flops = spec::BlockForwardFlops(model, 1, 4096);
  const double eff = cluster.device_types[1].GemmEfficiency(spec::Precision::kBf16);
  EXPECT_GT(a.forward_s, flops / (312e12 * eff));
  EXPECT_LT(a.forward_s, flops / (312e12 * 0.5));
  EXPECT_LT(rm.Block(a100, 4, 1, 4096).forward_s, a.forward_s / 2);
  EXPECT_GT(rm.Block(a100, 1, 4, 4096).forward_s, 3.5 * a.forward_s);
  EXPECT_GT(rm.Head(a100, 1, 1, 4096).forward_s, 0);
  EXPECT_LT(rm.AttentionRecompute(a100, 1, 1, 4096), a.forward_s);
}

// A device so fast, against a launch cost of 1 s, that only the launch cost is left: a pass costs
// its kernel count in seconds (the largest rates a cluster may give, spec/limits.h; the compute
// and memory time of a kernel is below 1e-6 s, far under one launch).
spec::ClusterSpec LaunchOnly() {
  spec::ClusterSpec c;
  spec::DeviceType t;
  t.name = "fast";
  t.vendor = "cuda";
  t.peak_fp32_flops = t.peak_bf16_flops = 1e18;
  t.memory_bytes = 1e12;
  t.memory_bandwidth = 1e15;
  t.kernel_launch_s = 1.0;
  c.device_types = {t};
  c.nodes = {{"n", "n", "fast", 1, "", {}, {}}};
  MOTLEY_CHECK(c.Finalize().ok(), "cluster");
  return c;
}

TEST(RooflineComputeModelTest, EveryKernelPaysTheLaunchCost) {
  const spec::ClusterSpec cluster = LaunchOnly();
  const spec::ModelSpec model = Llama7b();
  PerfSettings settings = DefaultSettings(cluster);
  settings.flash_attention = false;
  const RooflineComputeModel unfused(cluster, model, settings);
  // Forward: norm, qkv, rope, scores, softmax, context, output, add, norm, gate/up, swiglu, down,
  // add = 13 kernels; backward: 2 GEMMs for each of 4, the attention's 4 GEMMs and softmax, the
  // backward of swiglu, rope and two norms, two adds = 19.
  EXPECT_NEAR(unfused.Block(0, 1, 1, 128).forward_s, 13.0, 1e-5);
  EXPECT_NEAR(unfused.Block(0, 1, 1, 128).backward_s, 19.0, 1e-5);
  EXPECT_NEAR(unfused.AttentionRecompute(0, 1, 1, 128), 3.0, 1e-5);
  settings.flash_attention = true;
  const RooflineComputeModel fused(cluster, model, settings);
  EXPECT_NEAR(fused.Block(0, 1, 1, 128).forward_s, 11.0, 1e-5);
  EXPECT_NEAR(fused.Block(0, 1, 1, 128).backward_s, 15.0, 1e-5);
  EXPECT_NEAR(fused.AttentionRecompute(0, 1, 1, 128), 1.0, 1e-5);
  EXPECT_NEAR(fused.Embedding(0, 1, 1, 128).forward_s, 1.0, 1e-5);
  EXPECT_NEAR(fused.Head(0, 1, 1, 128).forward_s, 3.0, 1e-5);
  EXPECT_NEAR(fused.Head(0, 1, 1, 128).backward_s, 4.0, 1e-5);
}

TEST(RooflineComputeModelTest, BlockIsTheSumOfItsKernels) {
  const spec::ClusterSpec cluster = TwoTypes();
  const spec::ModelSpec model = Llama7b();
  PerfSettings settings = DefaultSettings(cluster);
  settings.flash_attention = false;  // the attention products as GEMMs
  const RooflineComputeModel rm(cluster, model, settings);
  const PassKernels k = BlockKernels(model, 2, 2048, 4, settings);
  const KernelRates& r = rm.Rates(1);
  Seconds forward = 0;
  for (const Kernel& kernel : k.forward) forward += KernelTime(r, kernel);
  EXPECT_DOUBLE_EQ(rm.Block(1, 4, 2, 2048).forward_s, forward);
  // The GEMMs carry exactly the block's forward FLOPs on one of 4 ranks.
  Flops gemm_flops = 0;
  for (const Kernel& kernel : k.forward) {
    if (kernel.kind == Kernel::Kind::kGemm) gemm_flops += kernel.gemm.flops();
  }
  EXPECT_NEAR(gemm_flops, spec::BlockForwardFlops(model, 2, 2048) / 4, 1e-6 * gemm_flops);
  Flops backward_flops = 0;
  for (const Kernel& kernel : k.backward) {
    if (kernel.kind == Kernel::Kind::kGemm) backward_flops += kernel.gemm.flops();
  }
  EXPECT_NEAR(backward_flops, 2 * gemm_flops, 1e-6 * gemm_flops);
}

TEST(RooflineComputeModelTest, SettingsChangeTheKernels) {
  const spec::ClusterSpec cluster = TwoTypes();
  const spec::ModelSpec model = Llama7b();
  PerfSettings settings = DefaultSettings(cluster);
  settings.precision = spec::Precision::kFp16;
  settings.flash_attention = false;
  settings.sequence_parallel = false;
  const RooflineComputeModel base(cluster, model, settings);
  // Fused attention skips the s x s scores: faster at long sequences.
  PerfSettings fused = settings;
  fused.flash_attention = true;
  EXPECT_LT(RooflineComputeModel(cluster, model, fused).Block(1, 1, 1, 4096).forward_s,
            base.Block(1, 1, 1, 4096).forward_s);
  // Sequence parallelism splits the norms and adds across TP ranks.
  PerfSettings sp = settings;
  sp.sequence_parallel = true;
  EXPECT_LT(RooflineComputeModel(cluster, model, sp).Block(1, 8, 1, 4096).forward_s,
            base.Block(1, 8, 1, 4096).forward_s);
  EXPECT_DOUBLE_EQ(RooflineComputeModel(cluster, model, sp).Block(1, 1, 1, 4096).forward_s,
                   base.Block(1, 1, 1, 4096).forward_s);
  // fp32 runs at the A100's 19.5 TFLOP/s fp32 peak, not the 312 of fp16.
  PerfSettings fp32 = settings;
  fp32.precision = spec::Precision::kFp32;
  EXPECT_GT(RooflineComputeModel(cluster, model, fp32).Block(1, 1, 1, 4096).forward_s,
            8 * base.Block(1, 1, 1, 4096).forward_s);
  // Attention dropout (unfused): one kernel after the softmax and one in the backward, each
  // moving b x heads x s x s x (2 element bytes + a one-byte mask) at the achievable bandwidth,
  // plus its launch; fused attention draws the mask inside its kernel.
  PerfSettings dropout = settings;
  dropout.attention_dropout = 0.1;
  const KernelRates& a100 = base.Rates(1);
  const double elements = 1.0 * (32.0 / 1) * 4096.0 * 4096.0;  // b = 1, llama2-7b's 32 heads, tp 1
  const Seconds mask = a100.launch_s + elements * (2.0 * 2.0 + 1.0) / a100.achievable_bandwidth;
  const RooflineComputeModel with_dropout(cluster, model, dropout);
  EXPECT_NEAR(with_dropout.Block(1, 1, 1, 4096).forward_s - base.Block(1, 1, 1, 4096).forward_s,
              mask, 1e-12);
  EXPECT_NEAR(with_dropout.Block(1, 1, 1, 4096).backward_s - base.Block(1, 1, 1, 4096).backward_s,
              mask, 1e-12);
  EXPECT_NEAR(with_dropout.AttentionRecompute(1, 1, 1, 4096) - base.AttentionRecompute(1, 1, 1, 4096),
              mask, 1e-12);
  PerfSettings fused_dropout = fused;
  fused_dropout.attention_dropout = 0.1;
  EXPECT_DOUBLE_EQ(RooflineComputeModel(cluster, model, fused_dropout).Block(1, 1, 1, 4096).forward_s,
                   RooflineComputeModel(cluster, model, fused).Block(1, 1, 1, 4096).forward_s);
  // bf16 and fp16 have the same peak on an A100.
  PerfSettings bf16 = settings;
  bf16.precision = spec::Precision::kBf16;
  EXPECT_DOUBLE_EQ(RooflineComputeModel(cluster, model, bf16).Block(1, 1, 1, 4096).forward_s,
                   base.Block(1, 1, 1, 4096).forward_s);
}

TEST(PerfSettingsTest, TheRunFileOverridesTheClusterDefaults) {
  const spec::ClusterSpec cluster = TwoTypes();
  spec::TrainSpec train;
  const PerfSettings defaults = DefaultSettings(cluster, train);
  EXPECT_EQ(defaults.precision, spec::Precision::kBf16);
  EXPECT_TRUE(defaults.flash_attention);
  EXPECT_TRUE(defaults.sequence_parallel);
  train.precision = spec::Precision::kFp16;
  train.attention = spec::Attention::kUnfused;
  train.sequence_parallel = false;
  const PerfSettings set = DefaultSettings(cluster, train);
  EXPECT_EQ(set.precision, spec::Precision::kFp16);
  EXPECT_FALSE(set.flash_attention);
  EXPECT_FALSE(set.sequence_parallel);
  EXPECT_DOUBLE_EQ(ActivationElementBytes(set), 2.0);
  EXPECT_EQ(set.ring_collectives, defaults.ring_collectives);  // the rest follows the cluster
  train.precision = spec::Precision::kFp32;
  EXPECT_DOUBLE_EQ(ActivationElementBytes(DefaultSettings(cluster, train)), 4.0);
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
