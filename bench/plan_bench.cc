// Planner scale benchmark (issue 5): planning time on this machine for the 768-device two-vendor
// cluster with the 140B Llama (examples/runs/hethub-140b.yaml) and for 1,024- and 4,096-device
// three-type mixed-NIC clusters generated in code (perf/cluster_presets.h) with Llama-2-70B;
// targets 10 s, 10 s and 60 s. Counters: each reference ratio and the speedup over each baseline.
// Wall-clock numbers are reported, never asserted.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "motley_source_dir.h"
#include "perf/cluster_presets.h"
#include "perf/compute_model.h"
#include "perf/predictor.h"
#include "plan/planner.h"
#include "spec/run_file.h"

namespace motley {
namespace {

void RunPlanner(benchmark::State& state, const spec::ClusterSpec& cluster,
                const spec::ModelSpec& model, const spec::TrainSpec& train) {
  const perf::PerfSettings settings = perf::DefaultSettings(cluster);
  const perf::RooflineComputeModel compute(cluster, model, settings);
  const perf::Predictor predictor(cluster, model, train, compute, settings);
  plan::PlannerOptions options;
  options.exhaustive_max_units = 0;
  Result<plan::PlanReport> report = Err("not run");
  for (auto _ : state) {
    report = plan::PlanCluster(predictor, options);
    benchmark::DoNotOptimize(report);
  }
  if (!report.ok()) {
    state.SkipWithError(report.status().message().c_str());
    return;
  }
  const plan::PlanReport& r = *report;
  const Status valid = spec::ValidatePlan(r.best.plan, cluster, model, train);
  if (!valid.ok()) {
    state.SkipWithError(valid.message().c_str());
    return;
  }
  const double tps = r.best.TokensPerSecond(r.tokens_per_step);
  state.counters["devices"] = cluster.num_devices();
  state.counters["tokens_per_s"] = tps;
  state.counters["mfu"] = r.best.prediction.mfu;
  state.counters["bound_ratio"] = tps / r.compute_bound_tokens_per_s;
  state.counters["homogeneous_sum_ratio"] =
      r.homogeneous_sum_tokens_per_s > 0 ? tps / r.homogeneous_sum_tokens_per_s : 0;
  const char* names[] = {"speedup_uniform", "speedup_homog", "speedup_identical"};
  for (size_t i = 0; i < r.baselines.size() && i < 3; ++i) {
    state.counters[names[i]] =
        r.baselines[i].found ? tps / r.baselines[i].candidate.TokensPerSecond(r.tokens_per_step) : 0;
  }
  state.counters["layouts"] = static_cast<double>(r.layouts_considered);
  state.counters["evaluations"] = static_cast<double>(r.evaluations);
  state.counters["pruned"] = static_cast<double>(r.evaluations_pruned);
  std::printf("%s\n  best: %s\n%s", cluster.name.c_str(), r.best.description.c_str(),
              plan::SummarizeReport(r).c_str());
}

void BM_Plan768Hethub140b(benchmark::State& state) {
  auto run = spec::LoadRunFile(std::string(MOTLEY_SOURCE_DIR) + "/examples/runs/hethub-140b.yaml");
  if (!run.ok()) {
    state.SkipWithError(run.status().message().c_str());
    return;
  }
  RunPlanner(state, run->cluster, run->model, run->train);
}

void BM_PlanThreeType(benchmark::State& state) {
  const int devices = static_cast<int>(state.range(0));
  auto cluster = perf::MakeThreeTypeCluster(devices);
  auto model = spec::ModelPreset("llama2-70b");
  if (!cluster.ok() || !model.ok()) {
    state.SkipWithError("cluster or model");
    return;
  }
  spec::TrainSpec train;
  train.global_batch = devices;  // one sequence per device per step
  train.seq_len = 4096;
  RunPlanner(state, *cluster, *model, train);
}

BENCHMARK(BM_Plan768Hethub140b)->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_PlanThreeType)->Arg(1024)->Arg(4096)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace motley

BENCHMARK_MAIN();
