// Hardening of the spec readers (issue 17): sizes and counts range-checked with overflow-safe
// arithmetic, physical quantities bounded (spec/limits.h), YAML documents strict (one document,
// no key twice, bounded nesting, bounded alias expansion), plan arithmetic that cannot wrap, and
// a StatusCode on every error (kInvalidArgument for input, kNotFound for a missing file or
// preset). Each case states the message it must contain.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/file_util.h"
#include "motley_source_dir.h"
#include "spec/limits.h"
#include "spec/plan.h"
#include "spec/run_file.h"
#include "spec/yaml_reader.h"

namespace motley::spec {
namespace {

struct Case {
  const char* label;
  std::string text;
  std::string expect;  // a substring of the message
  StatusCode code = StatusCode::kInvalidArgument;
};

constexpr const char* kCluster = R"(cluster:
  device_types:
    - {name: cpu, vendor: cpu, peak_flops: 1 GFLOPS, memory: 1 GiB, memory_bandwidth: 1 GB/s}
  link_classes:
    - {name: shm, latency: 5 us, bandwidth: 1 GB/s}
  nodes:
    - {name: n, device_type: cpu, device_count: 2, intra_link: shm}
)";

std::string Run(const std::string& model, const std::string& train) {
  return std::string(kCluster) + "model: " + model + "\ntrain: " + train + "\n";
}
std::string Train(const std::string& extra) {
  return "{global_batch: 4, seq_len: 32, steps: 2" + extra + "}";
}
std::string WithCluster(const std::string& from, const std::string& to) {
  std::string text = Run("tiny", Train(""));
  text.replace(text.find(from), from.size(), to);
  return text;
}

std::vector<Case> RunFileCases() {
  return {
      // Sizes and counts, and their products (overflow-safe).
      {"global batch 2^62",
       Run("tiny", "{global_batch: 4611686018427387904, seq_len: 32, steps: 2}"),
       "bad.yaml: train.global_batch: must be in [1, 1099511627776], got 4611686018427387904"},
      {"B x T overflow",
       Run("{preset: tiny, max_seq_len: 16777216}",
           "{global_batch: 1099511627776, seq_len: 16777216, steps: 1}"),
       "bad.yaml: train.global_batch: 1099511627776 sequences of train.seq_len 16777216 tokens are "
       "more than 1099511627776 tokens per step"},
      {"run tokens overflow",
       Run("tiny", "{global_batch: 1048576, seq_len: 32, steps: 1099511627776}"),
       "bad.yaml: train.steps: 1099511627776 steps of 33554432 tokens are more than"},
      {"integer beyond int64",
       Run("tiny", "{global_batch: 99999999999999999999, seq_len: 32, steps: 2}"),
       "bad.yaml: train.global_batch: integer out of range: '99999999999999999999'"},
      {"negative steps", Run("tiny", Train("").replace(Train("").find("steps: 2"), 8, "steps: -3")),
       "bad.yaml: train.steps: must be positive, got -3"},
      {"threads 100000", Run("tiny", Train(", threads: 100000")),
       "bad.yaml: train.threads: must be in [0, 1024], got 100000"},
      {"val batches out of range", Run("tiny", Train(", val_every: 1, val_batches: 1099511627777")),
       "bad.yaml: train.val_batches: must be in [0, 1099511627776]"},
      {"keep_last 0", Run("tiny", Train(", checkpoint: {dir: c, keep_last: 0}")),
       "bad.yaml: train.checkpoint.keep_last: must be positive, got 0"},
      {"float beyond float32", Run("tiny", Train(", optimizer: {lr: 1e300}")),
       "bad.yaml: train.optimizer.lr: 1e+300 is out of the range of a 32-bit float"},
      {"vocab 2^31 + 1", Run("{preset: tiny, vocab_size: 2147483649}", Train("")),
       "bad.yaml: model.vocab_size: must be at most 2147483648, got 2147483649"},
      {"hidden 2^40", Run("{preset: tiny, hidden: 1099511627776, num_heads: 4}", Train("")),
       "bad.yaml: model.hidden: must be at most 1048576"},
      {"absurd model",
       Run("{preset: tiny, num_blocks: 65536, hidden: 1048576, num_heads: 4, "
           "num_kv_heads: 4, ffn_hidden: 4194304}",
           Train("")),
       "bad.yaml: model.num_blocks: the model has"},
      {"max_seq_len 2^30", Run("{preset: tiny, max_seq_len: 1073741824}", Train("")),
       "bad.yaml: model.max_seq_len: must be at most 16777216"},
      {"unknown preset", Run("llama-9000", Train("")), "bad.yaml: model: unknown model preset",
       StatusCode::kNotFound},
      // Physical quantities.
      {"memory 1e30", WithCluster("memory: 1 GiB", "memory: 1e30"),
       "bad.yaml: cluster.device_types[0].memory: must be in [1 MiB, 1 PiB], got 1e+30 bytes"},
      {"memory 1 byte", WithCluster("memory: 1 GiB", "memory: 1"),
       "bad.yaml: cluster.device_types[0].memory: must be in [1 MiB, 1 PiB]"},
      {"peak 1e30 FLOPS", WithCluster("peak_flops: 1 GFLOPS", "peak_flops: 1e30"),
       "bad.yaml: cluster.device_types[0].peak_flops.fp32: must be in [1 MFLOP/s, 1 EFLOP/s]"},
      {"memory bandwidth 1e-300",
       WithCluster("memory_bandwidth: 1 GB/s", "memory_bandwidth: 1e-300"),
       "bad.yaml: cluster.device_types[0].memory_bandwidth: must be in [1 kB/s, 1 PB/s]"},
      {"latency 1e100", WithCluster("latency: 5 us", "latency: 1e100 s"),
       "bad.yaml: cluster.link_classes[0].latency: must be in [0 s, 60 s], got 1e+100 s"},
      {"bandwidth 1e20 GB/s", WithCluster("us, bandwidth: 1 GB/s", "us, bandwidth: 1e20 GB/s"),
       "bad.yaml: cluster.link_classes[0].bandwidth: must be in [1 kB/s, 1 PB/s]"},
      {"quantity overflows to inf", WithCluster("memory: 1 GiB", "memory: 1e308 PiB"),
       "bad.yaml: cluster.device_types[0].memory: must be positive, got inf"},
      {"2^20 devices in one node", WithCluster("device_count: 2", "device_count: 1048577"),
       "bad.yaml: cluster.nodes[0].device_count: must be in [1, 1048576], got 1048577"},
      {"nodes repeated past the limit",
       WithCluster("device_count: 2, intra_link: shm}",
                   "device_count: 2, intra_link: shm, repeat: 131072}\n    - {name: m, "
                   "device_type: cpu, device_count: 1, repeat: 2}"),
       "bad.yaml: cluster.nodes[1].repeat: the cluster would have more than 131072 nodes"},
      // Strict YAML documents.
      {"second document", Run("tiny", Train("")) + "---\ncluster: other\n",
       "bad.yaml:10: a second YAML document ('---') or text after the document"},
      {"empty second document", Run("tiny", Train("")) + "---\n", "a second YAML document"},
      {"duplicate top key", Run("tiny", Train("")) + "model: small\n",
       "bad.yaml: model: key given twice"},
      {"duplicate nested key", WithCluster("memory: 1 GiB", "memory: 1 GiB, memory: 2 GiB"),
       "bad.yaml: cluster.device_types[0].memory: key given twice"},
      {"duplicate key in an unread mapping",
       Run("tiny", Train(", data: {format: text, format: u16}")),
       "bad.yaml: train.data.format: key given twice"},
      {"deep flow nesting", "cluster: " + std::string(100, '[') + std::string(100, ']') + "\n",
       "bad.yaml:1: mappings and lists nested deeper than 64 levels"},
      {"deep block nesting",
       [] {
         std::string s = "cluster:\n";
         for (int i = 1; i < 80; ++i) s += std::string(static_cast<size_t>(i), ' ') + "- \n";
         return s;
       }(),
       "nested deeper than 64 levels"},
      {"billion laughs",
       [] {
         std::string s = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
         for (int i = 1; i < 9; ++i) {
           s += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
           for (int k = 0; k < 10; ++k) s += (k ? ", *a" : "*a") + std::to_string(i - 1);
           s += "]\n";
         }
         return s;
       }(),
       "bad.yaml: more than 4194304 YAML nodes (aliases counted at each use)"},
  };
}

TEST(HardeningTest, RunFileCasesAreInputErrorsNamingTheField) {
  const std::vector<Case> cases = RunFileCases();
  for (const Case& c : cases) {
    Result<RunFile> r = ParseRunFile(c.text, "bad.yaml", "/nonexistent-dir");
    ASSERT_FALSE(r.ok()) << c.label;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << c.label << "\n  got:  " << r.status().message() << "\n  want: " << c.expect;
    EXPECT_EQ(r.status().code(), c.code) << c.label << ": " << r.status().message();
  }
  std::printf("%zu malformed run files\n", cases.size());
}

TEST(HardeningTest, LimitsAcceptTheLargestRealValues) {
  // Llama-3-405B-sized shapes and a 288 GB device pass; the bounds are far beyond them.
  const std::string big = std::string(
      "cluster:\n  device_types:\n    - {name: g, vendor: cuda, peak_flops: 2.25 PFLOPS, "
      "memory: 288 GB, memory_bandwidth: 8 TB/s}\n  link_classes:\n    - {name: nv, latency: 1 "
      "us, bandwidth: 1.8 TB/s}\n  nodes:\n    - {name: n, device_type: g, device_count: 8, "
      "intra_link: nv, repeat: 2048}\n  islands: [{name: all, nodes: [n], link: nv}]\n"
      "model: {num_blocks: 126, hidden: 16384, num_heads: 128, num_kv_heads: 8, "
      "ffn_hidden: 53248, vocab_size: 128256, max_seq_len: 131072}\n"
      "train: {global_batch: 2048, seq_len: 8192, steps: 1200000, data: {format: u32}}\n");
  Result<RunFile> r = ParseRunFile(big, "big.yaml", "");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->cluster.num_devices(), 16384);
  EXPECT_GT(r->model.TotalParams(), int64_t{400} * 1000 * 1000 * 1000);
}

