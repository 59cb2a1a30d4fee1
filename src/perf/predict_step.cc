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
// the best algorithm (Predictor::TimeAllReduceSet) entered by the group's latest member;
// reduce-scatters and all-gathers are rings. Host staging as parallel/grad_sync.cc and zero1.cc
// copy: a layer all-reduce packs before and unpacks after; a ZeRO-1 reduce-scatter packs the
// gradients; a chunk's update copies the chunk three times; its all-gather packs and unpacks the
// values. The step time is the makespan: the latest rank's end minus the earliest rank's start.
// Two passes: the first, with all ranks starting together, gives each rank's end and so the skew
// the metrics all-gather leaves; the second is the steady-state step.
// The network is shared (perf/network.h) in closed form: pipeline messages by
// SolveBoundaryTimes; a set of collectives entered together (sched::ConcurrentCollectiveSets) by
// one max-min solve of its flows; and, because different streams of sets (the layers one group of
// stages syncs with one kind of collective, one after another) overlap in time, each set once
// more with the streams that overlap its own in a first walk as background flows, weighted by the
// overlap.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "core/check.h"
#include "perf/comm_model.h"
#include "perf/predictor.h"
#include "perf/step_model.h"
#include "sched/step_program.h"
#include "spec/plan_topology.h"

namespace motley::perf {
namespace {

using sched::StepOpKind;

// How the predictor times one collective of the step program.
struct TimedCollective {
  const std::vector<Hop>* hops = nullptr;  // ring hops in member order (empty below 2 members)
  std::vector<double> staging_s;  // layer collectives, per member: pack + unpack
  Seconds best_s = 0;             // best-algorithm all-reduces: the time under sharing
};

}  // namespace

std::vector<Predictor::RankTiming> Predictor::RankTimings(const spec::Plan& plan,
                                                          const sched::StepProgram& program,
                                                          const StragglerRates& rates) const {
  std::vector<RankTiming> timing(program.ranks.size());
  for (size_t r = 0; r < program.ranks.size(); ++r) {
    const sched::RankStep& rs = program.ranks[r];
    timing[r].type = cluster_.device(rs.device).type;
    if (rs.idle()) continue;
    timing[r].rate = GroupRate(rates, plan.pipelines[static_cast<size_t>(rs.pipeline)]
                                          .stages[static_cast<size_t>(rs.stage)]
                                          .devices);
  }
  return timing;
}

sched::StepProgram Predictor::StepProgramFor(const spec::Plan& plan) const {
  sched::StepProgramOptions options;
  options.with_actions = false;  // the pipeline phase walks its own schedule
  Result<sched::StepProgram> built = sched::BuildStepProgram(plan, model_, train_.seq_len, options);
  MOTLEY_CHECK(built.ok(), built.status().message());
  return std::move(*built);
}

Prediction Predictor::Predict(const spec::Plan& plan, const StragglerRates& rates,
                              const LinkRates& link_rates,
                              const sched::StepProgram* given_program) const {
  Prediction pred;
  const size_t np = plan.pipelines.size();
  pred.stages.resize(np);
  pred.pipeline_time_s.resize(np);
  pred.peak_memory_per_type.assign(cluster_.device_types.size(), 0.0);

  // The step program over the plan's devices (world rank r drives the r-th smallest device).
  const sched::StepProgram built =
      given_program != nullptr ? sched::StepProgram{} : StepProgramFor(plan);
  const sched::StepProgram& program = given_program != nullptr ? *given_program : built;
  const size_t n = program.ranks.size();
  const std::vector<RankTiming> timing = RankTimings(plan, program, rates);
  // When each directed device link is free of earlier transfers: the runtime's links queue
  // across operations (a ring's last sends can still occupy a slow link when the next starts).
  std::map<std::pair<int, int>, Seconds> link_free;
  // Worlds above exact_ring_max_ranks: every collective takes the bound (no per-rank skew), links
  // are not tracked across operations, and one pass is the steady step.
  const bool exact = static_cast<int>(n) <= settings_.exact_ring_max_ranks;
  // The devices of a ring's hop q: member q's to member q + 1's (wrapping).
  auto ring_hop = [&](const std::vector<int>& members, size_t q) {
    return std::pair<int, int>{
        program.ranks[static_cast<size_t>(members[q])].device,
        program.ranks[static_cast<size_t>(members[(q + 1) % members.size()])].device};
  };
  auto load_free = [&](const std::vector<int>& members) {
    std::vector<Seconds> free(members.size(), -1e300);
    for (size_t q = 0; q < members.size() && members.size() > 1; ++q) {
      auto it = link_free.find(ring_hop(members, q));
      if (it != link_free.end()) free[q] = it->second;
    }
    return free;
  };
  auto store_free = [&](const std::vector<int>& members, const std::vector<Seconds>& free) {
    for (size_t q = 0; q < members.size() && members.size() > 1; ++q) {
      link_free[ring_hop(members, q)] = free[q];
    }
  };
  // A collective over `members` entered at `entries`: per-member exits.
  auto collective = [&](const std::vector<int>& members, const std::vector<Hop>& hops,
                        const std::vector<Seconds>& entries, const RingSteps& ring, bool best,
                        Seconds best_s) {
    if (best) {
      const Seconds exit = *std::max_element(entries.begin(), entries.end()) + best_s;
      return std::vector<Seconds>(entries.size(), exit);
    }
    if (!exact) return RingCollectiveExits(entries, hops, ring, /*exact_max_ranks=*/1);
    std::vector<Seconds> free = load_free(members);
    std::vector<Seconds> exits =
        RingCollectiveExits(entries, hops, ring, settings_.exact_ring_max_ranks, &free);
    store_free(members, free);
    return exits;
  };

  // How each collective is timed: host staging of layer collectives; ring hops, whose flows share
  // the network with the other collectives of their concurrent set; the best-algorithm
  // all-reduces' times under sharing (TimeAllReduceSet, cached by the set's groups and bytes).
  std::vector<TimedCollective> timed(program.collectives.size());
  spec::LayerParamsMemo layer_params(model_);
  for (size_t c = 0; c < program.collectives.size(); ++c) {
    const sched::Collective& col = program.collectives[c];
    if (col.layer < 0) continue;
    timed[c].staging_s.reserve(col.members.size());
    for (int r : col.members) {
      const RankTiming& rk = timing[static_cast<size_t>(r)];
      const int tp = program.ranks[static_cast<size_t>(r)].tp_degree;
      const double params = static_cast<double>(layer_params.Of(col.layer, tp).total());
      timed[c].staging_s.push_back(StagingTime(rk.type, rk.rate, params));
    }
  }
  auto bytes_of = [&](const sched::Collective& col) {
    return static_cast<double>(col.elements) * ElementBytesOf(col);
  };
  // The sets of collectives entered together, and for each its flows: the chosen algorithm's
  // phases (best-algorithm all-reduces, TimeAllReduceSet, cached by groups and bytes) or its
  // ring hops (one phase).
  const std::vector<std::pair<size_t, size_t>> sets = sched::ConcurrentCollectiveSets(program);
  const size_t num_sets = sets.size();
  std::map<std::pair<std::vector<std::vector<int>>, double>, AllReduceSetTiming> best_cache;
  std::vector<const AllReduceSetTiming*> best_of(num_sets, nullptr);
  // Ring sets over the same members (a stream's layers, and ZeRO-1's reduce-scatters and
  // all-gathers of them) share their hops: interned as shapes, each with every hop's path.
  std::map<std::vector<std::vector<int>>, size_t> ring_shapes;
  std::vector<std::vector<FlowPath>> shape_paths;  // per shape: every hop, in set order
  std::vector<size_t> hop_shape(num_sets, 0);
  for (size_t si = 0; si < num_sets; ++si) {
    const auto [first, end] = sets[si];
    const sched::Collective& head = program.collectives[first];
    if (UsesBestAllReduce(head.kind)) {
      std::vector<std::vector<int>> groups;
      for (size_t c = first; c < end; ++c) {
        groups.push_back(sched::CollectiveDevices(program, program.collectives[c]));
      }
      auto key = std::make_pair(std::move(groups), bytes_of(head));
      auto it = best_cache.find(key);
      if (it == best_cache.end()) {
        it = best_cache.emplace(key, TimeAllReduceSet(key.first, key.second, link_rates)).first;
      }
      best_of[si] = &it->second;
      continue;
    }
    std::vector<std::vector<int>> shape;
    for (size_t c = first; c < end; ++c) shape.push_back(program.collectives[c].members);
    auto [it, fresh] = ring_shapes.emplace(std::move(shape), shape_paths.size());
    hop_shape[si] = it->second;
    if (!fresh) continue;
    std::vector<FlowPath>& paths = shape_paths.emplace_back();
    for (const std::vector<int>& members : it->first) {
      for (size_t q = 0; q < members.size() && members.size() > 1; ++q) {
        const auto [from, to] = ring_hop(members, q);
        paths.push_back(PathOf(from, to, link_rates));
      }
    }
  }
  // Times each set: a best-algorithm set by its chosen flows, a ring set's hops at their fair
  // rates (with sharing); `background` (optional, per set): other transfers overlapping it.
  // Times of a best-algorithm set under a background, by (chosen flows, background).
  std::map<std::pair<const AllReduceSetTiming*, const BackgroundFlows*>, std::vector<Seconds>>
      background_cache;
  // Hops of a ring shape's collectives under a background, by (shape, background).
  std::map<std::pair<size_t, const BackgroundFlows*>, std::vector<std::vector<Hop>>> hop_cache;
  const FlowPathFn path_of = [&](int a, int b) { return PathOf(a, b, link_rates); };
  auto time_sets = [&](const std::vector<const BackgroundFlows*>& background) {
    for (size_t si = 0; si < num_sets; ++si) {
      const auto [first, end] = sets[si];
      const BackgroundFlows* bg = background.empty() ? nullptr : background[si];
      if (best_of[si] != nullptr) {
        if (bg == nullptr) {
          for (size_t c = first; c < end; ++c) timed[c].best_s = best_of[si]->time_s[c - first];
          continue;
        }
        auto key = std::make_pair(best_of[si], bg);
        auto it = background_cache.find(key);
        if (it == background_cache.end()) {
          std::vector<const CollectiveFlows*> flows;
          for (const CollectiveFlows& f : best_of[si]->flows) flows.push_back(&f);
          it =
              background_cache.emplace(key, ConcurrentCollectiveTimes(network_, flows, path_of, bg))
                  .first;
        }
        for (size_t c = first; c < end; ++c) timed[c].best_s = it->second[c - first];
        continue;
      }
      auto key = std::make_pair(hop_shape[si], bg);
      auto it = hop_cache.find(key);
      if (it == hop_cache.end()) {
        const std::vector<FlowPath>& paths = shape_paths[hop_shape[si]];
        std::vector<BytesPerSecond> hop_rates;
        if (network_.shared() && !paths.empty()) {
          std::vector<FlowPath> all = paths;
          std::vector<double> weights;
          if (bg != nullptr && !bg->paths.empty()) {
            weights.assign(paths.size(), 1.0);
            all.insert(all.end(), bg->paths[0].begin(), bg->paths[0].end());
            weights.insert(weights.end(), bg->weights[0].begin(), bg->weights[0].end());
          }
          std::vector<BytesPerSecond> caps(all.size());
          for (size_t i = 0; i < all.size(); ++i) caps[i] = all[i].cap;
          hop_rates = FairShare(all, caps, network_.capacities(), weights);
        }
        std::vector<std::vector<Hop>> hops;
        size_t f = 0;
        for (size_t c = first; c < end; ++c) {
          const size_t size = program.collectives[c].members.size();
          std::vector<Hop>& h = hops.emplace_back();
          if (size < 2) {
            h.assign(size, Hop{});
            continue;
          }
          for (size_t q = 0; q < size; ++q, ++f) {
            h.push_back(Hop{paths[f].latency_s, hop_rates.empty() ? paths[f].cap : hop_rates[f]});
          }
        }
        it = hop_cache.emplace(key, std::move(hops)).first;
      }
      for (size_t c = first; c < end; ++c) timed[c].hops = &it->second[c - first];
    }
  };
  time_sets({});
  // Exits of collective c entered at `entries` (per member).
  std::vector<RingSteps> rings(program.collectives.size());  // built on first use
  // Collectives every member leaves together: the time from the last entry to the exit (-1 for
  // the others). Reset when the sets are timed again.
  std::vector<Seconds> fixed(program.collectives.size(), -2);
  auto fixed_time = [&](size_t c) -> Seconds {
    Seconds& f = fixed[c];
    if (f > -1.5) return f;
    const sched::Collective& col = program.collectives[c];
    f = -1;
    if (UsesBestAllReduce(col.kind)) {
      f = timed[c].best_s;
    } else if (!exact && col.kind != StepOpKind::kPlanAgreement) {
      if (!rings[c].chunk_bytes) rings[c] = RingStepsOf(col, ElementBytesOf(col));
      f = RingBoundTime(*timed[c].hops, rings[c]);
    }
    return f;
  };
  auto run_collective = [&](size_t c, const std::vector<Seconds>& entries) {
    const sched::Collective& col = program.collectives[c];
    const double eb = ElementBytesOf(col);
    switch (col.kind) {
      case StepOpKind::kLayerAllReduce:
      case StepOpKind::kLossNormAllReduce:
      case StepOpKind::kLayerReduceScatter:
      case StepOpKind::kLayerAllGather:
      case StepOpKind::kMetricsAllGather: {
        if (!rings[c].chunk_bytes) rings[c] = RingStepsOf(col, eb);
        return collective(col.members, *timed[c].hops, entries, rings[c],
                          UsesBestAllReduce(col.kind), timed[c].best_s);
      }
      case StepOpKind::kPlanAgreement: {
        std::vector<Seconds> free = load_free(col.members);
        std::vector<Seconds> exits = ChainBroadcastExits(
            entries, *timed[c].hops, static_cast<double>(col.elements) * eb, &free);
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
  for (size_t k = 0; k < np; ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    for (const spec::StagePlan& st : pipe.stages) {
      costs[k].push_back(StageCostOf(st, pipe.micro_batch_size, st.recompute, rates, link_rates));
    }
  }
  const BoundaryTimes links = SolveBoundaryTimes(plan, link_rates, &costs);
  // The device links each directed pair of device groups of pipeline k sends its messages over
  // ([k][from * p + to]: (sender, receiver) devices, one per receiving TP rank): the walk starts
  // them where earlier operations left them (the runtime queues a rank's transfers to one peer on
  // one link) and leaves them busy until its last transfer arrives.
  std::vector<std::vector<std::vector<std::pair<int, int>>>> group_pairs(np);
  for (size_t k = 0; k < np && exact; ++k) {
    const auto p = static_cast<size_t>(plan.pipelines[k].num_stages());
    group_pairs[k].resize(p * p);
  }
  // The pairs are the step program's pipeline peers: each sender's destinations, per chunk.
  for (size_t r = 0; r < n && exact; ++r) {
    const sched::RankStep& rs = program.ranks[r];
    if (rs.idle()) continue;
    const auto p =
        static_cast<size_t>(plan.pipelines[static_cast<size_t>(rs.pipeline)].num_stages());
    auto add = [&](int to_rank) {
      const sched::RankStep& to = program.ranks[static_cast<size_t>(to_rank)];
      auto& pairs = group_pairs[static_cast<size_t>(rs.pipeline)]
                               [static_cast<size_t>(rs.stage) * p + static_cast<size_t>(to.stage)];
      const std::pair<int, int> link{rs.device, to.device};
      if (std::find(pairs.begin(), pairs.end(), link) == pairs.end()) pairs.push_back(link);
    };
    for (const sched::ChunkStep& cs : rs.chunks) {
      for (int to : cs.forward_destinations) add(to);   // activations
      for (int to : cs.backward_destinations) add(to);  // gradients
    }
  }
  // Identical pipelines from identical ready times and links, within and across the walks below:
  // per key, the groups' ends and the group links after the walk.
  std::map<std::vector<double>, std::pair<std::vector<Seconds>, std::vector<Seconds>>> phase_cache;
  std::vector<double> phase_key;  // a pipeline's key in phase_cache (scratch)
  auto own_phase = [&](const std::vector<std::vector<Seconds>>& ready) {
    std::vector<std::vector<Seconds>> ends(np);
    auto& cache = phase_cache;
    for (size_t k = 0; k < np; ++k) {
      const spec::PipelinePlan& pipe = plan.pipelines[k];
      std::vector<Seconds> group_links(group_pairs[k].size(), 0.0);
      for (size_t g = 0; g < group_pairs[k].size(); ++g) {
        for (const std::pair<int, int>& link : group_pairs[k][g]) {
          auto it = link_free.find(link);
          if (it != link_free.end()) group_links[g] = std::max(group_links[g], it->second);
        }
      }
      phase_key.clear();
      phase_key.push_back(static_cast<double>(pipe.micro_batches));
      phase_key.push_back(static_cast<double>(pipe.chunks));
      for (const StageCost& c : costs[k]) {
        phase_key.push_back(c.forward_s);
        phase_key.push_back(c.backward_s);
      }
      phase_key.insert(phase_key.end(), ready[k].begin(), ready[k].end());
      phase_key.insert(phase_key.end(), links.fwd_s[k].begin(), links.fwd_s[k].end());
      phase_key.insert(phase_key.end(), links.bwd_s[k].begin(), links.bwd_s[k].end());
      phase_key.insert(phase_key.end(), group_links.begin(), group_links.end());
      auto it = cache.find(phase_key);
      if (it == cache.end()) {
        std::vector<Seconds> f, b;
        f.reserve(costs[k].size());
        b.reserve(costs[k].size());
        for (const StageCost& c : costs[k]) {
          f.push_back(c.forward_s);
          b.push_back(c.backward_s);
        }
        std::vector<Seconds> after = group_links;
        std::vector<Seconds> phase_ends =
            PipelinePhaseEnds(f, b, ready[k], links.fwd_s[k], links.bwd_s[k], pipe.micro_batches,
                              plan.schedule, {}, pipe.chunks, exact ? &after : nullptr);
        it =
            cache.emplace(phase_key, std::make_pair(std::move(phase_ends), std::move(after))).first;
      }
      ends[k] = it->second.first;
      for (size_t g = 0; g < group_pairs[k].size(); ++g) {
        for (const std::pair<int, int>& link : group_pairs[k][g]) {
          Seconds& free = link_free[link];
          free = std::max(free, it->second.second[g]);
        }
      }
    }
    return ends;
  };

  // One step from per-rank start times, op by op. Fills the per-stage fields of `pred`.
  std::vector<Seconds> optimizer_s(n, 0.0);
  // Each rank's local op times, computed once for the walks below (0 for the pipeline and
  // collective ops: the pipeline phase is timed for all ranks at once).
  // Flat: rank r's ops from op_begin[r].
  std::vector<size_t> op_begin(n + 1, 0);
  for (size_t r = 0; r < n; ++r) op_begin[r + 1] = op_begin[r] + program.ranks[r].ops.size();
  std::vector<Seconds> op_time(op_begin[n]);
  for (size_t r = 0; r < n; ++r) {
    const std::vector<sched::StepOp>& ops = program.ranks[r].ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      op_time[op_begin[r] + i] = LocalOpTime(timing[r].type, timing[r].rate, ops[i]);
    }
  }
  auto local_op = [&](size_t r, size_t i) -> Seconds {
    const Seconds t = op_time[op_begin[r] + i];
    if (program.ranks[r].ops[i].kind == StepOpKind::kOptimizer) optimizer_s[r] += t;
    return t;
  };
  // When each set of collectives ran in a step: from its entry (all members in) to its last exit.
  struct SetSpan {
    Seconds begin = std::numeric_limits<Seconds>::infinity();
    Seconds end = -std::numeric_limits<Seconds>::infinity();
  };
  std::vector<size_t> set_of(program.collectives.size());
  for (size_t si = 0; si < num_sets; ++si) {
    for (size_t c = sets[si].first; c < sets[si].second; ++c) set_of[c] = si;
  }
  auto step = [&](const std::vector<Seconds>& start, std::vector<SetSpan>* spans) {
    std::fill(optimizer_s.begin(), optimizer_s.end(), 0.0);
    std::vector<std::vector<Seconds>> ready(np);
    for (size_t k = 0; k < np; ++k) {  // per device group
      ready[k].assign(static_cast<size_t>(plan.pipelines[k].num_stages()), 0.0);
    }
    std::vector<size_t> pc(n, 0);  // each rank's next op
    for (size_t r = 0; r < n; ++r) {
      const sched::RankStep& rs = program.ranks[r];
      Seconds t0 = start[r];
      while (rs.ops[pc[r]].kind != StepOpKind::kPipeline) t0 += local_op(r, pc[r]++);
      ++pc[r];
      Seconds& rd = ready[static_cast<size_t>(rs.pipeline)][static_cast<size_t>(rs.stage)];
      rd = std::max(rd, t0);
    }
    const std::vector<std::vector<Seconds>> ends = own_phase(ready);
    std::vector<Seconds> t(n);
    for (size_t r = 0; r < n; ++r) {
      const sched::RankStep& rs = program.ranks[r];
      t[r] = ends[static_cast<size_t>(rs.pipeline)][static_cast<size_t>(rs.stage)];
    }
    const std::vector<Seconds> pipeline_end = t;
    // Per rank: seconds in layer collectives (entry to exit, waiting and staging included).
    std::vector<Seconds> dp_s(n, 0.0);
    // Runs rank r's local ops up to its next collective (or its between-step ops).
    auto advance = [&](size_t r) {
      const std::vector<sched::StepOp>& ops = program.ranks[r].ops;
      while (pc[r] < ops.size() && !sched::IsCollective(ops[pc[r]].kind)) {
        t[r] += local_op(r, pc[r]++);
      }
    };
    std::vector<Seconds> entries;
    std::vector<Seconds> before;
    std::vector<Seconds> exits;
    for (size_t c = 0; c < program.collectives.size(); ++c) {
      const sched::Collective& col = program.collectives[c];
      if (sched::IsBetweenSteps(col.kind)) continue;
      const std::vector<double>& staging = timed[c].staging_s;
      const size_t size = col.members.size();
      entries.resize(size);
      before.resize(size);
      Seconds last_entry = -std::numeric_limits<Seconds>::infinity();
      for (size_t q = 0; q < size; ++q) {
        const auto r = static_cast<size_t>(col.members[q]);
        advance(r);
        before[q] = t[r];
        MOTLEY_CHECK(program.ranks[r].ops[pc[r]].collective == static_cast<int>(c),
                     "step program: collectives out of entry order");
        entries[q] = t[r] + (staging.empty() ? 0.0 : 0.5 * staging[q]);
        last_entry = std::max(last_entry, entries[q]);
      }
      // Best-algorithm all-reduces and rings above exact_ring_max_ranks: every member leaves
      // together, a fixed time after the last entry.
      const Seconds together = fixed_time(c);
      if (together >= 0) {
        exits.assign(size, last_entry + together);
      } else {
        exits = run_collective(c, entries);
      }
      if (spans != nullptr && size > 0) {
        SetSpan& span = (*spans)[set_of[c]];
        span.begin = std::min(span.begin, last_entry);
        span.end = std::max(span.end, *std::max_element(exits.begin(), exits.end()));
      }
      // A reduce-scatter's output stays on the host (ZeRO-1 updates it there).
      const bool unpacked = col.kind != StepOpKind::kLayerReduceScatter;
      for (size_t q = 0; q < size; ++q) {
        const auto r = static_cast<size_t>(col.members[q]);
        t[r] = exits[q] + (staging.empty() || !unpacked ? 0.0 : 0.5 * staging[q]);
        ++pc[r];
        if (col.layer >= 0) dp_s[r] += t[r] - before[q];
      }
    }
    for (size_t r = 0; r < n; ++r) advance(r);
    // Per-stage fields (max over the stage's ranks; under interleaving, every virtual stage of
    // a device group gets the group's).
    for (size_t k = 0; k < np; ++k) {
      pred.stages[k].assign(plan.pipelines[k].stages.size(), StagePrediction{});
    }
    for (size_t r = 0; r < n; ++r) {
      const sched::RankStep& rs = program.ranks[r];
      const spec::PipelinePlan& pipe = plan.pipelines[static_cast<size_t>(rs.pipeline)];
      for (int c = 0; c < pipe.chunks; ++c) {
        StagePrediction& sp = pred.stages[static_cast<size_t>(rs.pipeline)]
                                         [static_cast<size_t>(pipe.virtual_stage(rs.stage, c))];
        sp.last_backward_end_s = pipeline_end[r];
        sp.dp_start_s = pipeline_end[r];
        sp.dp_sync_s = std::max(sp.dp_sync_s, dp_s[r]);
        sp.optimizer_s = std::max(sp.optimizer_s, optimizer_s[r]);
        sp.finish_s = std::max(sp.finish_s, t[r]);
      }
    }
    return t;
  };

  // Different layers' collectives overlap in time too (stages sharing a node run their data-
  // parallel syncs at once). With sharing, a first walk at the sets' own times gives when each
  // stream of sets (the layers one group of stages syncs with one kind of collective, one after
  // another) runs; every set is then timed again with the other streams that overlap its stream
  // and cross a resource of it as background flows, weighted by the fraction of its stream's time
  // they overlap (each of their flows counted once, spread over their phases).
  if (network_.shared() && num_sets > 1) {
    std::vector<SetSpan> spans(num_sets);
    const auto saved_free = link_free;
    step(std::vector<Seconds>(n, 0.0), &spans);
    link_free = saved_free;
    // A stream is keyed by the kind and the member lists of its sets: ZeRO-1's reduce-scatters
    // and all-gathers have the same members but run on either side of the world's loss-norm
    // barrier, so each kind is its own stream with its own window (one hull over both would
    // count the barrier's wait as overlap).
    std::map<std::pair<int, std::vector<std::vector<int>>>, size_t> stream_index;
    std::vector<size_t> stream_of(num_sets, SIZE_MAX);
    std::vector<SetSpan> windows;
    std::vector<size_t> first_set;  // per stream: its representative
    for (size_t si = 0; si < num_sets; ++si) {
      const sched::Collective& head = program.collectives[sets[si].first];
      if (head.layer < 0 || !(spans[si].end >= spans[si].begin)) continue;
      std::vector<std::vector<int>> key;
      for (size_t c = sets[si].first; c < sets[si].second; ++c) {
        key.push_back(program.collectives[c].members);
      }
      auto [it, fresh] = stream_index.emplace(
          std::make_pair(static_cast<int>(head.kind), std::move(key)), windows.size());
      if (fresh) {
        windows.emplace_back();
        first_set.push_back(si);
      }
      stream_of[si] = it->second;
      SetSpan& w = windows[it->second];
      w.begin = std::min(w.begin, spans[si].begin);
      w.end = std::max(w.end, spans[si].end);
    }
    // Each stream's flows (its representative set's, every phase) and the resources they cross.
    const size_t ns = windows.size();
    std::vector<std::vector<FlowPath>> stream_flows(ns);
    std::vector<double> stream_phases(ns, 1.0);
    std::vector<std::vector<int>> stream_resources(ns);
    for (size_t st = 0; st < ns; ++st) {
      const size_t si = first_set[st];
      if (best_of[si] != nullptr) {
        size_t phases = 0;
        for (const CollectiveFlows& cf : best_of[si]->flows) {
          phases = std::max(phases, cf.phases.size());
          for (const FlowPhase& ph : cf.phases) {
            for (const PhaseFlow& f : ph.flows) {
              stream_flows[st].push_back(PathOf(f.from, f.to, link_rates));
            }
          }
        }
        stream_phases[st] = static_cast<double>(std::max<size_t>(phases, 1));
      } else {
        stream_flows[st] = shape_paths[hop_shape[si]];
      }
      for (const FlowPath& f : stream_flows[st]) {
        for (int i = 0; i < f.num_resources; ++i) {
          stream_resources[st].push_back(f.resources[static_cast<size_t>(i)]);
        }
      }
      std::sort(stream_resources[st].begin(), stream_resources[st].end());
      stream_resources[st].erase(
          std::unique(stream_resources[st].begin(), stream_resources[st].end()),
          stream_resources[st].end());
    }
    auto share_a_resource = [&](size_t x, size_t y) {
      const std::vector<int>& a = stream_resources[x];
      const std::vector<int>& b = stream_resources[y];
      for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
        if (a[i] == b[j]) return true;
        if (a[i] < b[j]) {
          ++i;
        } else {
          ++j;
        }
      }
      return false;
    };
    std::vector<BackgroundFlows> backgrounds(ns);
    for (size_t st = 0; st < ns; ++st) {
      const Seconds length = windows[st].end - windows[st].begin;
      if (!(length > 0)) continue;
      std::vector<FlowPath> paths;
      std::vector<double> weights;
      for (size_t other = 0; other < ns; ++other) {
        if (other == st) continue;
        const Seconds overlap = std::min(windows[st].end, windows[other].end) -
                                std::max(windows[st].begin, windows[other].begin);
        if (!(overlap > 0) || !share_a_resource(st, other)) continue;
        const double w = std::min(1.0, overlap / length) / stream_phases[other];
        // Only the flows that cross a resource of this stream's own flows take part.
        for (const FlowPath& f : stream_flows[other]) {
          bool touches = false;
          for (int i = 0; i < f.num_resources && !touches; ++i) {
            touches = std::binary_search(stream_resources[st].begin(), stream_resources[st].end(),
                                         f.resources[static_cast<size_t>(i)]);
          }
          if (!touches) continue;
          paths.push_back(f);
          weights.push_back(w);
        }
      }
      if (paths.empty()) continue;
      const size_t phases =
          best_of[first_set[st]] != nullptr ? static_cast<size_t>(stream_phases[st]) : size_t{1};
      backgrounds[st].paths.assign(phases, paths);
      backgrounds[st].weights.assign(phases, weights);
    }
    std::vector<const BackgroundFlows*> background_of(num_sets, nullptr);
    for (size_t si = 0; si < num_sets; ++si) {
      if (stream_of[si] != SIZE_MAX && !backgrounds[stream_of[si]].empty()) {
        background_of[si] = &backgrounds[stream_of[si]];
      }
    }
    time_sets(background_of);
    std::fill(fixed.begin(), fixed.end(), -2.0);
  }

  std::vector<Seconds> end = step(std::vector<Seconds>(n, 0.0), nullptr);
  if (exact && n > 1) {
    // Between steps: the metrics all-gather and the plan agreement, in program order.
    std::vector<Seconds> start = end;
    for (size_t c = 0; c < program.collectives.size(); ++c) {
      if (sched::IsBetweenSteps(program.collectives[c].kind)) start = run_collective(c, start);
    }
    const Seconds origin = *std::min_element(start.begin(), start.end());
    for (Seconds& s0 : start) s0 -= origin;
    for (auto& [link, t] : link_free) t -= origin;
    end = step(start, nullptr);
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
      sp.p2p_next_s =
          i < links.fwd_s[k].size() ? std::max(links.fwd_s[k][i], links.bwd_s[k][i]) : 0.0;
      pred.optimizer_s = std::max(pred.optimizer_s, sp.optimizer_s);
    }
  }
  if (n > 0) pred.exposed_dp_s = std::max(0.0, pred.iteration_s - optimizer_s[last] - pred.pipeline_s);
  FillMemoryAndRates(plan, program, &pred);
  return pred;
}

}  // namespace motley::perf
