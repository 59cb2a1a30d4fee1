// Fuzz target: cluster files (docs/formats/cluster.md), then the lookups every consumer makes on
// a finalized cluster (the link between devices, devices per type).
#include <algorithm>
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "spec/cluster_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace motley;
  Result<spec::ClusterSpec> cluster =
      spec::ParseClusterSpec(fuzz::AsText(data, size), "fuzz-cluster.yaml");
  if (!cluster.ok()) return 0;
  const int n = std::min(cluster->num_devices(), 16);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a != b) (void)cluster->LinkBetween(a, b).TransferTime(1e6);
    }
  }
  (void)cluster->DevicesPerType();
  return 0;
}
