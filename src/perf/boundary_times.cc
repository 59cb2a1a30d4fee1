// Predictor::SolveBoundaryTimes: how long each pipeline message takes over the shared network
// (perf/network.h), in closed form.
//
// Every TP rank of a receiving stage takes the whole message from its boundary peer
// (spec::BoundaryPeer), so a boundary's transfer is one flow per receiving TP rank; replicas run
// in lockstep, so the flows of one direction start together. First, each direction's flows share
// the network at once (one max-min solve, FairShare). With the plan's stage costs, that is then
// refined by when transfers actually overlap: every pipeline's action list is walked with the
// current transfer times (perf/step_model.h PipelinePhaseEnds, which records when each transfer
// occupies its link), and for every pair of boundary directions whose flows cross a common
// resource, the fraction of the one's busy time during which the other is busy is measured. A
// flow's rate at a resource is then the time average of its equal share while the others come
// and go with those fractions (MeanShare), capped by its link; twice, each round walking with the
// previous round's times. The walk decides, for instance, that
// a stage's activations (sent after a forward) and its gradients (sent after a backward) do not
// meet on its node's card while the backward outlasts the activation's transfer, and that the
// last stage of one pipeline and the first of the next, sharing a node, collide every cycle.
// Pipelines are walked from one origin, so lockstep replicas meet fully.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory_resource>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/check.h"
#include "perf/network.h"
#include "perf/predictor.h"
#include "perf/step_model.h"
#include "spec/plan_topology.h"

