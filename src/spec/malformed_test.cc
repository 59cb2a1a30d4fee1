// Malformed run files, cluster files and plans: each must give an error Status (never a crash or
// an exception) whose message names the file and the field (or, for syntax errors, the line).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/file_util.h"
#include "spec/plan.h"
#include "spec/run_file.h"

namespace motley::spec {
namespace {

struct Case {
  const char* label;
  std::string text;
  std::vector<std::string> expect;  // substrings of the message
};

constexpr const char* kTypes =
    "  device_types:\n"
    "    - {name: cpu, vendor: cpu, peak_flops: 1 GFLOPS, memory: 1 GiB, memory_bandwidth: 1 GB/s}\n";
constexpr const char* kNodes = "  nodes:\n    - {name: n, device_type: cpu, device_count: 1}\n";
constexpr const char* kTrain = "train: {global_batch: 4, seq_len: 32, steps: 2}\n";

std::string RunText(const std::string& cluster_body, const std::string& model,
                    const std::string& train) {
  return "cluster:\n" + cluster_body + "model: " + model + "\n" + train;
}
std::string Good() { return RunText(std::string(kTypes) + kNodes, "tiny", kTrain); }

std::vector<Case> RunCases() {
  const std::string types = kTypes;
  const std::string nodes = kNodes;
  return {
      {"missing section",
       RunText(types + nodes, "tiny", ""),
       {"bad.yaml: train: missing required field"}},
      {"wrong type",
       RunText(types + nodes, "tiny", "train: {global_batch: 4, seq_len: 32, steps: ten}\n"),
       {"bad.yaml: train.steps: expected an integer, got 'ten'"}},
      {"zero size",
       RunText(types + nodes, "tiny", "train: {global_batch: 0, seq_len: 32, steps: 2}\n"),
       {"bad.yaml: train.global_batch: must be positive, got 0"}},
      {"unknown top key",
       Good() + "trian: {}\n",
       {"bad.yaml: trian: unknown key (known: cluster, model, train)"}},
      {"unknown nested key",
       RunText(types + nodes, "tiny",
               "train: {global_batch: 4, seq_len: 32, steps: 2, optimizer: {lrr: 1}}\n"),
       {"bad.yaml: train.optimizer.lrr: unknown key"}},
      {"undefined device type",
       RunText(types + "  nodes:\n    - {name: n, device_type: h100x, device_count: 1}\n", "tiny",
               kTrain),
       {"bad.yaml: cluster.nodes[0].device_type: unknown device type 'h100x' (known: cpu)"}},
      {"undefined link class",
       RunText(types + "  nodes:\n    - {name: n, device_type: cpu, device_count: 1, nics: [ib]}\n",
               "tiny", kTrain),
       {"bad.yaml: cluster.nodes[0].nics[0]: unknown link class 'ib' (known: none defined)"}},
      {"heads do not divide hidden",
       RunText(types + nodes, "{preset: tiny, num_heads: 5}", kTrain),
       {"bad.yaml: model.num_heads: 5 heads do not divide hidden 64"}},
      {"kv heads do not divide heads",
       RunText(types + nodes, "{preset: tiny, num_kv_heads: 3}", kTrain),
       {"bad.yaml: model.num_kv_heads: 3 kv heads do not divide 4 heads"}},
      {"yaml syntax", "cluster: [unclosed\nmodel: tiny\n", {"bad.yaml:", "YAML syntax error"}},
      {"empty document", "# only a comment\n", {"bad.yaml: empty document"}},
      {"unknown preset",
       RunText(types + nodes, "llama-9000", kTrain),
       {"bad.yaml: model: unknown model preset 'llama-9000' (known: tiny,"}},
      {"negative memory",
       RunText(
           "  device_types:\n    - {name: cpu, vendor: cpu, peak_flops: 1 GFLOPS, memory: -1 GiB, "
           "memory_bandwidth: 1 GB/s}\n" +
               nodes,
           "tiny", kTrain),
       {"bad.yaml: cluster.device_types[0].memory: must be positive"}},
      {"wrong unit",
       RunText(
           "  device_types:\n    - {name: cpu, vendor: cpu, peak_flops: 1 GFLOPS, memory: 80 GHz, "
           "memory_bandwidth: 1 GB/s}\n" +
               nodes,
           "tiny", kTrain),
       {"bad.yaml: cluster.device_types[0].memory: expected a byte size such as"}},
      {"duplicate device type",
       RunText(types +
                   "    - {name: cpu, vendor: cuda, peak_flops: 1 TFLOPS, memory: 1 GiB, "
                   "memory_bandwidth: 1 TB/s}\n" +
                   nodes,
               "tiny", kTrain),
       {"bad.yaml: cluster.device_types[1].name: duplicate device type name 'cpu'"}},
      {"model field missing",
       RunText(types + nodes,
               "{num_blocks: 2, num_heads: 2, ffn_hidden: 8, "
               "vocab_size: 256, max_seq_len: 32}",
               kTrain),
       {"bad.yaml: model.hidden: missing required field"}},
      {"list where a number belongs",
       RunText(types + "  nodes:\n    - {name: n, device_type: cpu, device_count: [1]}\n", "tiny",
               kTrain),
       {"bad.yaml: cluster.nodes[0].device_count: expected an integer, got a list"}},
      {"top level not a mapping", "- cluster\n- model\n", {"bad.yaml: expected a mapping"}},
      {"cluster file missing",
       "cluster: nope.yaml\nmodel: tiny\n" + std::string(kTrain),
       {"bad.yaml: cluster: ", "nope.yaml: cannot open"}},
      {"empty cluster path",
       "cluster: \"\"\nmodel: tiny\n" + std::string(kTrain),
       {"bad.yaml: cluster: expected a cluster file path or mapping"}},
      {"island names unknown node",
       RunText(types + nodes + "  islands: [{name: i, nodes: [zz]}]\n", "tiny", kTrain),
       {"bad.yaml: cluster.islands[0].nodes[0]: unknown node 'zz'"}},
      {"intra link missing",
       RunText(types + "  nodes:\n    - {name: n, device_type: cpu, device_count: 2}\n", "tiny",
               kTrain),
       {"bad.yaml: cluster.nodes[0].intra_link: required: the node has 2 devices"}},
      {"unknown vendor",
       RunText(
           "  device_types:\n    - {name: cpu, vendor: tpu9, peak_flops: 1 GFLOPS, memory: 1 GiB, "
           "memory_bandwidth: 1 GB/s}\n" +
               nodes,
           "tiny", kTrain),
       {"bad.yaml: cluster.device_types[0].vendor: unknown vendor stack 'tpu9'"}},
      {"unknown data format",
       RunText(types + nodes, "tiny",
               "train: {global_batch: 4, seq_len: 32, steps: 2, data: {format: csv}}\n"),
       {"bad.yaml: train.data.format: unknown format 'csv'"}},
      {"key given twice",
       RunText(types + nodes, "tiny",
               "train:\n  global_batch: 4\n  seq_len: 32\n"
               "  steps: 2\n  steps: 3\n"),
       {"bad.yaml: train.steps:"}},
      {"null value",
       RunText(types + nodes, "tiny", "train: {global_batch: 4, seq_len: 32, steps: }\n"),
       {"bad.yaml: train.steps: expected an integer, got nothing"}},
      {"cards half assigned",
       RunText(types +
                   "  link_classes:\n    - {name: ib, latency: 1 us, bandwidth: 10 GB/s}\n"
                   "  nodes:\n    - {name: n, device_type: cpu, device_count: 2, intra_link: ib, "
                   "nics: [{link: ib, devices: [0]}, ib]}\n",
               "tiny", kTrain),
       {"bad.yaml: cluster.nodes[0].nics[1]: either every card names the devices it serves"}},
      {"a device without a card",
       RunText(types +
                   "  link_classes:\n    - {name: ib, latency: 1 us, bandwidth: 10 GB/s}\n"
                   "  nodes:\n    - {name: n, device_type: cpu, device_count: 2, intra_link: ib, "
                   "nics: [{link: ib, devices: [0]}]}\n",
               "tiny", kTrain),
       {"bad.yaml: cluster.nodes[0].nics: device 1 of the node uses no card"}},
      {"a device on two cards",
       RunText(types +
                   "  link_classes:\n    - {name: ib, latency: 1 us, bandwidth: 10 GB/s}\n"
                   "  nodes:\n    - {name: n, device_type: cpu, device_count: 2, intra_link: ib, "
                   "nics: [{link: ib, devices: [0, 1]}, {link: ib, devices: [1]}]}\n",
               "tiny", kTrain),
       {"bad.yaml: cluster.nodes[0].nics[1].devices[0]: device 1 already uses card 0"}},
      {"a card serving a device the node lacks",
       RunText(types +
                   "  link_classes:\n    - {name: ib, latency: 1 us, bandwidth: 10 GB/s}\n"
                   "  nodes:\n    - {name: n, device_type: cpu, device_count: 2, intra_link: ib, "
                   "nics: [{link: ib, devices: [0, 2]}]}\n",
               "tiny", kTrain),
       {"bad.yaml: cluster.nodes[0].nics[0].devices[1]: device 2 is not on the node (local indices "
        "0..1)"}},
      {"island capacity zero",
       RunText(types + "  link_classes:\n    - {name: ib, latency: 1 us, bandwidth: 10 GB/s}\n"
                       "  nodes:\n    - {name: a, device_type: cpu, device_count: 1}\n"
                       "    - {name: b, device_type: cpu, device_count: 1}\n"
                       "  islands:\n    - {name: i, nodes: [a, b], link: ib, capacity: 0}\n",
               "tiny", kTrain),
       {"bad.yaml: cluster.islands[0].capacity: must be positive, got 0"}},
      {"inter-island capacity out of range",
       RunText(types + "  link_classes:\n    - {name: ib, latency: 1 us, bandwidth: 10 GB/s}\n"
                       "  nodes:\n    - {name: a, device_type: cpu, device_count: 1}\n"
                       "    - {name: b, device_type: cpu, device_count: 1}\n"
                       "  inter_island_link: ib\n  inter_island_capacity: 1e30 B/s\n",
               "tiny", kTrain),
       {"bad.yaml: cluster.inter_island_capacity: must be in [1 kB/s, 1 PB/s]"}},
      {"several islands without a link between",
       RunText(types + "  nodes:\n    - {name: a, device_type: cpu, device_count: 1}\n"
                       "    - {name: b, device_type: cpu, device_count: 1}\n",
               "tiny", kTrain),
       {"bad.yaml: cluster.inter_island_link: required"}},
  };
}

TEST(MalformedTest, GoodBaseParses) {
  Result<RunFile> r = ParseRunFile(Good(), "bad.yaml", "");
  EXPECT_TRUE(r.ok()) << r.status().message();
}

TEST(MalformedTest, RunFilesGiveLocatedErrors) {
  const std::vector<Case> cases = RunCases();
  EXPECT_GE(cases.size(), 15u);
  for (const Case& c : cases) {
    Result<RunFile> r = ParseRunFile(c.text, "bad.yaml", "/nonexistent-dir");
    ASSERT_FALSE(r.ok()) << c.label;
    for (const std::string& want : c.expect) {
      EXPECT_NE(r.status().message().find(want), std::string::npos)
          << c.label << "\n  got:  " << r.status().message() << "\n  want: " << want;
    }
  }
}

TEST(MalformedTest, ClusterFileErrorsNameTheClusterFile) {
  Result<ClusterSpec> c = ParseClusterSpec("device_types: []\nnodes: []\n", "c.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "c.yaml: device_types: at least one device type needed");
  c = ParseClusterSpec("device_types: {}\n", "c.yaml");
  EXPECT_EQ(c.status().message(), "c.yaml: device_types: expected a list");
}

TEST(MalformedTest, UnreadableAndEmptyFiles) {
  Result<RunFile> r = LoadRunFile("/nonexistent/run.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("/nonexistent/run.yaml: cannot open", 0), 0u);
  const auto dir = std::filesystem::temp_directory_path() / "motley_malformed_test";
  std::filesystem::create_directories(dir);
  const std::string empty = (dir / "empty.yaml").string();
  ASSERT_TRUE(WriteFileAtomic(empty, "").ok());
  r = LoadRunFile(empty);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), empty + ": empty document");
  const std::string empty_plan = (dir / "empty.json").string();
  ASSERT_TRUE(WriteFileAtomic(empty_plan, "").ok());
  Result<Plan> p = LoadPlan(empty_plan);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message().rfind(empty_plan + ": JSON syntax error", 0), 0u);
  p = LoadPlan((dir / "missing.json").string());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("missing.json: cannot open"), std::string::npos);
  r = LoadRunFile(dir.string());  // a directory
  EXPECT_FALSE(r.ok());
  std::filesystem::remove_all(dir);
}

