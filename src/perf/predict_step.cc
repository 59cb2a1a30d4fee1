// Predictor::Predict: one steady-state training step as motley's runtime runs it on every rank,
// timed op by op from the step program (sched/step_program.h), the same data the runtime splits
// its gradient groups and shards ZeRO-1 state from:
//   start (skewed by the previous step's metrics all-gather) -> zero-grads -> the pipeline phase
//   (each stage's action list, eager sends; a TP group moves in lockstep from its latest rank's
//   start) -> the program's collectives in entry order (layer all-reduces, each staged through
//   host memory, or ZeRO-1 reduce-scatters; the world's loss-norm all-reduce; ZeRO-1
//   all-gathers), each rank running its local ops (grad-norm, optimizer) as it reaches them ->
//   between steps, the metrics all-gather and the plan agreement (a chain broadcast from rank 0).
// Collectives are rings in rank order (perf/step_model.h) with ring_collectives, else (all-reduces)
// the best of ring and hierarchy entered by the group's latest member; reduce-scatters and
// all-gathers are rings. Host staging as parallel/grad_sync.cc and zero1.cc copy: a layer
// all-reduce packs before and unpacks after; a ZeRO-1 reduce-scatter packs the gradients; a
// chunk's update copies the chunk three times; its all-gather packs and unpacks the values. The step time is the makespan: the latest rank's end minus the earliest
// rank's start. Two passes: the first, with all ranks starting together, gives each rank's end
// and so the skew the metrics all-gather leaves; the second is the steady-state step.
#include <algorithm>
#include <map>
#include <tuple>


#include "core/check.h"
#include "perf/comm_model.h"
#include "perf/predictor.h"
#include "perf/step_model.h"
#include "sched/step_program.h"
#include "spec/plan_topology.h"

namespace motley::perf {
namespace {

using sched::StepOpKind;

struct Rank {
  int device = 0;
  int pipeline = 0;
  int stage = 0;
  int type = 0;
  double rate = 1;
};

// How the predictor times one collective of the step program.
struct TimedCollective {
  std::vector<Hop> hops;          // ring hops in member order (empty below 2 members)
  std::vector<double> staging_s;  // layer collectives, per member: pack + unpack
  // By node: the collectives of the same layer and kind crossing that node's NICs at once, this
  // one included (comm_model.h NicSharing), interned: index into the step's sharer lists.
  int nic_sharers = 0;
};

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
  pred.stages.resize(np);
  pred.pipeline_time_s.resize(np);
  pred.peak_memory_per_type.assign(cluster_.device_types.size(), 0.0);
  const NicSharers sharers = CountNicSharers(plan);

  // The step program over the plan's devices (world rank r drives the r-th smallest device).
  sched::StepProgramOptions program_options;
  program_options.with_actions = false;  // the pipeline phase walks its own schedule
  Result<sched::StepProgram> built = sched::BuildStepProgram(plan, model_, train_.seq_len, program_options);
  MOTLEY_CHECK(built.ok(), built.status().message());
  const sched::StepProgram& program = *built;
  const size_t n = program.ranks.size();
  std::vector<Rank> ranks(n);
  for (size_t r = 0; r < n; ++r) {
    const sched::RankStep& rs = program.ranks[r];
    const spec::StagePlan& st = plan.pipelines[static_cast<size_t>(rs.pipeline)]
                                    .stages[static_cast<size_t>(rs.stage)];
    ranks[r] = Rank{rs.device, rs.pipeline, rs.stage, cluster_.device(rs.device).type,
                    GroupRate(rates, st.devices)};
  }
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