namespace motley::perf {
namespace {

// One boundary direction's transfers in one walk: (start, arrival) of each, disjoint, sorted by
// start.
using BusyList = std::span<const TransferBusy>;

// Total length of the intersection of two lists of disjoint intervals, each sorted by start.
Seconds OverlapLength(BusyList a, BusyList b) {
  Seconds total = 0;
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() && j < b.size()) {
    const Seconds lo = std::max(a[i].first, b[j].first);
    const Seconds hi = std::min(a[i].second, b[j].second);
    if (hi > lo) total += hi - lo;
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

// The time-average share of a resource one of `own` flows gets while other groups come and go:
// group g, with flows_g flows, is present a fraction p_g of the time, independently of the
// others, and while present every flow on the resource gets an equal share, so the share is
// E[1 / (own + S)], S = sum_g flows_g B_g with B_g ~ Bernoulli(p_g) (a transfer moving at a rate
// that varies over its time moves bytes at the rate's time average). S's distribution is built
// group by group over its integer values, exactly, in `dist` (scratch, reused across calls so the
// many calls of one solve allocate nothing): dist[s] is the probability that the groups so far
// add s flows, updated in place from the top, dist'[s] = (1 - p) dist[s] + p dist[s - flows].
double MeanShare(int own, const std::vector<std::pair<double, int>>& others,
                 std::vector<double>* dist) {
  size_t total = 1;
  for (const auto& other : others) total += static_cast<size_t>(other.second);
  std::vector<double>& d = *dist;
  d.assign(total, 0.0);
  d[0] = 1.0;
  size_t size = 1;  // the values S can take so far: 0 .. size - 1
  for (const auto& [p, flows] : others) {
    const auto f = static_cast<size_t>(flows);
    for (size_t s = size + f; s-- > 0;) {
      const bool stays = s < size;                // the group absent: S keeps s
      const bool comes = s >= f && s - f < size;  // the group present: S was s - f
      if (stays && comes) {
        d[s] = (1 - p) * d[s] + p * d[s - f];
      } else if (stays) {
        d[s] = (1 - p) * d[s];
      } else if (comes) {
        d[s] = p * d[s - f];
      } else {
        d[s] = 0.0;  // no way to reach s yet
      }
    }
    size += f;
  }
  double mean = 0;
  for (size_t s = 0; s < size; ++s) mean += d[s] / static_cast<double>(own + static_cast<int>(s));
  return mean;
}

}  // namespace

Predictor::BoundaryTimes Predictor::SolveBoundaryTimes(
    const spec::Plan& plan, const LinkRates& links,
    const std::vector<std::vector<StageCost>>* costs) const {
  BoundaryTimes out;
  const size_t np = plan.pipelines.size();
  out.fwd_s.resize(np);
  out.bwd_s.resize(np);
  out.fwd_floor_s.resize(np);
  out.bwd_floor_s.resize(np);
  // Every flow, and the boundary direction (group) it belongs to.
  struct Group {
    size_t pipeline = 0;
    size_t boundary = 0;
    int dir = 0;  // 0: activations i -> i + 1; 1: gradients i + 1 -> i
    size_t flows = 0;  // how many of `paths` (consecutive) are this group's
  };
  std::vector<Group> groups;
  std::vector<FlowPath> paths;
  std::vector<size_t> group_of;
  for (int dir = 0; dir < 2; ++dir) {
    for (size_t k = 0; k < np; ++k) {
      const spec::PipelinePlan& pipe = plan.pipelines[k];
      const size_t boundaries = pipe.stages.empty() ? 0 : pipe.stages.size() - 1;
      (dir == 0 ? out.fwd_s : out.bwd_s)[k].assign(boundaries, 0.0);
      (dir == 0 ? out.fwd_floor_s : out.bwd_floor_s)[k].assign(boundaries, 0.0);
      for (size_t i = 0; i < boundaries; ++i) {
        const spec::StagePlan& from = pipe.stages[dir == 0 ? i : i + 1];
        const spec::StagePlan& to = pipe.stages[dir == 0 ? i + 1 : i];
        if (from.devices.front() == to.devices.front()) continue;
        Group g{k, i, dir, 0};
        for (size_t j = 0; j < to.devices.size(); ++j) {
          const int peer = spec::BoundaryPeer(static_cast<int>(j), from.tp_degree);
          const int a = from.devices[static_cast<size_t>(peer)];
          const int b = to.devices[j];
          if (a == b) continue;
          ++g.flows;
          paths.push_back(PathOf(a, b, links));
          group_of.push_back(groups.size());
        }
        if (g.flows > 0) groups.push_back(g);
      }
    }
  }
  auto time_of = [&](const Group& g) -> Seconds& {
    return (g.dir == 0 ? out.fwd_s : out.bwd_s)[g.pipeline][g.boundary];
  };
  auto bytes_of = [&](const Group& g) {
    return ActivationMessageBytes(plan.pipelines[g.pipeline].micro_batch_size);
  };
  // Each flow alone: max-min sharing gives no flow more than its cap or a resource's capacity.
  for (size_t f = 0; f < paths.size(); ++f) {
    const Group& g = groups[group_of[f]];
    BytesPerSecond rate = paths[f].cap;
    for (int i = 0; i < paths[f].num_resources; ++i) {
      rate = std::min(
          rate,
          network_.capacities()[static_cast<size_t>(paths[f].resources[static_cast<size_t>(i)])]);
    }
    Seconds& floor = (g.dir == 0 ? out.fwd_floor_s : out.bwd_floor_s)[g.pipeline][g.boundary];
    floor = std::max(floor, paths[f].latency_s + bytes_of(g) / rate);
  }
  // Each direction's flows at once.
  for (int dir = 0; dir < 2; ++dir) {
    std::vector<FlowPath> ps;
    std::vector<size_t> ids;
    for (size_t f = 0; f < paths.size(); ++f) {
      if (groups[group_of[f]].dir != dir) continue;
      ps.push_back(paths[f]);
      ids.push_back(f);
    }
    const std::vector<BytesPerSecond> rates = FairShare(ps, network_.capacities());
    for (size_t i = 0; i < ids.size(); ++i) {
      const Group& g = groups[group_of[ids[i]]];
      time_of(g) = std::max(time_of(g), ps[i].latency_s + bytes_of(g) / rates[i]);
    }
  }
  if (costs == nullptr || !network_.shared() || paths.empty()) return out;

  // The memos below take their nodes from one arena, freed at once (a solve makes thousands).
  std::pmr::monotonic_buffer_resource arena;
  // Per resource crossed: the groups whose flows cross it, in group order, with how many of
  // their flows do. Sorted (resource, group) pairs counted in runs: resource_first[i] is where
  // the i-th resource's (in resources) groups start in at_resource.
  std::vector<std::pair<int, int>> crossings;  // (resource, group)
  for (size_t f = 0; f < paths.size(); ++f) {
    for (int i = 0; i < paths[f].num_resources; ++i) {
      crossings.emplace_back(paths[f].resources[static_cast<size_t>(i)],
                             static_cast<int>(group_of[f]));
    }
  }
  std::sort(crossings.begin(), crossings.end());
  std::vector<int> resources;                       // distinct, ascending
  std::vector<size_t> resource_first;               // per resource, then the end
  std::vector<std::pair<size_t, int>> at_resource;  // (group, flows)
  for (size_t c = 0; c < crossings.size(); ++c) {
    const auto [r, g] = crossings[c];
    if (resources.empty() || resources.back() != r) {
      resources.push_back(r);
      resource_first.push_back(at_resource.size());
    }
    if (c > 0 && crossings[c - 1] == crossings[c]) {
      ++at_resource.back().second;
    } else {
      at_resource.emplace_back(static_cast<size_t>(g), 1);
    }
  }
  resource_first.push_back(at_resource.size());
  auto groups_at = [&](int r) {  // r is crossed by some flow
    const size_t i = static_cast<size_t>(std::lower_bound(resources.begin(), resources.end(), r) -
                                         resources.begin());
    return std::span<const std::pair<size_t, int>>(at_resource.data() + resource_first[i],
                                                   resource_first[i + 1] - resource_first[i]);
  };
  std::vector<double> walk_key;  // a pipeline's key in walk_index (scratch)
  // A round's busy lists, one per (distinct walk, boundary, direction), stored end to end in
  // busy_flat, each of its walk's m entries in PipelinePhaseEnds's order (TransferIndex): list l
  // is busy_flat[list_start[l], list_start[l + 1]). Kept across rounds, so a solve allocates
  // them about once.
  std::vector<TransferBusy> busy_flat;
  std::vector<size_t> list_start;
  std::vector<size_t> walk_first_list;  // per distinct walk: its first list's index
  constexpr int kRounds = 2;
  for (int round = 0; round < kRounds; ++round) {
    // When each group's transfers occupy their link, from a walk of its pipeline. Identical
    // pipelines (lockstep replicas) are walked once and share their groups' busy lists.
    std::map<std::vector<double>, size_t> walk_index;
    std::vector<size_t> walk_of(np, 0);
    busy_flat.clear();
    list_start.assign(1, 0);
    walk_first_list.clear();
    for (size_t k = 0; k < np; ++k) {
      const spec::PipelinePlan& pipe = plan.pipelines[k];
      walk_key.clear();
      walk_key.push_back(static_cast<double>(pipe.micro_batches));
      walk_key.push_back(static_cast<double>(pipe.chunks));
      for (const StageCost& c : (*costs)[k]) {
        walk_key.push_back(c.forward_s);
        walk_key.push_back(c.backward_s);
      }
      walk_key.insert(walk_key.end(), out.fwd_s[k].begin(), out.fwd_s[k].end());
      walk_key.insert(walk_key.end(), out.bwd_s[k].begin(), out.bwd_s[k].end());
      if (auto it = walk_index.find(walk_key); it != walk_index.end()) {
        walk_of[k] = it->second;
        continue;
      }
      walk_of[k] = walk_first_list.size();
      walk_index.emplace(walk_key, walk_first_list.size());
      std::vector<Seconds> f;
      std::vector<Seconds> b;
      f.reserve((*costs)[k].size());
      b.reserve((*costs)[k].size());
      for (const StageCost& c : (*costs)[k]) {
        f.push_back(c.forward_s);
        b.push_back(c.backward_s);
      }
      // The walk writes its lists in place, each sorted by start (step_model.h TransferIndex).
      const size_t lists = 2 * (pipe.stages.empty() ? 0 : pipe.stages.size() - 1);
      const auto m = static_cast<size_t>(pipe.micro_batches);
      const size_t first = list_start.size() - 1;
      const size_t base = busy_flat.size();
      walk_first_list.push_back(first);
      for (size_t l = 1; l <= lists; ++l) list_start.push_back(base + l * m);
      busy_flat.resize(base + lists * m);
      PipelinePhaseEnds(f, b, std::vector<Seconds>(static_cast<size_t>(pipe.num_stages()), 0.0),
                        out.fwd_s[k], out.bwd_s[k], pipe.micro_batches, plan.schedule,
                        std::span<TransferBusy>(busy_flat.data() + base, lists * m), pipe.chunks);
    }
    // A list's identity (for the memos below) is its index.
    auto list_of = [&](size_t g) {
      return walk_first_list[walk_of[groups[g].pipeline]] + groups[g].boundary * 2 +
             static_cast<size_t>(groups[g].dir);
    };
    auto busy = [&](size_t l) {
      return BusyList(busy_flat.data() + list_start[l], list_start[l + 1] - list_start[l]);
    };
    // Busy time per distinct list, and the fraction of x's busy time during which y is busy,
    // per pair of distinct lists met at a resource.
    std::vector<Seconds> busy_total(list_start.size() - 1, -1.0);  // -1: not yet summed
    auto total = [&](size_t l) {
      Seconds& sum = busy_total[l];
      if (sum < 0) {
        sum = 0.0;
        for (const auto& [lo, hi] : busy(l)) sum += hi - lo;
      }
      return sum;
    };
    // Keyed by (lx << 32) | ly.
    MOTLEY_CHECK(list_start.size() <= UINT32_MAX && groups.size() <= UINT32_MAX,
                 "boundary solve: too many lists or groups for its memo keys");
    std::pmr::unordered_map<uint64_t, double> presence(&arena);
    auto fraction = [&](size_t x, size_t y) {
      if (x == y) return 1.0;
      const size_t lx = list_of(x);
      const size_t ly = list_of(y);
      auto [it, fresh] = presence.emplace((static_cast<uint64_t>(lx) << 32) | ly, 0.0);
      if (fresh && total(lx) > 0) {
        it->second = std::min(1.0, OverlapLength(busy(lx), busy(ly)) / total(lx));
      }
      return it->second;
    };
    // x's share of resource r, the same for all of x's flows there.
    // Keyed by (x << 32) | r.
    std::pmr::unordered_map<uint64_t, double> share_at(&arena);
    std::vector<std::pair<double, int>> others;  // share's scratch: (presence, flows)
    std::vector<double> dist;                    // MeanShare's scratch
    auto share = [&](size_t x, int r) {
      auto [it, fresh] =
          share_at.emplace((static_cast<uint64_t>(x) << 32) | static_cast<uint32_t>(r), 0.0);
      if (!fresh) return it->second;
      // The other groups at r, each present a fraction of x's busy time, independently.
      int own = 0;
      others.clear();
      for (const auto& [y, count] : groups_at(r)) {
        if (y == x) {
          own = count;
        } else if (const double p = fraction(x, y); p > 0) {
          others.emplace_back(p, count);
        }
      }
      it->second = MeanShare(own, others, &dist);
      return it->second;
    };
    std::vector<Seconds> next(groups.size(), 0.0);
    for (size_t f = 0; f < paths.size(); ++f) {
      const size_t x = group_of[f];
      BytesPerSecond rate = paths[f].cap;
      for (int i = 0; i < paths[f].num_resources; ++i) {
        const int r = paths[f].resources[static_cast<size_t>(i)];
        rate = std::min(rate, network_.capacities()[static_cast<size_t>(r)] * share(x, r));
      }
      next[x] = std::max(next[x], paths[f].latency_s + bytes_of(groups[x]) / rate);
    }
    for (size_t gi = 0; gi < groups.size(); ++gi) time_of(groups[gi]) = next[gi];
  }
  return out;
}

}  // namespace motley::perf
