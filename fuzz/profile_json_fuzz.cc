// Fuzz target: profile files (docs/formats/profile.md), then the check against the small model,
// the profiled compute model's lookups and a small planner run (plan::PlanCluster) on a
// two-device cluster whose device types the seeds name (cpu-fast, cpu-slow): a profile's times
// feed the planner's arithmetic (issue 17: times of 1e-300 s reached a CHECK in evaluate.cc).
#include <cstdint>
#include <cstdlib>

#include "fuzz/fuzz_util.h"
#include "perf/compute_model.h"
#include "perf/predictor.h"
#include "perf/profile.h"
#include "perf/settings.h"
#include "plan/planner.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "spec/train_spec.h"

namespace {

constexpr const char* kCluster = R"(name: two
device_types:
  - {name: cpu-fast, vendor: cpu, peak_flops: 10 GFLOPS, memory: 2 GiB, memory_bandwidth: 4 GB/s}
  - {name: cpu-slow, vendor: cpu, peak_flops: 4 GFLOPS, memory: 1 GiB, memory_bandwidth: 2 GB/s}
link_classes:
  - {name: shm, latency: 5 us, bandwidth: 2 GB/s}
nodes:
  - {name: fast, device_type: cpu-fast, device_count: 1}
  - {name: slow, device_type: cpu-slow, device_count: 1}
islands:
  - {name: host, nodes: [fast, slow], link: shm}
)";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace motley;
  static const spec::ClusterSpec* cluster = [] {
    auto c = spec::ParseClusterSpec(kCluster, "two.yaml");
    if (!c.ok()) std::abort();
    return new spec::ClusterSpec(std::move(c).value());
  }();
  static const spec::ModelSpec model = spec::ModelPreset("small").value();
  static const spec::TrainSpec train = [] {
    spec::TrainSpec t;
    t.global_batch = 8;
    t.seq_len = 64;
    return t;
  }();
  Result<perf::Profile> profile = perf::ParseProfile(fuzz::AsText(data, size), "fuzz-profile.json");
  if (!profile.ok()) return 0;
  (void)perf::ProfileToJson(*profile);
  if (!perf::CheckProfileMatchesModel(*profile, model).ok()) return 0;
  const perf::PerfSettings settings = perf::DefaultSettings(*cluster);
  const perf::RooflineComputeModel roofline(*cluster, model, settings);
  const perf::ProfiledComputeModel profiled(std::move(*profile), *cluster, roofline);
  for (int t = 0; t < static_cast<int>(cluster->device_types.size()); ++t) {
    for (int64_t b : {1, 2, 3, 8}) {
      (void)profiled.Block(t, 1, b, 64);
      (void)profiled.Embedding(t, 1, b, 64);
    }
  }
  const perf::Predictor predictor(*cluster, model, train, profiled, settings);
  plan::PlannerOptions options;
  options.micro_batch_sizes = {1, 2};
  options.recompute = {spec::Recompute::kNone};
  options.tp_degrees = {1};
  options.rank_top = 2;
  options.confirm_top = 1;
  options.baselines = false;
  options.exhaustive_max_units = 0;
  (void)plan::PlanCluster(predictor, options);
  return 0;
}
