// Run files: sections, model forms, path resolution, cross-checks and the embedded default.
#include "spec/run_file.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/file_util.h"

namespace motley::spec {
namespace {

constexpr const char* kCluster = R"(
  device_types:
    - {name: cpu, vendor: cpu, peak_flops: 1 GFLOPS, memory: 1 GiB, memory_bandwidth: 1 GB/s}
  nodes:
    - {name: n, device_type: cpu, device_count: 1}
)";

std::string RunYaml(std::string_view model, std::string_view train) {
  return fmt::format("cluster:{}model: {}\ntrain: {}\n", kCluster, model, train);
}

TEST(RunFileTest, InlineClusterPresetModelAndTrainDefaults) {
  Result<RunFile> r = ParseRunFile(RunYaml("tiny", "{global_batch: 4, seq_len: 32, steps: 3}"),
                                   "r.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model.name, "tiny");
  EXPECT_EQ(r->cluster.num_devices(), 1);
  EXPECT_EQ(r->cluster_path, "");
  EXPECT_EQ(r->train.global_batch, 4);
  EXPECT_EQ(r->train.steps, 3);
  EXPECT_EQ(r->train.seed, 1234u);               // default kept
  EXPECT_FLOAT_EQ(r->train.optimizer.beta2, 0.95F);
  EXPECT_EQ(r->train.data.format, "text");
}

TEST(RunFileTest, PresetWithOverridesAndFullMapping) {
  Result<RunFile> r = ParseRunFile(
      RunYaml("{preset: small, num_blocks: 6, name: small-6}", "{global_batch: 2, seq_len: 8, steps: 1}"),
      "r.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model.num_blocks, 6);
  EXPECT_EQ(r->model.hidden, 128);
  EXPECT_EQ(r->model.name, "small-6");

  r = ParseRunFile(RunYaml("{num_blocks: 3, hidden: 96, num_heads: 6, ffn_hidden: 256, "
                       "vocab_size: 300, max_seq_len: 16, rope_theta: 500000}",
                       "{global_batch: 2, seq_len: 16, steps: 1}"),
                   "r.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model.num_kv_heads, 6);  // defaults to num_heads
  EXPECT_EQ(r->model.name, "custom");
  EXPECT_FLOAT_EQ(r->model.rope_theta, 500000.0F);
}

TEST(RunFileTest, TrainSectionFieldsAndRelativeDataPaths) {
  Result<RunFile> r = ParseRunFile(
      RunYaml("tiny", R"(
    global_batch: 8
    seq_len: 64
    steps: 10
    seed: 7
    optimizer: {lr: 0.01, min_lr: 0.001, warmup_steps: 3, beta1: 0.8, grad_clip: 0}
    data: {format: u16, train_path: d/train.bin, val_path: /abs/val.bin, val_fraction: 0}
    val_every: 0
    metrics_path: m.jsonl
    threads: 2
    checkpoint: {dir: ck, every_steps: 5, keep_last: 1})"),
      "r.yaml", "/base");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const TrainSpec& t = r->train;
  EXPECT_EQ(t.seed, 7u);
  EXPECT_FLOAT_EQ(t.optimizer.lr, 0.01F);
  EXPECT_EQ(t.optimizer.warmup_steps, 3);
  EXPECT_FLOAT_EQ(t.optimizer.grad_clip, 0.0F);
  EXPECT_EQ(t.data.format, "u16");
  EXPECT_EQ(t.data.train_path, "/base/d/train.bin");
  EXPECT_EQ(t.data.val_path, "/abs/val.bin");
  EXPECT_EQ(t.metrics_path, "m.jsonl");
  EXPECT_EQ(t.threads, 2);
  EXPECT_EQ(t.checkpoint.dir, "ck");
  EXPECT_EQ(t.checkpoint.keep_last, 1);
}

TEST(RunFileTest, KernelSettingsAreOptionalAndChecked) {
  Result<RunFile> unset =
      ParseRunFile(RunYaml("tiny", "{global_batch: 4, seq_len: 32, steps: 3}"), "r.yaml", "");
  ASSERT_TRUE(unset.ok()) << unset.status().message();
  EXPECT_FALSE(unset->train.precision.has_value());
  EXPECT_FALSE(unset->train.attention.has_value());
  EXPECT_FALSE(unset->train.sequence_parallel.has_value());
  EXPECT_TRUE(CheckRuntimeRunsKernels(unset->train, "r.yaml: train").ok());

  Result<RunFile> set =
      ParseRunFile(RunYaml("tiny",
                           "{global_batch: 4, seq_len: 32, steps: 3, precision: fp16, "
                           "attention: fused, sequence_parallel: true}"),
                   "r.yaml", "");
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ(set->train.precision, Precision::kFp16);
  EXPECT_EQ(set->train.attention, Attention::kFused);
  EXPECT_EQ(set->train.sequence_parallel, true);
  // motley's runtime computes in fp32 with unfused attention and no SP: `train` refuses these.
  const Status refused = CheckRuntimeRunsKernels(set->train, "r.yaml: train");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("r.yaml: train.precision: 'fp16'"), std::string::npos)
      << refused.message();
  TrainSpec runnable = set->train;
  runnable.precision = Precision::kFp32;
  EXPECT_NE(CheckRuntimeRunsKernels(runnable, "w").message().find("w.attention"),
            std::string::npos);
  runnable.attention = Attention::kUnfused;
  EXPECT_NE(CheckRuntimeRunsKernels(runnable, "w").message().find("w.sequence_parallel"),
            std::string::npos);
  runnable.sequence_parallel = false;
  EXPECT_TRUE(CheckRuntimeRunsKernels(runnable, "w").ok());
  runnable.attention_dropout = 0.1;
  EXPECT_NE(CheckRuntimeRunsKernels(runnable, "w").message().find("w.attention_dropout: 0.1"),
            std::string::npos);
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    EXPECT_EQ(ParsePrecision(PrecisionName(p)), p);
  }

  Result<RunFile> bad = ParseRunFile(
      RunYaml("tiny", "{global_batch: 4, seq_len: 32, steps: 3, precision: fp8}"), "r.yaml", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "r.yaml: train.precision: unknown precision 'fp8' (known: fp32, bf16, fp16)");
  Result<RunFile> bad_attention = ParseRunFile(
      RunYaml("tiny", "{global_batch: 4, seq_len: 32, steps: 3, attention: flash}"), "r.yaml", "");
  ASSERT_FALSE(bad_attention.ok());
  EXPECT_NE(bad_attention.status().message().find("train.attention: unknown attention kernel "
                                                  "'flash' (known: unfused, fused)"),
            std::string::npos);
  Result<RunFile> dropout = ParseRunFile(
      RunYaml("tiny", "{global_batch: 4, seq_len: 32, steps: 3, attention_dropout: 0.1}"),
      "r.yaml", "");
  ASSERT_TRUE(dropout.ok()) << dropout.status().message();
  EXPECT_DOUBLE_EQ(dropout->train.attention_dropout, 0.1);
  Result<RunFile> bad_dropout = ParseRunFile(
      RunYaml("tiny", "{global_batch: 4, seq_len: 32, steps: 3, attention_dropout: 1.0}"),
      "r.yaml", "");
  ASSERT_FALSE(bad_dropout.ok());
  EXPECT_NE(bad_dropout.status().message().find(
                "train.attention_dropout: must be in [0, 1), got 1"),
            std::string::npos)
      << bad_dropout.status().message();
  Result<RunFile> bad_sp = ParseRunFile(
      RunYaml("tiny", "{global_batch: 4, seq_len: 32, steps: 3, sequence_parallel: maybe}"),
      "r.yaml", "");
  ASSERT_FALSE(bad_sp.ok());
  EXPECT_NE(bad_sp.status().message().find("train.sequence_parallel"), std::string::npos);
}

TEST(RunFileTest, SeqLenBeyondModelIsRejected) {
  Result<RunFile> r =
      ParseRunFile(RunYaml("tiny", "{global_batch: 4, seq_len: 65, steps: 3}"), "r.yaml", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "r.yaml: train.seq_len: 65 exceeds model.max_seq_len 64");
}

TEST(RunFileTest, ClusterAndModelFilesRelativeToTheRunFile) {
  const auto dir = std::filesystem::temp_directory_path() / "motley_run_file_test";
  std::filesystem::create_directories(dir / "sub");
  ASSERT_TRUE(WriteFileAtomic((dir / "sub" / "c.yaml").string(), kCluster).ok());
  ASSERT_TRUE(WriteFileAtomic((dir / "m.yml").string(), "{preset: tiny, num_blocks: 4}").ok());
  const std::string run_path = (dir / "run.yaml").string();
  ASSERT_TRUE(WriteFileAtomic(run_path, "cluster: sub/c.yaml\nmodel: m.yml\n"
                                        "train: {global_batch: 1, seq_len: 8, steps: 1}\n")
                  .ok());
  Result<RunFile> r = LoadRunFile(run_path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->path, run_path);
  EXPECT_EQ(r->cluster_path, (dir / "sub" / "c.yaml").string());
  EXPECT_EQ(r->model.num_blocks, 4);
  std::filesystem::remove_all(dir);
}

TEST(RunFileTest, DefaultRunIsSmallOnOneEmulatedCpu) {
  const RunFile run = DefaultRunFile();
  EXPECT_EQ(run.model.name, "small");
  EXPECT_EQ(run.cluster.num_devices(), 1);
  EXPECT_EQ(run.cluster.device_type_of(0).vendor, "cpu");
  EXPECT_TRUE(run.cluster.device_type_of(0).is_emulated());
  EXPECT_TRUE(run.train.data.train_path.empty());  // the shipped corpus
  EXPECT_LE(run.train.seq_len, run.model.max_seq_len);
  EXPECT_NE(DefaultRunFileYaml().find("model: small"), std::string_view::npos);
}

}  // namespace
}  // namespace motley::spec
