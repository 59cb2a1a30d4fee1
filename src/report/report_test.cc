// Tests of the report pages: the run charts draw one mark per metrics row (and per validation or
// predicted value), the plan sections one device-map cell per device, one utilisation column per
// device the plan uses, one forward and one backward bar per micro-batch of every timeline stage,
// and one baseline bar per baseline found. The browser test (tests/report) loads such pages in
// Chromium.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "perf/compute_model.h"
#include "perf/predictor.h"
#include "perf/settings.h"
#include "report/html.h"
#include "report/plan_report.h"
#include "report/run_report.h"
#include "sim/simulator.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"

namespace motley::report {
namespace {

// The marks of chart `id`: elements of class "mark" (or "mark KIND") between its <svg> and </svg>.
int MarksOf(const std::string& html, const std::string& id, const std::string& kind = "") {
  const size_t start = html.find("data-chart=\"" + id + "\"");
  if (start == std::string::npos) return -1;
  const size_t end = html.find("</svg>", start);
  const std::string svg = html.substr(start, end - start);
  const std::string what = kind.empty() ? "class=\"mark" : "class=\"mark " + kind + "\"";
  int n = 0;
  for (size_t p = svg.find(what); p != std::string::npos; p = svg.find(what, p + 1)) ++n;
  return n;
}

TEST(ReportTest, RunChartsDrawOneMarkPerRow) {
  auto serial = ParseMetrics(
      R"({"step":1,"loss":5,"tokens":8,"step_time_s":1,"tokens_per_s":8}
{"step":2,"loss":4,"tokens":8,"step_time_s":1,"tokens_per_s":8,"val_loss":4.5}
{"step":3,"loss":3,"tokens":8,"step_time_s":1,"tokens_per_s":8}
)",
      "a.jsonl", "serial");
  auto emulated = ParseMetrics(
      R"({"step":1,"loss":5,"tokens":8,"clock":"virtual","step_time_s":2,"wall_step_time_s":0.5,"tokens_per_s":4,"predicted_step_time_s":2}
{"step":2,"loss":4,"tokens":8,"clock":"virtual","step_time_s":2,"wall_step_time_s":0.5,"tokens_per_s":4,"predicted_step_time_s":2}
)",
      "b.jsonl", "emulated <b>");
  ASSERT_TRUE(serial.ok() && emulated.ok());
  const std::string html = RunReportHtml("runs", {*serial, *emulated});
  EXPECT_EQ(MarksOf(html, "loss-step"), 3 + 1 + 2);  // train rows + one validation value
  EXPECT_EQ(MarksOf(html, "loss-wall"), 3 + 1 + 2);
  EXPECT_EQ(MarksOf(html, "throughput-step"), 3 + 2 + 2);  // + the emulated run's wall rate
  EXPECT_EQ(MarksOf(html, "throughput-wall"), 3 + 2 + 2);
  EXPECT_EQ(MarksOf(html, "step-time"), 3 + 2 + 2);  // + the predicted step times
  EXPECT_NE(html.find("emulated &lt;b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // no resources
}

spec::ClusterSpec TwoTypeCluster() {
  auto c = spec::ParseClusterSpec(R"(
name: two-types
device_types:
  - {name: fast, vendor: cpu, peak_flops: 3 GFLOPS, memory: 1 GiB, memory_bandwidth: 3 GB/s}
  - {name: slow, vendor: cpu, peak_flops: 1 GFLOPS, memory: 1 GiB, memory_bandwidth: 1 GB/s}
link_classes:
  - {name: shm, latency: 5 us, bandwidth: 2 GB/s, efficiency: 1.0}
nodes:
  - {name: a, device_type: fast, device_count: 2, intra_link: shm}
  - {name: b, device_type: slow, device_count: 3, intra_link: shm}
islands:
  - {name: one, nodes: [a, b], link: shm}
)",
                                  "two-types.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

TEST(ReportTest, PlanSectionsDrawEveryDeviceStageAndMicroBatch) {
  const spec::ClusterSpec cluster = TwoTypeCluster();
  spec::ModelSpec model = spec::ModelPreset("tiny").value();
  spec::TrainSpec train;
  train.global_batch = 8;
  train.seq_len = 16;
  const perf::PerfSettings settings = perf::DefaultSettings(cluster);
  const perf::RooflineComputeModel compute(cluster, model, settings);
  const perf::Predictor predictor(cluster, model, train, compute, settings);
  // Two pipelines: (fast 0 -> slow 2) with 3 micro-batches of 2, (fast 1) with 2 of 1; devices 3
  // and 4 left out.
  spec::Plan plan;
  spec::PipelinePlan p0;
  p0.micro_batches = 3;
  p0.micro_batch_size = 2;
  p0.stages = {{0, 1, true, false, {0}, 1}, {1, 1, false, true, {2}, 1}};
  spec::PipelinePlan p1;
  p1.micro_batches = 2;
  p1.micro_batch_size = 1;
  p1.stages = {{0, 2, true, true, {1}, 1}};
  plan.pipelines = {p0, p1};
  ASSERT_TRUE(spec::ValidatePlan(plan, cluster, model, train).ok());
  const sim::Simulator simulator(predictor);
  sim::SimOptions so;
  so.record_trace = true;
  auto r = simulator.Run(plan, so);
  ASSERT_TRUE(r.ok()) << r.status().message();
  PlanView v;
  v.plan = &plan;
  v.prediction = predictor.Predict(plan);
  v.simulation = &*r;
  const std::string html = SimulationReportHtml(predictor, v);
  EXPECT_EQ(MarksOf(html, "device-map"), 5);   // every device of the cluster
  EXPECT_EQ(MarksOf(html, "utilisation"), 3);  // the devices the plan uses
  EXPECT_NE(html.find("2 of 5 devices left out: 3 (b:1), 4 (b:2)"), std::string::npos);
  for (const auto& [stage, m] :
       std::vector<std::pair<std::string, int>>{{"0-0", 3}, {"0-1", 3}, {"1-0", 2}}) {
    const std::string tag = "data-stage=\"" + stage + "\"";
    int fwd = 0, bwd = 0;
    const std::regex mark("class=\"mark (fwd|bwd)\" " + tag);
    for (auto it = std::sregex_iterator(html.begin(), html.end(), mark);
         it != std::sregex_iterator(); ++it) {
      ((*it)[1] == "fwd" ? fwd : bwd) += 1;
    }
    EXPECT_EQ(fwd, m) << stage;
    EXPECT_EQ(bwd, m) << stage;
  }
  EXPECT_NE(html.find("time in the step"), std::string::npos);
}

}  // namespace
}  // namespace motley::report
