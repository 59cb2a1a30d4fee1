// The JSON summaries of `motley plan`, `motley predict` and `motley simulate` (--summary FILE),
// each checked against what the command prints and against the plan it read.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_test_fixture.h"
#include "core/file_util.h"
#include "motley_source_dir.h"

namespace {

using motley::cli_test::CliTest;
using motley::cli_test::Outcome;

// `motley plan --summary` writes the outcome as JSON (docs/formats/plan-summary.md): the chosen
// plan's one tokens/s (the printed one), in the ranked table, every baseline, the references'
// ratios, and the pipeline messages of its step that cross the two islands.
TEST_F(CliTest, PlanSummaryJsonHasTheChosenPlanTheBaselinesAndTheCrossIslandTraffic) {
  const std::string run = Write("run.yaml", R"(cluster:
  name: two-islands
  device_types:
    - {name: fast, vendor: cpu, peak_flops: 300 GFLOPS, memory: 4 GiB, memory_bandwidth: 25 GB/s}
    - {name: slow, vendor: cpu, peak_flops: 200 GFLOPS, memory: 4 GiB, memory_bandwidth: 25 GB/s}
  link_classes:
    - {name: net, latency: 20 us, bandwidth: 20 GB/s}
  nodes:
    - {name: a, device_type: fast, device_count: 1}
    - {name: b, device_type: slow, device_count: 1}
  inter_island_link: net
model: small
train:
  global_batch: 16
  seq_len: 128
  steps: 5
)");
  Outcome plan =
      Run("plan " + run + " --quiet -o " + Path("p.json") + " --summary " + Path("s.json"));
  ASSERT_EQ(plan.exit_code, 0) << plan.err << plan.out;
  EXPECT_NE(plan.out.find("summary written to " + Path("s.json")), std::string::npos) << plan.out;
  auto text = motley::ReadFile(Path("s.json"));
  ASSERT_TRUE(text.ok());
  const nlohmann::json s = nlohmann::json::parse(*text);
  EXPECT_EQ(s["format"], "motley-plan-summary");
  EXPECT_EQ(s["version"], 2);
  EXPECT_EQ(s["cluster"]["devices"], 2);
  EXPECT_EQ(s["tokens_per_step"], 16 * 128);
  const nlohmann::json& chosen = s["chosen"];
  const double tps = chosen["tokens_per_s"];
  EXPECT_NE(plan.out.find(fmt::format("chosen: {}: {:.1f} tokens/s",
                                      chosen["description"].get<std::string>(), tps)),
            std::string::npos)
      << plan.out;
  EXPECT_EQ(s["written"], chosen["description"]);
  bool ranked = false;
  for (const auto& c : s["ranked"]) ranked |= c["description"] == chosen["description"];
  EXPECT_TRUE(ranked);
  std::vector<std::string> kinds;
  for (const auto& b : s["baselines"]) kinds.push_back(b["kind"]);
  EXPECT_EQ(kinds, (std::vector<std::string>{"uniform", "homogeneous", "identical"}));
  const nlohmann::json& refs = s["references"];
  EXPECT_NEAR(refs["homogeneous_sum_ratio"].get<double>(),
              tps / refs["homogeneous_sum_tokens_per_s"].get<double>(), 1e-12);
  EXPECT_NEAR(refs["compute_bound_ratio"].get<double>(),
              tps / refs["compute_bound_tokens_per_s"].get<double>(), 1e-12);
  EXPECT_EQ(chosen["devices_idle"].get<int>() + chosen["devices_used"].get<int>(), 2);
  EXPECT_EQ(chosen["devices_used"], 2) << *text;  // the cluster is big enough to need both
  EXPECT_EQ(s["cross_island"]["islands"], 2);
  // A pipeline over both devices sends each micro-batch's activation and gradient across; two
  // one-device pipelines (data parallelism across the islands) sum their gradients across.
  auto p = motley::ReadFile(Path("p.json"));
  ASSERT_TRUE(p.ok());
  const nlohmann::json pj = nlohmann::json::parse(*p);
  int64_t crossing = 0;
  for (const auto& pipe : pj["pipelines"]) {
    if (pipe["stages"].size() == 2) crossing += 2 * pipe["micro_batches"].get<int64_t>();
  }
  EXPECT_EQ(s["cross_island"]["pipeline_messages"].get<int64_t>(), crossing) << *p;
  if (pj["pipelines"].size() == 2) {
    const nlohmann::json& collectives = s["cross_island"]["collectives"];
    const char* kind = pj["optimizer_sharding"] == "zero1" ? "reduce-scatter" : "all-reduce";
    ASSERT_TRUE(collectives.contains(kind)) << *text;
    EXPECT_GT(collectives[kind]["count"].get<int64_t>(), 0);
  }
  EXPECT_GE(s["search"]["cpu_s"].get<double>(), 0.0);
}

// `motley predict --summary` writes what it prints as JSON (docs/formats/prediction.md): the
// printed step, and one entry per stage of the plan with its devices and micro-batches; a path it
// cannot write is an error naming the path.
TEST_F(CliTest, PredictSummaryJsonIsThePrintedPrediction) {
  const auto [o, p] = RunExampleWithSummary("predict", "", "motley-prediction");
  ASSERT_EQ(o.exit_code, 0);
  const double step = p["iteration_s"];
  EXPECT_NE(
      o.out.find(fmt::format("iteration {:.6g} s (pipelines {:.6g} s, exposed DP {:.6g} s", step,
                             p["pipeline_s"].get<double>(), p["exposed_dp_s"].get<double>())),
      std::string::npos)
      << o.out;
  EXPECT_GT(step, 0);
  EXPECT_LE(p["pipeline_s"].get<double>(), step);
  const std::string examples = std::string(MOTLEY_SOURCE_DIR) + "/examples/";
  const std::string run = examples + "runs/hetero-4.yaml";
  const std::string plan_path = examples + "plans/hetero-4-balanced.json";
  const nlohmann::json plan = nlohmann::json::parse(motley::ReadFile(plan_path).value());
  std::vector<nlohmann::json> want;  // [devices, micro_batches] per stage, in plan order
  for (const auto& pipe : plan["pipelines"]) {
    for (const auto& st : pipe["stages"]) want.push_back({st["devices"], pipe["micro_batches"]});
  }
  std::vector<nlohmann::json> got;
  for (const auto& st : p["stages"]) {
    got.push_back({st["devices"], st["micro_batches"]});
    EXPECT_GT(st["forward_s"].get<double>(), 0);
    EXPECT_GT(st["backward_s"].get<double>(), st["forward_s"].get<double>());
    EXPECT_GT(st["memory_bytes"].get<double>(), 0);
  }
  EXPECT_EQ(got, want);
  Outcome bad =
      Run("predict " + run + " " + plan_path + " --summary " + Path("no/such/dir/p.json"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find(Path("no/such/dir")), std::string::npos) << bad.err;
}

// `motley simulate --summary` writes what it prints as JSON (docs/formats/simulation.md): the
// printed simulated step and busy share, one entry per device the plan uses, and busy + idle =
// the step on each.
TEST_F(CliTest, SimulateSummaryJsonIsThePrintedSimulation) {
  const auto [o, s] = RunExampleWithSummary("simulate", "--straggler 1=2", "motley-simulation");
  ASSERT_EQ(o.exit_code, 0);
  const double step = s["iteration_s"];
  EXPECT_NE(
      o.out.find(fmt::format("simulated iteration {:.4f} s ({} events), closed form {:.4f} s", step,
                             s["events"].get<int64_t>(), s["predicted_iteration_s"].get<double>())),
      std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find(fmt::format("{:.1f} tokens/s; 4 devices busy {:.1f}% of the step",
                                   s["tokens_per_s"].get<double>(),
                                   100 * s["mean_busy_fraction"].get<double>())),
            std::string::npos)
      << o.out;
  EXPECT_EQ(s["devices_used"], 4);
  std::vector<int> ids;
  double busy = 0;
  for (const auto& d : s["devices"]) {
    ids.push_back(d["device"]);
    busy += d["busy_s"].get<double>();
    EXPECT_NEAR(d["busy_s"].get<double>() + d["idle_s"].get<double>(), step, 1e-9 * step);
  }
  EXPECT_EQ(ids, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NEAR(s["mean_busy_fraction"].get<double>(), busy / 4 / step, 1e-12);
  EXPECT_EQ(s["pipeline_backward_end_s"].size(), 2u);
}

}  // namespace
