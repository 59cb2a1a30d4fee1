// Fuzz target: straggler scenario files (docs/formats/scenario.md) against the cluster
// examples/clusters/emulated-8.yaml, then every device's and link's rate schedule.
#include <cstdint>
#include <cstdlib>

#include "fuzz/fuzz_util.h"
#include "spec/cluster_spec.h"
#include "straggler/scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace motley;
  static const spec::ClusterSpec* cluster = [] {
    auto c = spec::LoadClusterSpec(fuzz::SourcePath("examples/clusters/emulated-8.yaml"));
    if (!c.ok()) std::abort();
    return new spec::ClusterSpec(std::move(c).value());
  }();
  Result<straggler::Scenario> scenario =
      straggler::ParseScenario(fuzz::AsText(data, size), "fuzz-scenario.yaml", *cluster);
  if (!scenario.ok()) return 0;
  for (int a = 0; a < cluster->num_devices(); ++a) {
    (void)scenario->DeviceSchedule(a);
    (void)scenario->DeviceSpeedAt(a, 10);
    for (int b = a + 1; b < cluster->num_devices(); ++b) {
      (void)scenario->LinkSchedule(*cluster, a, b);
    }
  }
  return 0;
}
