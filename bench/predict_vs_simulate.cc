// Predictor against the whole-step simulation (issue 11's acceptance benchmark): plans each run
// file given with `motley plan`'s search (every core, baselines and the exhaustive reference
// off), then predicts and simulates each of the planner's top 10 candidates and prints the
// relative difference per candidate, the largest per run, and the CPU time of one prediction and
// one simulation. Target: within 2% on every candidate of hethub-768 and the 1,024- and
// 4,096-device three-type clusters. Prints measurements only; asserts nothing.
//
// Usage: motley_predict_vs_simulate RUN.yaml [RUN.yaml ...]
// Example: build/bench/motley_predict_vs_simulate examples/runs/hethub-140b.yaml
//          bench/plan_set/runs/three-type-1024.yaml bench/plan_set/runs/three-type-4096.yaml
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <utility>

#include "perf/predictor.h"
#include "perf/run_predictor.h"
#include "plan/planner.h"
#include "sim/simulator.h"
#include "spec/run_file.h"

namespace motley {
namespace {

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int Run(const std::string& path) {
  Result<spec::RunFile> run = spec::LoadRunFile(path);
  if (!run.ok()) {
    std::fprintf(stderr, "%s\n", run.status().message().c_str());
    return 2;
  }
  const int devices = run->cluster.num_devices();
  // The predictor `motley plan` builds for the run (perf/run_predictor.h).
  Result<std::unique_ptr<perf::RunPredictor>> models = perf::MakeRunPredictor(std::move(*run));
  if (!models.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), models.status().message().c_str());
    return 2;
  }
  const perf::Predictor& predictor = *(*models)->predictor;
  plan::PlannerOptions options;
  options.threads = 0;
  options.baselines = false;
  options.exhaustive_max_units = 0;
  options.confirm_top = options.rank_top;
  const double t0 = CpuSeconds();
  Result<plan::PlanReport> report = plan::PlanCluster(predictor, options);
  if (!report.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), report.status().message().c_str());
    return 1;
  }
  std::printf("%s: %d devices, planned in %.1f s CPU\n", path.c_str(), devices, CpuSeconds() - t0);
  std::printf("  %-4s %-60s %12s %12s %9s\n", "rank", "candidate", "predicted s", "simulated s",
              "sim/pred");
  const sim::Simulator simulator(predictor);
  double worst = 0;
  for (size_t i = 0; i < report->ranked.size(); ++i) {
    const plan::Candidate& c = report->ranked[i];
    Result<sim::SimResult> simulated = simulator.Run(c.plan);
    if (!simulated.ok()) {
      std::fprintf(stderr, "  %zu: %s\n", i, simulated.status().message().c_str());
      return 1;
    }
    const double rel = simulated->iteration_s / c.prediction.iteration_s - 1.0;
    worst = std::max(worst, std::abs(rel));
    std::printf("  %-4zu %-60.60s %12.5f %12.5f %+8.2f%%\n", i + 1, c.description.c_str(),
                c.prediction.iteration_s, simulated->iteration_s, 100.0 * rel);
  }
  // One prediction and one simulation of the first candidate, CPU time.
  const spec::Plan& first = report->ranked.front().plan;
  double t = CpuSeconds();
  const perf::Prediction p = predictor.Predict(first);
  const double predict_s = CpuSeconds() - t;
  t = CpuSeconds();
  Result<sim::SimResult> s = simulator.Run(first);
  const double simulate_s = CpuSeconds() - t;
  std::printf(
      "  largest |sim/pred - 1|: %.2f%% over %zu candidates; one prediction %.3f s CPU, "
      "one simulation %.3f s CPU (%lld events, %lld transfers; step %.5f s)\n",
      100.0 * worst, report->ranked.size(), predict_s, simulate_s,
      s.ok() ? static_cast<long long>(s->events) : 0LL,
      s.ok() ? static_cast<long long>(s->transfers) : 0LL, p.iteration_s);
  return 0;
}

}  // namespace
}  // namespace motley

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s RUN.yaml [RUN.yaml ...]\n"
                 "example: %s examples/runs/hethub-140b.yaml\n",
                 argv[0], argv[0]);
    return 2;
  }
  int rc = 0;
  for (int i = 1; i < argc; ++i) rc = std::max(rc, motley::Run(argv[i]));
  return rc;
}