TEST(HardeningTest, FuzzRegressionsEndWithAnError) {
  // Inputs the fuzz targets found (fuzz/regressions/run_file): each must end, with an error.
  const std::filesystem::path dir = std::string(MOTLEY_SOURCE_DIR) + "/fuzz/regressions/run_file";
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    Result<std::string> text = ReadFile(entry.path().string());
    ASSERT_TRUE(text.ok()) << text.status().message();
    Result<RunFile> r = ParseRunFile(*text, entry.path().filename().string(), "/nonexistent-dir");
    EXPECT_FALSE(r.ok()) << entry.path();
    ++n;
  }
  EXPECT_GE(n, 1);
}

TEST(HardeningTest, NestingBoundIsAnUpperEstimate) {
  int line = 0;
  EXPECT_EQ(internal::YamlNestingBound("a: 1\nb: {c: [1, 2]}\n", 64, &line), 3);
  EXPECT_EQ(internal::YamlNestingBound("a:\n  - b: 1\n    c: [x]\n", 64, &line), 4);
  // Brackets inside quoted scalars do not count; a comment ends the line.
  EXPECT_EQ(internal::YamlNestingBound("a: '[[[[' # [[[[\nb: \"{{\\\"{{\"\n", 64, &line), 1);
  EXPECT_EQ(internal::YamlNestingBound(std::string(200, '['), 64, &line), 65);
  EXPECT_EQ(line, 1);
}

