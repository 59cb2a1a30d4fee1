// See units.h.
#include "plan/units.h"

#include <algorithm>
#include <map>

#include "core/check.h"

namespace motley::plan {

std::vector<Unit> BuildUnits(const spec::ClusterSpec& cluster, const TpAssignment& tp) {
  std::vector<Unit> units;
  int first = 0;
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    const spec::NodeSpec& node = cluster.nodes[n];
    const int count = node.device_count;
    if (count > 0) {
      const spec::DeviceInfo& info = cluster.device(first);
      const int t = tp[static_cast<size_t>(info.type)];
      if (t > 0) {
        for (int start = 0; start + t <= count; start += t) {
          Unit u;
          u.type = info.type;
          u.node = static_cast<int>(n);
          u.island = info.island;
          u.tp = t;
          for (int k = 0; k < t; ++k) u.devices.push_back(first + start + k);
          units.push_back(std::move(u));
        }
      }
    }
    first += count;
  }
  return units;
}

std::vector<Bucket> BucketUnits(const std::vector<Unit>& units) {
  std::map<std::pair<int, int>, std::vector<int>> by_key;
  for (size_t i = 0; i < units.size(); ++i) {
    by_key[{units[i].island, units[i].type}].push_back(static_cast<int>(i));
  }
  std::vector<Bucket> buckets;
  for (auto& [key, list] : by_key) buckets.push_back(Bucket{key.first, key.second, std::move(list)});
  return buckets;
}

namespace {

int Rank(const std::vector<int>& order, int type) {
  const auto it = std::find(order.begin(), order.end(), type);
  return it == order.end() ? static_cast<int>(order.size()) + type
                           : static_cast<int>(it - order.begin());
}

// Balanced formation over a subset of buckets, appended to `out`.
bool AppendBalanced(const std::vector<Unit>& units, std::vector<const Bucket*> buckets, int d,
                    Placement placement, const std::vector<int>& type_order, Layout* out) {
  if (d < 1) return true;
  if (!type_order.empty()) std::stable_sort(buckets.begin(), buckets.end(), [&](const Bucket* a, const Bucket* b) {
    if (a->island != b->island) return a->island < b->island;
    return Rank(type_order, a->type) < Rank(type_order, b->type);
  });
  Layout pipes(static_cast<size_t>(d));
  // The remainders rotate: bucket by bucket, the pipelines that take one unit more continue
  // where the previous bucket's left off, so stage counts differ by at most one overall (the
  // uniform shape when the units divide evenly) rather than the first pipelines taking every
  // bucket's extra unit.
  int offset = 0;
  for (const Bucket* bucket : buckets) {
    const int u = static_cast<int>(bucket->units.size());
    const int q = u / d;
    const int r = u % d;
    int pos = 0;
    for (int k = 0; k < d; ++k) {
      const int extra_rank = ((k - offset) % d + d) % d;  // < r: pipeline k takes one more
      const int take = q + (extra_rank < r ? 1 : 0);
      for (int j = 0; j < take; ++j) {
        int idx = 0;
        if (placement == Placement::kContiguous) {
          idx = pos++;
        } else {
          // Strided: unit j of pipeline k is unit k of round j (rounds are d wide); the
          // pipelines taking one more share the last, partial round in rotated order.
          idx = j < q ? j * d + k : q * d + extra_rank;
        }
        pipes[static_cast<size_t>(k)].push_back(bucket->units[static_cast<size_t>(idx)]);
      }
    }
    offset = (offset + r) % d;
  }
  for (auto& p : pipes) {
    if (p.empty()) return false;
    out->push_back(std::move(p));
  }
  (void)units;
  return true;
}

}  // namespace

Layout BalancedLayout(const std::vector<Unit>& units, const std::vector<Bucket>& buckets, int d,
                      Placement placement, const std::vector<int>& type_order) {
  std::vector<const Bucket*> all;
  for (const Bucket& b : buckets) all.push_back(&b);
  Layout out;
  if (!AppendBalanced(units, all, d, placement, type_order, &out)) return {};
  return out;
}

std::vector<int> SegregationKeys(const std::vector<Bucket>& buckets, int key) {
  std::vector<int> keys;
  for (const Bucket& b : buckets) keys.push_back(key == 0 ? b.type : b.island);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

Layout SegregatedLayout(const std::vector<Unit>& units, const std::vector<Bucket>& buckets,
                        int key, const std::vector<int>& groups_d, Placement placement,
                        const std::vector<int>& type_order, std::vector<int>* group_keys) {
  const std::vector<int> keys = SegregationKeys(buckets, key);
  MOTLEY_CHECK(groups_d.size() == keys.size(), "one pipeline count per group");
  if (group_keys != nullptr) *group_keys = keys;
  Layout out;
  for (size_t g = 0; g < keys.size(); ++g) {
    std::vector<const Bucket*> members;
    for (const Bucket& b : buckets) {
      if ((key == 0 ? b.type : b.island) == keys[g]) members.push_back(&b);
    }
    if (!AppendBalanced(units, members, groups_d[g], placement, type_order, &out)) return {};
  }
  return out;
}

}  // namespace motley::plan
