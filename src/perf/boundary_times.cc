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
#include <map>
#include <vector>

#include "perf/network.h"
#include "perf/predictor.h"
#include "perf/step_model.h"
#include "spec/plan_topology.h"

namespace motley::perf {
namespace {

// Total length of the intersection of two lists of disjoint intervals, each sorted by start.
Seconds OverlapLength(const std::vector<std::pair<Seconds, Seconds>>& a,
                      const std::vector<std::pair<Seconds, Seconds>>& b) {
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
// E[1 / (own + sum_g flows_g B_g)] with B_g ~ Bernoulli(p_g) (a transfer moving at a rate that
// varies over its time moves bytes at the rate's time average). Exact over every combination
// of up to 12 groups; beyond, the mean field 1 / (own + sum_g p_g flows_g).
double MeanShare(int own, const std::vector<std::pair<double, int>>& others) {
  if (others.size() > 12) {
    double sharers = own;
    for (const auto& [p, flows] : others) sharers += p * flows;
    return 1.0 / sharers;
  }
  double mean = 0;
  const size_t combos = size_t{1} << others.size();
  for (size_t mask = 0; mask < combos; ++mask) {
    double probability = 1;
    int sharers = own;
    for (size_t g = 0; g < others.size(); ++g) {
      const bool present = (mask >> g & 1U) != 0;
      probability *= present ? others[g].first : 1 - others[g].first;
      if (present) sharers += others[g].second;
    }
    mean += probability / sharers;
  }
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
  // Every flow, and the boundary direction (group) it belongs to.
  struct Group {
    size_t pipeline = 0;
    size_t boundary = 0;
    int dir = 0;  // 0: activations i -> i + 1; 1: gradients i + 1 -> i
    std::vector<size_t> flows;
  };
  std::vector<Group> groups;
  std::vector<FlowPath> paths;
  std::vector<size_t> group_of;
  for (int dir = 0; dir < 2; ++dir) {
    for (size_t k = 0; k < np; ++k) {
      const spec::PipelinePlan& pipe = plan.pipelines[k];
      const size_t boundaries = pipe.stages.empty() ? 0 : pipe.stages.size() - 1;
      (dir == 0 ? out.fwd_s : out.bwd_s)[k].assign(boundaries, 0.0);
      for (size_t i = 0; i < boundaries; ++i) {
        const spec::StagePlan& from = pipe.stages[dir == 0 ? i : i + 1];
        const spec::StagePlan& to = pipe.stages[dir == 0 ? i + 1 : i];
        if (from.devices.front() == to.devices.front()) continue;
        Group g{k, i, dir, {}};
        for (size_t j = 0; j < to.devices.size(); ++j) {
          const int peer = spec::BoundaryPeer(static_cast<int>(j), from.tp_degree);
          const int a = from.devices[static_cast<size_t>(peer)];
          const int b = to.devices[j];
          if (a == b) continue;
          g.flows.push_back(paths.size());
          paths.push_back(PathOf(a, b, links));
          group_of.push_back(groups.size());
        }
        if (!g.flows.empty()) groups.push_back(std::move(g));
      }
    }
  }
  auto time_of = [&](const Group& g) -> Seconds& {
    return (g.dir == 0 ? out.fwd_s : out.bwd_s)[g.pipeline][g.boundary];
  };
  auto bytes_of = [&](const Group& g) {
    return ActivationMessageBytes(plan.pipelines[g.pipeline].micro_batch_size);
  };
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

  // Per resource: the groups whose flows cross it, with how many of their flows do.
  std::map<int, std::map<size_t, int>> at_resource;
  for (size_t f = 0; f < paths.size(); ++f) {
    for (int i = 0; i < paths[f].num_resources; ++i) {
      ++at_resource[paths[f].resources[static_cast<size_t>(i)]][group_of[f]];
    }
  }
  std::map<std::pair<size_t, int>, size_t> group_index;  // (pipeline, boundary * 2 + dir)
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    group_index[{groups[gi].pipeline, static_cast<int>(groups[gi].boundary) * 2 + groups[gi].dir}] =
        gi;
  }
  constexpr int kRounds = 2;
  for (int round = 0; round < kRounds; ++round) {
    // When each group's transfers occupy their link, from a walk of its pipeline (identical
    // pipelines walked once).
    std::vector<std::vector<std::pair<Seconds, Seconds>>> busy(groups.size());
    std::map<std::vector<double>, std::vector<TransferSpan>> walks;
    for (size_t k = 0; k < np; ++k) {
      const spec::PipelinePlan& pipe = plan.pipelines[k];
      std::vector<Seconds> f;
      std::vector<Seconds> b;
      std::vector<double> key = {static_cast<double>(pipe.micro_batches)};
      for (const StageCost& c : (*costs)[k]) {
        f.push_back(c.forward_s);
        b.push_back(c.backward_s);
        key.push_back(c.forward_s);
        key.push_back(c.backward_s);
      }
      key.insert(key.end(), out.fwd_s[k].begin(), out.fwd_s[k].end());
      key.insert(key.end(), out.bwd_s[k].begin(), out.bwd_s[k].end());
      auto [it, fresh] = walks.emplace(std::move(key), std::vector<TransferSpan>{});
      if (fresh) {
        PipelinePhaseEnds(f, b, std::vector<Seconds>(pipe.stages.size(), 0.0), out.fwd_s[k],
                          out.bwd_s[k], pipe.micro_batches, plan.schedule, &it->second);
        std::sort(
            it->second.begin(), it->second.end(),
            [](const TransferSpan& x, const TransferSpan& y) { return x.start_s < y.start_s; });
      }
      for (const TransferSpan& t : it->second) {
        auto g = group_index.find({k, t.boundary * 2 + t.dir});
        if (g != group_index.end()) busy[g->second].emplace_back(t.start_s, t.end_s);
      }
    }
    std::vector<Seconds> busy_total(groups.size(), 0.0);
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      for (const auto& [lo, hi] : busy[gi]) busy_total[gi] += hi - lo;
    }
    // The fraction of x's busy time during which y is busy, per pair met at a resource.
    std::map<std::pair<size_t, size_t>, double> presence;
    auto fraction = [&](size_t x, size_t y) {
      if (x == y) return 1.0;
      auto [it, fresh] = presence.emplace(std::make_pair(x, y), 0.0);
      if (fresh && busy_total[x] > 0) {
        it->second = std::min(1.0, OverlapLength(busy[x], busy[y]) / busy_total[x]);
      }
      return it->second;
    };
    std::vector<Seconds> next(groups.size(), 0.0);
    for (size_t f = 0; f < paths.size(); ++f) {
      const size_t x = group_of[f];
      BytesPerSecond rate = paths[f].cap;
      for (int i = 0; i < paths[f].num_resources; ++i) {
        const int r = paths[f].resources[static_cast<size_t>(i)];
        // The other groups at r, each present a fraction of x's busy time, independently.
        int own = 0;
        std::vector<std::pair<double, int>> others;  // (presence, flows)
        for (const auto& [y, count] : at_resource[r]) {
          if (y == x) {
            own = count;
          } else if (const double p = fraction(x, y); p > 0) {
            others.emplace_back(p, count);
          }
        }
        rate =
            std::min(rate, network_.capacities()[static_cast<size_t>(r)] * MeanShare(own, others));
      }
      next[x] = std::max(next[x], paths[f].latency_s + bytes_of(groups[x]) / rate);
    }
    for (size_t gi = 0; gi < groups.size(); ++gi) time_of(groups[gi]) = next[gi];
  }
  return out;
}

}  // namespace motley::perf
