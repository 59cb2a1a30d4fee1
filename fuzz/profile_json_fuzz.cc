// Fuzz target: profile files (docs/formats/profile.md), then the check against the small model and
// the profiled compute model's lookups for the cluster examples/clusters/local-hetero.yaml.
#include <cstdint>
#include <cstdlib>

#include "fuzz/fuzz_util.h"
#include "perf/compute_model.h"
#include "perf/profile.h"
#include "perf/settings.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace motley;
  static const spec::ClusterSpec* cluster = [] {
    auto c = spec::LoadClusterSpec(fuzz::SourcePath("examples/clusters/local-hetero.yaml"));
    if (!c.ok()) std::abort();
    return new spec::ClusterSpec(std::move(c).value());
  }();
  static const spec::ModelSpec model = spec::ModelPreset("small").value();
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
  return 0;
}