TEST(HardeningTest, MissingFilesAreNotFound) {
  Result<RunFile> r = LoadRunFile("/nonexistent/run.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  r = ParseRunFile(
      "cluster: nope.yaml\nmodel: tiny\ntrain: {global_batch: 4, seq_len: 32, steps: "
      "2}\n",
      "bad.yaml", "/nonexistent-dir");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().message();
  EXPECT_EQ(
      r.status().message().rfind("bad.yaml: cluster: /nonexistent-dir/nope.yaml: cannot open", 0),
      0U)
      << r.status().message();
  EXPECT_EQ(LoadPlan("/nonexistent/p.json").status().code(), StatusCode::kNotFound);
}

TEST(HardeningTest, SpecialFilesAreRefusedBeforeReading) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("motley_hardening_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Result<RunFile> r = LoadRunFile(dir.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is a directory, not a regular file"), std::string::npos);
  r = LoadRunFile("/dev/zero");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/dev/zero: is a character device"), std::string::npos);
  Result<Plan> p = LoadPlan("/dev/null");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  // Larger than 64 MiB: refused from its size (a sparse file, nothing is read).
  const std::string huge = (dir / "huge.yaml").string();
  ASSERT_TRUE(WriteFileAtomic(huge, "a: 1\n").ok());
  std::filesystem::resize_file(huge, (size_t{64} << 20) + 1);
  r = LoadRunFile(huge);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("67108865 bytes, larger than the 64 MiB limit"),
            std::string::npos)
      << r.status().message();
  std::filesystem::remove_all(dir);
}