std::string PlanText(const std::string& top, const std::string& pipeline, const std::string& stage) {
  return "{\"format\": \"motley-plan\", \"version\": 1" + top + ", \"pipelines\": [{" + pipeline +
         "\"stages\": [{" + stage + "}]}]}";
}
constexpr const char* kPipe = "\"micro_batches\": 2, \"micro_batch_size\": 1, ";
constexpr const char* kStage =
    "\"first_block\": 0, \"num_blocks\": 2, \"has_embedding\": true, \"has_head\": true, "
    "\"devices\": [0]";

TEST(MalformedTest, PlansGiveLocatedErrors) {
  const std::vector<Case> cases = {
      {"json syntax", "{\"format\": \"motley-plan\",", {"p.json: JSON syntax error", "parse error"}},
      {"not an object", "[1, 2]", {"p.json: (top level): expected an object, got array"}},
      {"wrong format", "{\"format\": \"other\", \"version\": 1, \"pipelines\": []}",
       {"p.json: format: expected 'motley-plan', got 'other'"}},
      {"missing format", "{\"version\": 1, \"pipelines\": []}", {"p.json: format: missing required field"}},
      {"future version", "{\"format\": \"motley-plan\", \"version\": 4, \"pipelines\": []}",
       {"p.json: version: unsupported version 4 (this build reads 1 to 3)"}},
      {"missing pipelines", "{\"format\": \"motley-plan\", \"version\": 1}",
       {"p.json: pipelines: missing required field"}},
      {"missing devices", PlanText("", kPipe, "\"first_block\": 0, \"num_blocks\": 2"),
       {"p.json: pipelines[0].stages[0].devices: missing required field"}},
      {"string for integer", PlanText("", "\"micro_batches\": \"4\", \"micro_batch_size\": 1, ", kStage),
       {"p.json: pipelines[0].micro_batches: expected an integer, got string \"4\""}},
      {"float for integer", PlanText("", "\"micro_batches\": 2.5, \"micro_batch_size\": 1, ", kStage),
       {"p.json: pipelines[0].micro_batches: expected an integer"}},
      {"unknown stage key", PlanText("", kPipe, std::string(kStage) + ", \"tp\": 1"),
       {"p.json: pipelines[0].stages[0].tp: unknown key"}},
      {"unknown enum value", PlanText(", \"recompute\": \"some\"", kPipe, kStage),
       {"p.json: recompute: unknown value 'some' (known: none, selective, full)"}},
      {"negative device id", PlanText("", kPipe, "\"first_block\": 0, \"num_blocks\": 2, \"devices\": [-1]"),
       {"p.json: pipelines[0].stages[0].devices[0]: expected a device id"}},
      {"bool as string", PlanText("", kPipe, std::string(kStage) + ", \"has_head\": \"yes\""),
       {"p.json: pipelines[0].stages[0].has_head:"}},
      {"zero micro-batch size", PlanText("", "\"micro_batches\": 2, \"micro_batch_size\": 0, ", kStage),
       {"p.json: pipelines[0].micro_batch_size: must be positive, got 0"}},
      {"zero tp degree", PlanText("", kPipe, std::string(kStage) + ", \"tp_degree\": 0"),
       {"p.json: pipelines[0].stages[0].tp_degree: must be positive, got 0"}},
      {"stages not a list", "{\"format\": \"motley-plan\", \"version\": 1, \"pipelines\": [{" +
                                std::string(kPipe) + "\"stages\": {}}]}",
       {"p.json: pipelines[0].stages: expected an array, got object"}},
  };
  for (const Case& c : cases) {
    Result<Plan> p = ParsePlan(c.text, "p.json");
    ASSERT_FALSE(p.ok()) << c.label;
    for (const std::string& want : c.expect) {
      EXPECT_NE(p.status().message().find(want), std::string::npos)
          << c.label << "\n  got:  " << p.status().message() << "\n  want: " << want;
    }
  }
  // The base plan itself parses.
  EXPECT_TRUE(ParsePlan(PlanText("", kPipe, kStage), "p.json").ok());
}

}  // namespace
}  // namespace motley::spec
