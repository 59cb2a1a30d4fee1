// Predictor::Predict: one steady-state training step as motley's runtime runs it on every rank
// (parallel/parallel_rank.cc, train/parallel_trainer.cc), rank by rank:
//   start (skewed by the previous step's metrics all-gather) -> zero the gradients -> the
//   pipeline phase (each stage's action list, eager sends; a TP group moves in lockstep from its
//   latest rank's start) -> per-layer data-parallel all-reduces in layer order (embedding,
//   blocks, head), each staged through host memory -> the gradient-norm pass (pipeline 0) -> the
//   world all-reduce of loss and norm -> the optimizer step -> the metrics all-gather and the
//   plan-switch agreement (a chain broadcast of one length from rank 0) before the next step.
// Collectives are rings in rank order (perf/step_model.h) with ring_collectives, else the best of
// ring and hierarchy entered by the group's latest member. The step time is the makespan: the
// latest rank's end minus the earliest rank's start. Two passes: the first, with all ranks
// starting together, gives each rank's end and so the skew the metrics all-gather leaves; the
// second is the steady-state step.
#include <algorithm>
#include <map>
#include <tuple>


#include "perf/comm_model.h"
#include "perf/predictor.h"
#include "perf/step_model.h"
#include "sched/step_messages.h"
#include "spec/plan_topology.h"