// A two-device cluster and the tiny model with global batch 16, for plan cases.
RunFile PlanRun() {
  Result<RunFile> r =
      ParseRunFile(Run("tiny", "{global_batch: 16, seq_len: 32, steps: 2}"), "r.yaml", "");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

std::string Plan1(const std::string& pipeline, const std::string& stage_blocks) {
  return R"({"format": "motley-plan", "version": 1, "pipelines": [{)" + pipeline +
         R"(, "stages": [{"first_block": 0, )" + stage_blocks +
         R"(, "has_embedding": true, "has_head": true, "devices": [0]}]}]})";
}

TEST(HardeningTest, PlanArithmeticCannotWrap) {
  const RunFile run = PlanRun();
  const std::vector<Case> cases = {
      {"micro-batches x size wraps to the global batch",
       R"({"format": "motley-plan", "version": 1, "pipelines": [{"micro_batches": 4611686018427387906, "micro_batch_size": 4, "stages": [{"first_block": 0, "num_blocks": 2, "has_embedding": true, "has_head": true, "devices": [0]}]}, {"micro_batches": 4, "micro_batch_size": 4, "stages": [{"first_block": 0, "num_blocks": 2, "has_embedding": true, "has_head": true, "devices": [1]}]}]})",
       "p.json: pipelines[0]: micro_batches 4611686018427387906 * micro_batch_size 4 exceeds the "
       "16 "
       "samples of train.global_batch left for this pipeline"},
      {"second pipeline exceeds what is left",
       R"({"format": "motley-plan", "version": 1, "pipelines": [{"micro_batches": 3, "micro_batch_size": 4, "stages": [{"first_block": 0, "num_blocks": 2, "has_embedding": true, "has_head": true, "devices": [0]}]}, {"micro_batches": 4, "micro_batch_size": 4, "stages": [{"first_block": 0, "num_blocks": 2, "has_embedding": true, "has_head": true, "devices": [1]}]}]})",
       "p.json: pipelines[1]: micro_batches 4 * micro_batch_size 4 = 16 exceeds the 4 samples"},
      {"num_blocks near int64 max",
       Plan1(R"("micro_batches": 16, "micro_batch_size": 1)",
             R"("num_blocks": 9223372036854775807)"),
       "p.json: pipelines[0].stages[0].num_blocks: blocks [0, 9223372036854775807) exceed the "
       "model's 2 blocks"},
      {"duplicate key",
       Plan1(R"("micro_batches": 16, "micro_batch_size": 1, "micro_batches": 8)",
             R"("num_blocks": 2)"),
       "p.json: pipelines[0].micro_batches: key given twice"},
      {"deep nesting",
       R"({"format": "motley-plan", "version": 1, "comment": )" + std::string(1000, '[') +
           std::string(1000, ']') + "}",
       "p.json: arrays and objects nested deeper than 64 levels"},
  };
  for (const Case& c : cases) {
    Result<Plan> plan = ParsePlan(c.text, "p.json");
    Status s = plan.ok() ? ValidatePlan(*plan, run.cluster, run.model, run.train) : plan.status();
    ASSERT_FALSE(s.ok()) << c.label;
    EXPECT_NE(s.message().find(c.expect), std::string::npos)
        << c.label << "\n  got:  " << s.message() << "\n  want: " << c.expect;
    EXPECT_EQ(s.code(), c.code) << c.label;
  }
}

TEST(HardeningTest, ValidationErrorsAreInputErrors) {
  const RunFile run = PlanRun();
  Result<Plan> plan = ParsePlan(
      Plan1(R"("micro_batches": 8, "micro_batch_size": 1)", R"("num_blocks": 2)"), "p.json");
  ASSERT_TRUE(plan.ok());
  const Status s = ValidatePlan(*plan, run.cluster, run.model, run.train);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ExitCodeFor(s), 2);
}

}  // namespace
}  // namespace motley::spec