  // How each collective is timed: ring hops (the world's shared), host staging of layer
  // collectives, and NIC sharing among the collectives of one layer and kind, which start
  // together (a layer's TP colours).
  const double grad_bytes = GradientElementBytes(settings_);
  std::vector<TimedCollective> timed(program.collectives.size());
  spec::LayerParamsMemo layer_params(model_);
  for (size_t c = 0; c < program.collectives.size(); ++c) {
    const sched::Collective& col = program.collectives[c];
    if (col.members.size() < n) timed[c].hops = ring_hops(col.members);  // else the world's
    if (col.layer < 0) continue;
    for (int r : col.members) {
      const Rank& rk = ranks[static_cast<size_t>(r)];
      const int tp = program.ranks[static_cast<size_t>(r)].tp_degree;
      const double params = static_cast<double>(layer_params.Of(col.layer, tp).total());
      timed[c].staging_s.push_back(rk.rate * compute_.GradStaging(rk.type, params));
    }
  }
  for (size_t first = 0; first < program.collectives.size();) {
    const sched::Collective& head = program.collectives[first];
    size_t end = first + 1;
    while (end < program.collectives.size() && program.collectives[end].layer == head.layer &&
           program.collectives[end].kind == head.kind) {
      ++end;
    }
    if (head.layer >= 0) {
      std::vector<int> crossing(cluster_.nodes.size(), 0);
      for (size_t c = first; c < end; ++c) {
        std::vector<int> nodes;
        for (int r : program.collectives[c].members) {
          nodes.push_back(cluster_.device(ranks[static_cast<size_t>(r)].device).node);
        }
        std::sort(nodes.begin(), nodes.end());
        nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
        if (nodes.size() < 2) continue;
        for (int node : nodes) ++crossing[static_cast<size_t>(node)];
      }
      auto [it, fresh] = sharer_index.emplace(crossing, static_cast<int>(sharer_lists.size()));
      if (fresh) sharer_lists.push_back(crossing);
      for (size_t c = first; c < end; ++c) timed[c].nic_sharers = it->second;
    }
    first = end;
  }
  auto hops_for = [&](size_t c) -> const std::vector<Hop>& {
    return program.collectives[c].members.size() == n ? world_hops : timed[c].hops;
  };
  // Exits of collective c entered at `entries` (per member).
  auto run_collective = [&](size_t c, const std::vector<Seconds>& entries) {
    const sched::Collective& col = program.collectives[c];
    const int size = static_cast<int>(col.members.size());
    const double eb = col.layer >= 0 ? grad_bytes : static_cast<double>(col.element_bytes);
    switch (col.kind) {
      case StepOpKind::kLayerAllReduce:
      case StepOpKind::kLossNormAllReduce:
        return collective(col.members, hops_for(c), entries, 2 * (size - 1),
                          AllReduceChunks(col.elements, eb, size),
                          static_cast<double>(col.elements) * eb, true, timed[c].nic_sharers);
      case StepOpKind::kLayerReduceScatter:
      case StepOpKind::kLayerAllGather:
      case StepOpKind::kMetricsAllGather: {
        // Ring reduce-scatter: in step s member q sends chunk q - s - 1; all-gather: chunk q - s
        // (comm/ring_collectives.cc).
        const bool gather = col.kind != StepOpKind::kLayerReduceScatter;
        const std::vector<int64_t>* chunks = &col.chunks;
        RingChunkBytes chunk = [chunks, size, eb, gather](int step, int q) -> Bytes {
          const int idx = (((q - step - (gather ? 0 : 1)) % size) + size) % size;
          return static_cast<double>((*chunks)[static_cast<size_t>(idx)]) * eb;
        };
        return collective(col.members, hops_for(c), entries, size - 1, chunk, 0.0, false, 0);
      }
      case StepOpKind::kPlanAgreement: {
        std::vector<Seconds> free = load_free(col.members);
        std::vector<Seconds> exits =
            ChainBroadcastExits(entries, hops_for(c), static_cast<double>(col.elements) * eb, &free);
        store_free(col.members, free);
        return exits;
      }
      default: break;
    }
    MOTLEY_CHECK(false, "step program: a local op in the collective list");
    return entries;
  };

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