namespace motley::perf {
namespace {

// The step's small messages (sched/step_messages.h), f64 each.
constexpr double kLossNormDoubles = static_cast<double>(sched::kLossNormDoubles);
constexpr double kMetricsDoubles = static_cast<double>(sched::kStepMetricsDoubles);
constexpr double kPlanAgreementBytes = 8.0 * static_cast<double>(sched::kPlanAgreementDoubles);

struct Rank {
  int device = 0;
  int pipeline = 0;
  int stage = 0;
  int tp_rank = 0;
  int type = 0;
  double rate = 1;
  double params = 0;       // local parameters
  double norm_params = 0;  // parameters it counts for the gradient norm
};

// One data-parallel all-reduce of one layer over a group of ranks.
struct DpGroup {
  int64_t layer = 0;       // gradient layer (spec/plan_topology.h)
  std::vector<int> ranks;  // world ranks, ascending (the communicator's order)
  std::vector<Hop> hops;   // ring hops in that order
  int64_t numel = 0;       // elements per rank
  std::vector<double> staging_s;  // per member: pack + unpack
  // By node: the layer's groups crossing that node's NICs at once, this one included
  // (comm_model.h NicSharing), interned: index into the step's distinct sharer lists.
  int nic_sharers = 0;
};

// Parameters of gradient layer `id` on a TP rank of degree tp (spec::LayerParamsPerTpRank).
double LayerParams(const spec::ModelSpec& m, int64_t id, int tp, bool sharded_only) {
  const spec::LayerParams p = spec::LayerParamsPerTpRank(m, id, tp);
  return static_cast<double>(sharded_only ? p.sharded : p.total());
}

}  // namespace

Predictor::BoundaryLinks Predictor::PipelineLinks(const spec::PipelinePlan& pipe,
                                                  const NicSharers& sharers,
                                                  const LinkRates& link_rates) const {
  BoundaryLinks links;
  for (size_t i = 0; i + 1 < pipe.stages.size(); ++i) {
    const auto na = static_cast<size_t>(cluster_.device(pipe.stages[i].devices.front()).node);
    const auto nb = static_cast<size_t>(cluster_.device(pipe.stages[i + 1].devices.front()).node);
    links.fwd_s.push_back(P2PTimeBetween(pipe.stages[i], pipe.stages[i + 1], pipe.micro_batch_size,
                                         sharers.egress[na], sharers.ingress[nb], link_rates));
    links.bwd_s.push_back(P2PTimeBetween(pipe.stages[i], pipe.stages[i + 1], pipe.micro_batch_size,
                                         sharers.ingress[nb], sharers.egress[na], link_rates));
  }
  return links;
}

Prediction Predictor::Predict(const spec::Plan& plan, const StragglerRates& rates,
                              const LinkRates& links) const {
  return PredictWith(plan, rates, {}, links);
}

Prediction Predictor::PredictWith(const spec::Plan& plan, const StragglerRates& rates,
                                  const PipelinePhase& phase, const LinkRates& link_rates) const {
  Prediction pred;
  const size_t np = plan.pipelines.size();
  const int64_t L = model_.num_blocks;
  pred.stages.resize(np);
  pred.pipeline_time_s.resize(np);
  pred.peak_memory_per_type.assign(cluster_.device_types.size(), 0.0);
  const DpGroups dp = ComputeDpGroups(plan, link_rates);
  const NicSharers sharers = CountNicSharers(plan);
  const bool zero = plan.optimizer_sharding == spec::OptimizerSharding::kZero1;

  // World ranks in the runtime's rank order (spec::PlanDevices).
  std::map<int, Rank> rank_at_device;
  for (size_t k = 0; k < np; ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    for (size_t i = 0; i < pipe.stages.size(); ++i) {
      const spec::StagePlan& st = pipe.stages[i];
      double params = 0;
      double norm_first = 0;   // TP rank 0 counts every local parameter for the norm
      double norm_others = 0;  // other TP ranks only their shards
      for (int64_t id = 0; id <= L + 1; ++id) {
        if (!spec::StageHoldsLayer(st, id, L)) continue;
        params += LayerParams(model_, id, st.tp_degree, false);
        norm_first += LayerParams(model_, id, st.tp_degree, false);
        norm_others += LayerParams(model_, id, st.tp_degree, true);
      }
      const double rate = GroupRate(rates, st.devices);
      for (size_t j = 0; j < st.devices.size(); ++j) {
        Rank r;
        r.device = st.devices[j];
        r.pipeline = static_cast<int>(k);
        r.stage = static_cast<int>(i);
        r.tp_rank = static_cast<int>(j);
        r.type = cluster_.device(r.device).type;
        r.rate = rate;
        r.params = params;
        if (k == 0) r.norm_params = j > 0 ? norm_others : norm_first;
        rank_at_device[r.device] = r;
      }
    }
  }
  std::vector<Rank> ranks;
  for (int device : spec::PlanDevices(plan)) ranks.push_back(rank_at_device.at(device));
  const size_t n = ranks.size();
  std::map<int, int> rank_of_device;
  for (size_t r = 0; r < n; ++r) rank_of_device[ranks[r].device] = static_cast<int>(r);
  auto ring_hops = [&](const std::vector<int>& members) {
    std::vector<Hop> hops;
    if (members.size() < 2) return std::vector<Hop>(members.size());
    for (size_t q = 0; q < members.size(); ++q) {
      const int a = ranks[static_cast<size_t>(members[q])].device;
      const int b = ranks[static_cast<size_t>(members[(q + 1) % members.size()])].device;
      const spec::LinkClass link = LinkOf(a, b, link_rates);
      hops.push_back(Hop{link.latency_s, link.EffectiveBandwidth()});
    }
    return hops;
  };
  std::vector<int> world(n);
  for (size_t r = 0; r < n; ++r) world[r] = static_cast<int>(r);
  const std::vector<Hop> world_hops = ring_hops(world);
  // When each directed device link is free of earlier transfers: the runtime's links queue
  // across operations (a ring's last sends can still occupy a slow link when the next starts).
  std::map<std::pair<int, int>, Seconds> link_free;
  // Worlds above exact_ring_max_ranks: every collective takes the bound (no per-rank skew), links
  // are not tracked across operations, and one pass is the steady step.
  const bool exact = static_cast<int>(n) <= settings_.exact_ring_max_ranks;
  auto load_free = [&](const std::vector<int>& members) {
    std::vector<Seconds> free(members.size(), -1e300);
    for (size_t q = 0; q < members.size() && members.size() > 1; ++q) {
      auto it = link_free.find({ranks[static_cast<size_t>(members[q])].device,
                                ranks[static_cast<size_t>(members[(q + 1) % members.size()])].device});
      if (it != link_free.end()) free[q] = it->second;
    }
    return free;
  };
  auto store_free = [&](const std::vector<int>& members, const std::vector<Seconds>& free) {
    for (size_t q = 0; q < members.size() && members.size() > 1; ++q) {
      link_free[{ranks[static_cast<size_t>(members[q])].device,
                 ranks[static_cast<size_t>(members[(q + 1) % members.size()])].device}] = free[q];
    }
  };
  // GroupAllReduceTime by (devices, bytes, NIC sharers).
  std::map<std::tuple<std::vector<int>, double, int>, Seconds> best_cache;
  // Distinct per-node sharer lists of the step's collectives; 0 is the empty list (alone).
  std::vector<std::vector<int>> sharer_lists(1);
  std::map<std::vector<int>, int> sharer_index;
  sharer_index[{}] = 0;
  // A collective over `members` entered at `entries`: per-member exits. `nic_sharers`: the
  // collectives crossing each node's NICs at the same time (an index into sharer_lists).
  auto collective = [&](const std::vector<int>& members, const std::vector<Hop>& hops,
                        const std::vector<Seconds>& entries, int steps, const RingChunkBytes& chunk,
                        Bytes total_bytes, bool all_reduce, int nic_sharers) {
    if ((settings_.ring_collectives || !all_reduce) && !exact) {
      return RingCollectiveExits(entries, hops, steps, chunk, /*exact_max_ranks=*/1);
    }
    if (settings_.ring_collectives || !all_reduce) {
      std::vector<Seconds> free = load_free(members);
      std::vector<Seconds> exits = RingCollectiveExits(entries, hops, steps, chunk,
                                                       settings_.exact_ring_max_ranks, &free);
      store_free(members, free);
      return exits;
    }
    std::vector<int> devices;
    for (int m : members) devices.push_back(ranks[static_cast<size_t>(m)].device);
    auto key = std::make_tuple(devices, total_bytes, nic_sharers);
    auto it = best_cache.find(key);
    if (it == best_cache.end()) {
      it = best_cache
               .emplace(key, AllReduceOver(devices, total_bytes, link_rates,
                                           sharer_lists[static_cast<size_t>(nic_sharers)]))
               .first;
    }
    const Seconds exit = *std::max_element(entries.begin(), entries.end()) + it->second;
    return std::vector<Seconds>(entries.size(), exit);
  };

  // Data-parallel groups per layer, in layer order (spec/plan_topology.h, as
  // parallel/grad_sync.cc runs them); a group of one member communicates nothing.
  const double grad_bytes = GradientElementBytes(settings_);
  std::vector<DpGroup> groups;
  for (const spec::LayerGroup& lg : spec::DataParallelGroups(plan, L)) {
    if (lg.devices.size() < 2) continue;
    DpGroup g;
    for (int device : lg.devices) g.ranks.push_back(rank_of_device[device]);
    g.layer = lg.layer;
    g.hops = ring_hops(g.ranks);
    g.numel = static_cast<int64_t>(LayerParams(model_, lg.layer, lg.tp_degree, false));
    for (int r : g.ranks) {
      const Rank& rk = ranks[static_cast<size_t>(r)];
      const spec::StagePlan& st =
          plan.pipelines[static_cast<size_t>(rk.pipeline)].stages[static_cast<size_t>(rk.stage)];
      g.staging_s.push_back(
          rk.rate * compute_.GradStaging(rk.type, LayerParams(model_, lg.layer, st.tp_degree, false)));
    }
    groups.push_back(std::move(g));
  }
  // A layer's groups (its TP colours) start together: those that span nodes share the NICs of
  // every node they touch.
  for (size_t first = 0; first < groups.size();) {
    size_t end = first;
    while (end < groups.size() && groups[end].layer == groups[first].layer) ++end;
    std::vector<int> crossing(cluster_.nodes.size(), 0);
    for (size_t i = first; i < end; ++i) {
      std::vector<int> nodes;
      for (int r : groups[i].ranks) {
        nodes.push_back(cluster_.device(ranks[static_cast<size_t>(r)].device).node);
      }
      std::sort(nodes.begin(), nodes.end());
      nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
      if (nodes.size() < 2) continue;
      for (int node : nodes) ++crossing[static_cast<size_t>(node)];
    }
    auto [it, fresh] = sharer_index.emplace(crossing, static_cast<int>(sharer_lists.size()));
    if (fresh) sharer_lists.push_back(crossing);
    for (size_t i = first; i < end; ++i) groups[i].nic_sharers = it->second;
    first = end;
  }

  // Stage costs and links.
  std::vector<std::vector<StageCost>> costs(np);
  std::vector<BoundaryLinks> links(np);
  for (size_t k = 0; k < np; ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    for (const spec::StagePlan& st : pipe.stages) {
      costs[k].push_back(StageCostOf(st, pipe.micro_batch_size, st.recompute, rates, link_rates));
    }
    links[k] = PipelineLinks(pipe, sharers, link_rates);
  }
  auto own_phase = [&](const std::vector<std::vector<Seconds>>& ready) {
    std::vector<std::vector<Seconds>> ends(np);
    std::map<std::vector<double>, std::vector<Seconds>> cache;  // identical pipelines
    for (size_t k = 0; k < np; ++k) {
      const spec::PipelinePlan& pipe = plan.pipelines[k];
      std::vector<Seconds> f, b;
      std::vector<double> key = {static_cast<double>(pipe.micro_batches)};
      for (const StageCost& c : costs[k]) {
        f.push_back(c.forward_s);
        b.push_back(c.backward_s);
        key.push_back(c.forward_s);
        key.push_back(c.backward_s);
      }
      key.insert(key.end(), ready[k].begin(), ready[k].end());
      key.insert(key.end(), links[k].fwd_s.begin(), links[k].fwd_s.end());
      key.insert(key.end(), links[k].bwd_s.begin(), links[k].bwd_s.end());
      auto it = cache.find(key);
      if (it == cache.end()) {
        it = cache.emplace(key, PipelinePhaseEnds(f, b, ready[k], links[k].fwd_s, links[k].bwd_s,
                                                  pipe.micro_batches, plan.schedule))
                 .first;
      }
      ends[k] = it->second;
    }
    return ends;
  };

  // One step from per-rank start times. Fills the per-stage fields of `pred` on the way.
  std::vector<Seconds> optimizer_s(n);
  auto step = [&](const std::vector<Seconds>& start) {
    std::vector<std::vector<Seconds>> ready(np);
    for (size_t k = 0; k < np; ++k) ready[k].assign(plan.pipelines[k].stages.size(), 0.0);
    for (size_t r = 0; r < n; ++r) {
      const Rank& rk = ranks[r];
      Seconds& rd = ready[static_cast<size_t>(rk.pipeline)][static_cast<size_t>(rk.stage)];
      rd = std::max(rd, start[r] + rk.rate * compute_.ZeroGrads(rk.type, rk.params));
    }
    const std::vector<std::vector<Seconds>> ends = phase ? phase(ready) : own_phase(ready);
    std::vector<Seconds> t(n);
    for (size_t r = 0; r < n; ++r) {
      t[r] = ends[static_cast<size_t>(ranks[r].pipeline)][static_cast<size_t>(ranks[r].stage)];
    }
    const std::vector<Seconds> pipeline_end = t;
    for (const DpGroup& g : groups) {
      std::vector<Seconds> entries;
      for (size_t q = 0; q < g.ranks.size(); ++q) {
        entries.push_back(t[static_cast<size_t>(g.ranks[q])] + 0.5 * g.staging_s[q]);
      }
      const int size = static_cast<int>(g.ranks.size());
      const std::vector<Seconds> exits =
          collective(g.ranks, g.hops, entries, 2 * (size - 1),
                     AllReduceChunks(g.numel, grad_bytes, size),
                     static_cast<double>(g.numel) * grad_bytes, true, g.nic_sharers);
      for (size_t q = 0; q < g.ranks.size(); ++q) {
        t[static_cast<size_t>(g.ranks[q])] = exits[q] + 0.5 * g.staging_s[q];
      }
    }
    const std::vector<Seconds> dp_end = t;
    for (size_t r = 0; r < n; ++r) {
      t[r] += ranks[r].rate * compute_.GradNorm(ranks[r].type, ranks[r].norm_params);
    }
    t = collective(world, world_hops, t, 2 * (static_cast<int>(n) - 1),
                   AllReduceChunks(static_cast<int64_t>(kLossNormDoubles), 8.0, static_cast<int>(n)),
                   8.0 * kLossNormDoubles, true, 0);
    for (size_t r = 0; r < n; ++r) {
      const Rank& rk = ranks[r];
      const int64_t group =
          dp.min_group_size[static_cast<size_t>(rk.pipeline)][static_cast<size_t>(rk.stage)];
      optimizer_s[r] =
          OptimizerTime(rk.type, zero ? rk.params / static_cast<double>(group) : rk.params, rk.rate);
      t[r] += optimizer_s[r];
    }
    // Per-stage fields (max over the stage's ranks).
    for (size_t k = 0; k < np; ++k) {
      pred.stages[k].assign(plan.pipelines[k].stages.size(), StagePrediction{});
    }
    for (size_t r = 0; r < n; ++r) {
      StagePrediction& sp =
          pred.stages[static_cast<size_t>(ranks[r].pipeline)][static_cast<size_t>(ranks[r].stage)];
      sp.last_backward_end_s = pipeline_end[r];
      sp.dp_start_s = pipeline_end[r];
      sp.dp_sync_s = std::max(sp.dp_sync_s, dp_end[r] - pipeline_end[r]);
      sp.optimizer_s = std::max(sp.optimizer_s, optimizer_s[r]);
      sp.finish_s = std::max(sp.finish_s, t[r]);
    }
    return t;
  };

  std::vector<Seconds> end = step(std::vector<Seconds>(n, 0.0));
  if (exact && n > 1) {
    const Bytes metrics_chunk = 8.0 * kMetricsDoubles;
    std::vector<Seconds> start =
        collective(world, world_hops, end, static_cast<int>(n) - 1,
                   [metrics_chunk](int, int) { return metrics_chunk; }, 0.0, false, 0);
    std::vector<Seconds> free = load_free(world);
    start = ChainBroadcastExits(start, world_hops, kPlanAgreementBytes, &free);
    store_free(world, free);
    const Seconds origin = *std::min_element(start.begin(), start.end());
    for (Seconds& s0 : start) s0 -= origin;
    for (auto& [link, t] : link_free) t -= origin;
    end = step(start);
  }

  size_t last = 0;
  for (size_t r = 0; r < n; ++r) {
    if (end[r] > end[last]) last = r;
  }
  pred.iteration_s = n > 0 ? end[last] : 0.0;
  for (size_t k = 0; k < np; ++k) {
    pred.pipeline_time_s[k] = pred.stages[k].front().last_backward_end_s;
    pred.pipeline_s = std::max(pred.pipeline_s, pred.pipeline_time_s[k]);
    for (size_t i = 0; i < pred.stages[k].size(); ++i) {
      StagePrediction& sp = pred.stages[k][i];
      sp.cost = costs[k][i];
      sp.p2p_next_s = i < links[k].fwd_s.size() ? std::max(links[k].fwd_s[i], links[k].bwd_s[i]) : 0.0;
      pred.optimizer_s = std::max(pred.optimizer_s, sp.optimizer_s);
    }
  }
  if (n > 0) pred.exposed_dp_s = std::max(0.0, pred.iteration_s - optimizer_s[last] - pred.pipeline_s);
  FillMemoryAndRates(plan, dp, &pred);
  return pred;
}

}  // namespace motley::perf
