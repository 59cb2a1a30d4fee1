// See plan_names.h.
#include "plan/plan_names.h"

#include <fmt/format.h>

namespace motley::plan {

std::string LayoutLegend(const std::string& indent) {
  const char* lines[] = {
      "balanced d=N: N pipelines sharing every (island, device type) group; segregated by type "
      "(island) d=(a,b,..): pipelines inside each type (island), a in the first, b in the second",
      "contiguous / strided: a pipeline's TP groups are neighbours / round-robin; bucket order: "
      "the groups' stage order was searched too; pipeline p stage s: stage s (0 first) of replica "
      "p",
      "[TYPE tpT, ...]: the device types used, in TP groups of T; b=B: micro-batch size; "
      "recompute: activation recompute (none, selective, full); polished: improved after the "
      "search by moving blocks and micro-batches (local search); interleaved v=V: interleaved "
      "1F1B with V model chunks per device group (v=V0/V1/..: per pipeline); no ZeRO-1: several "
      "pipelines without optimizer sharding (the planner found it faster)",
  };
  std::string out;
  for (const char* l : lines) out += indent + l + "\n";
  return out;
}

std::string DeviceLabel(const spec::ClusterSpec& cluster, int device) {
  const spec::DeviceInfo& d = cluster.device(device);
  return fmt::format("{} ({}:{})", device, cluster.nodes[static_cast<size_t>(d.node)].name,
                     d.local_index);
}

std::vector<int> DevicesLeftOut(const spec::Plan& plan, const spec::ClusterSpec& cluster) {
  std::vector<bool> used(static_cast<size_t>(cluster.num_devices()), false);
  for (const spec::PipelinePlan& p : plan.pipelines) {
    for (const spec::StagePlan& s : p.stages) {
      for (int d : s.devices) {
        if (d >= 0 && d < cluster.num_devices()) used[static_cast<size_t>(d)] = true;
      }
    }
  }
  std::vector<int> out;
  for (int d = 0; d < cluster.num_devices(); ++d) {
    if (!used[static_cast<size_t>(d)]) out.push_back(d);
  }
  return out;
}

std::string DescribeLeftOut(const spec::Plan& plan, const spec::ClusterSpec& cluster,
                            size_t max_named) {
  const std::vector<int> out = DevicesLeftOut(plan, cluster);
  if (out.empty()) return fmt::format("every device is used ({})", cluster.num_devices());
  std::string s = fmt::format("{} of {} devices left out: ", out.size(), cluster.num_devices());
  for (size_t i = 0; i < out.size() && i < max_named; ++i) {
    s += (i == 0 ? "" : ", ") + DeviceLabel(cluster, out[i]);
  }
  if (out.size() > max_named) s += fmt::format(" and {} more", out.size() - max_named);
  return s;
}

}  // namespace motley::plan