  // One step from per-rank start times, op by op. Fills the per-stage fields of `pred`.
  std::vector<Seconds> optimizer_s(n, 0.0);
  auto local_op = [&](size_t r, const sched::StepOp& op) -> Seconds {
    const Rank& rk = ranks[r];
    const double elements = static_cast<double>(op.elements);
    switch (op.kind) {
      case StepOpKind::kZeroGrads: return rk.rate * compute_.ZeroGrads(rk.type, elements);
      case StepOpKind::kGradNorm: return rk.rate * compute_.GradNorm(rk.type, elements);
      case StepOpKind::kOptimizer: {
        // A ZeRO-1 chunk (op.layer set) is staged: three copies of the chunk beside the update.
        const Seconds t = OptimizerTime(rk.type, elements, rk.rate) +
                          (op.layer >= 0 ? 1.5 * rk.rate * compute_.GradStaging(rk.type, elements)
                                         : 0.0);
        optimizer_s[r] += t;
        return t;
      }
      default: return 0.0;  // the pipeline phase is timed for all ranks at once
    }
  };
  auto step = [&](const std::vector<Seconds>& start) {
    std::fill(optimizer_s.begin(), optimizer_s.end(), 0.0);
    std::vector<std::vector<Seconds>> ready(np);
    for (size_t k = 0; k < np; ++k) ready[k].assign(plan.pipelines[k].stages.size(), 0.0);
    std::vector<size_t> pc(n, 0);  // each rank's next op
    for (size_t r = 0; r < n; ++r) {
      const sched::RankStep& rs = program.ranks[r];
      Seconds t0 = start[r];
      while (rs.ops[pc[r]].kind != StepOpKind::kPipeline) t0 += local_op(r, rs.ops[pc[r]++]);
      ++pc[r];
      Seconds& rd = ready[static_cast<size_t>(rs.pipeline)][static_cast<size_t>(rs.stage)];
      rd = std::max(rd, t0);
    }
    const std::vector<std::vector<Seconds>> ends = phase ? phase(ready) : own_phase(ready);
    std::vector<Seconds> t(n);
    for (size_t r = 0; r < n; ++r) {
      t[r] = ends[static_cast<size_t>(ranks[r].pipeline)][static_cast<size_t>(ranks[r].stage)];
    }
    const std::vector<Seconds> pipeline_end = t;
    // Per rank: seconds in layer collectives (entry to exit, waiting and staging included).
    std::vector<Seconds> dp_s(n, 0.0);
    // Runs rank r's local ops up to its next collective (or its between-step ops).
    auto advance = [&](size_t r) {
      const std::vector<sched::StepOp>& ops = program.ranks[r].ops;
      while (pc[r] < ops.size() && !sched::IsCollective(ops[pc[r]].kind)) {
        t[r] += local_op(r, ops[pc[r]++]);
      }
    };
    for (size_t c = 0; c < program.collectives.size(); ++c) {
      const sched::Collective& col = program.collectives[c];
      if (sched::IsBetweenSteps(col.kind)) continue;
      const std::vector<double>& staging = timed[c].staging_s;
      std::vector<Seconds> entries(col.members.size());
      std::vector<Seconds> before(col.members.size());
      for (size_t q = 0; q < col.members.size(); ++q) {
        const auto r = static_cast<size_t>(col.members[q]);
        advance(r);
        before[q] = t[r];
        MOTLEY_CHECK(program.ranks[r].ops[pc[r]].collective == static_cast<int>(c),
                     "step program: collectives out of entry order");
        entries[q] = t[r] + (staging.empty() ? 0.0 : 0.5 * staging[q]);
      }
      const std::vector<Seconds> exits = run_collective(c, entries);
      for (size_t q = 0; q < col.members.size(); ++q) {
        const auto r = static_cast<size_t>(col.members[q]);
        // A reduce-scatter's output stays on the host (ZeRO-1 updates it there).
        const bool unpacked = col.kind != StepOpKind::kLayerReduceScatter;
        t[r] = exits[q] + (staging.empty() || !unpacked ? 0.0 : 0.5 * staging[q]);
        ++pc[r];
        if (col.layer >= 0) dp_s[r] += t[r] - before[q];
      }
    }
    for (size_t r = 0; r < n; ++r) advance(r);
    // Per-stage fields (max over the stage's ranks).
    for (size_t k = 0; k < np; ++k) {
      pred.stages[k].assign(plan.pipelines[k].stages.size(), StagePrediction{});
    }
    for (size_t r = 0; r < n; ++r) {
      StagePrediction& sp =
          pred.stages[static_cast<size_t>(ranks[r].pipeline)][static_cast<size_t>(ranks[r].stage)];
      sp.last_backward_end_s = pipeline_end[r];
      sp.dp_start_s = pipeline_end[r];
      sp.dp_sync_s = std::max(sp.dp_sync_s, dp_s[r]);
      sp.optimizer_s = std::max(sp.optimizer_s, optimizer_s[r]);
      sp.finish_s = std::max(sp.finish_s, t[r]);
    }
    return t;
  };

  std::vector<Seconds> end = step(std::vector<Seconds>(n, 0.0));
  if (exact && n > 1) {
    // Between steps: the metrics all-gather and the plan agreement, in program order.
    std::vector<Seconds> start = end;
    for (size_t c = 0; c < program.collectives.size(); ++c) {
      if (sched::IsBetweenSteps(program.collectives[c].kind)) start = run_collective(c, start);
    }
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
  FillMemoryAndRates(plan, program, &pred);
  return pred;
}

}  // namespace motley::perf
