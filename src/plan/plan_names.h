// What the planner's output says in words: the legend of its layout descriptions (e.g.
// "segregated by type d=(2,2) contiguous [fast-3x tp1, slow-1x tp1], b=2, recompute=none"), a
// device's readable name, and the devices a plan leaves out. Shared by `motley plan`, the plan
// report and `motley train`, so every output explains names the same way. Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "spec/cluster_spec.h"
#include "spec/plan.h"

namespace motley::plan {

// The legend of the words in a layout description, several lines (each newline-terminated, each
// starting with `indent`).
std::string LayoutLegend(const std::string& indent = "  ");

// "5 (node-b:1)": the global id and NODE:LOCAL_INDEX (the name scenario files accept).
std::string DeviceLabel(const spec::ClusterSpec& cluster, int device);

// Devices of the cluster that no stage of `plan` uses, by id.
std::vector<int> DevicesLeftOut(const spec::Plan& plan, const spec::ClusterSpec& cluster);

// "every device is used" or "left out: 3 (host-slow:1), 7 (host-b:3)" (at most `max_named`
// named, then "and N more").
std::string DescribeLeftOut(const spec::Plan& plan, const spec::ClusterSpec& cluster,
                            size_t max_named = 16);

}  // namespace motley::plan
