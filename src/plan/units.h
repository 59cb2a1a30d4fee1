// Units and layouts: the planner's granularity (docs/architecture.md §8). A unit is a TP group:
// `tp` devices of one node (so of one type), the smallest thing a stage runs on. A layout is a list
// of pipelines, each an ordered list of units (one per stage); layouts are formed from buckets of
// units that share (island, device type), so that identical pipelines can be recognised and
// evaluated once. Plain value types; pure functions.
#pragma once

#include <string>
#include <vector>

#include "spec/cluster_spec.h"

namespace motley::plan {

struct Unit {
  int type = 0;    // device type index
  int node = 0;
  int island = 0;
  int tp = 1;
  std::vector<int> devices;  // global ids, consecutive local indices of one node
};

// TP degree per device type index; 0 = the type is not used.
using TpAssignment = std::vector<int>;

// Cuts every node of a used type into units of its type's TP degree (local indices 0..tp-1, ...;
// devices left over when tp does not divide the node's count are not used).
std::vector<Unit> BuildUnits(const spec::ClusterSpec& cluster, const TpAssignment& tp);

// Units grouped by (island, type), islands in cluster order, each bucket in node order.
struct Bucket {
  int island = 0;
  int type = 0;
  std::vector<int> units;  // indices into the unit list
};
std::vector<Bucket> BucketUnits(const std::vector<Unit>& units);

// A layout: pipelines as ordered unit indices.
using Layout = std::vector<std::vector<int>>;

enum class Placement {
  kContiguous,  // pipeline k takes a contiguous run of each bucket (consecutive stages share nodes)
  kStrided,     // pipeline k takes units k, k+d, ... (DP partners share nodes)
};

// Balanced formation: d pipelines, each taking floor or ceil of every bucket's units (the u mod d
// pipelines taking one more rotate from bucket to bucket, so stage counts differ by at most one
// when the buckets' remainders add up to less than d), stages ordered island by island and, inside
// an island, by `type_order` (device type indices; types absent from it come last); with an empty
// type_order the buckets keep the order they are given in. Empty when some pipeline gets no unit.
Layout BalancedLayout(const std::vector<Unit>& units, const std::vector<Bucket>& buckets, int d,
                      Placement placement, const std::vector<int>& type_order);

// Segregated formation: the buckets are grouped by `key` (0: device type, 1: island) and each group
// forms its own balanced pipelines, group g getting d[g] of them (0 = group unused).
Layout SegregatedLayout(const std::vector<Unit>& units, const std::vector<Bucket>& buckets,
                        int key, const std::vector<int>& groups_d, Placement placement,
                        const std::vector<int>& type_order, std::vector<int>* group_keys);

// The distinct group keys of SegregatedLayout for `key` (type or island indices in order).
std::vector<int> SegregationKeys(const std::vector<Bucket>& buckets, int key);

}  // namespace motley::plan
