// See planner.h. Search order: each device type alone (all TP degrees; these are also the
// homogeneous baselines; the homogeneous sum plans each type again at its share of the batch,
// references.h), then every larger subset of types with each
// type's two best TP degrees from the first phase. Per (types, TP) the layouts are: balanced
// (d pipelines sharing every (island, type) bucket), segregated by type and by island, with
// contiguous or strided placement and the stage order of types varied. Small instances (at most
// 8 TP groups at TP 1) try every d, every type order and every combination of per-group d.
// Layouts are queued and evaluated in batches on PlannerOptions::threads threads
// (core/parallel_for.h); their outcomes are applied in queue order, so the search ends as on one
// thread. The simulator's confirmations and the uniform baseline's shapes run on the same threads,
// each combined in a fixed order (the homogeneous sum's per-type searches are threaded inside).
#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "core/parallel_for.h"
#include "core/thread_count.h"
#include "perf/memory_model.h"
#include "plan/evaluate.h"
#include "plan/exhaustive.h"
#include "plan/explain_no_plan.h"
#include "plan/interleave.h"
#include "plan/references.h"
#include "plan/sharding.h"
#include "plan/units.h"
#include "sim/simulator.h"
#include "spec/model_flops.h"
#include "spec/plan_topology.h"

namespace motley::plan {

std::vector<int> ValidTp(const spec::ClusterSpec& cluster, const spec::ModelSpec& model,
                         const PlannerOptions& options, int type) {
  int smallest_node = std::numeric_limits<int>::max();
  for (const spec::NodeSpec& n : cluster.nodes) {
    if (n.device_type == cluster.device_types[static_cast<size_t>(type)].name) {
      smallest_node = std::min(smallest_node, n.device_count);
    }
  }
  std::vector<int> out;
  for (int d : options.tp_degrees) {
    if (d <= smallest_node && model.SplitsForTensorParallel(d) && model.vocab_size % d == 0) {
      out.push_back(d);
    }
  }
  return out;
}

namespace {

// How many TP degrees of each type mixed layouts take on clusters that are not small: the type's
// fastest alone (PlanCluster's phase 1).
constexpr int kMixedTpDegrees = 2;

// One layout to evaluate over micro-batch sizes and recompute choices (Search::TryLayout).
struct LayoutJob {
  std::shared_ptr<const std::vector<Unit>> units;
  Layout layout;
  std::string what;
  int single_type = -1;  // the one device type of a single-type layout, else -1
  int single_tp = 0;
  bool identical_shape = false;
  double prune_above = std::numeric_limits<double>::infinity();  // the records when queued
};

// What one evaluation of a job gave: pruned, infeasible (with why) or a candidate.
struct Outcome {
  bool pruned = false;
  std::string reason;
  std::optional<Candidate> candidate;
};

struct Search {
  Search(const perf::Predictor& p, const PlannerOptions& o)
      : predictor(p),
        options(o),
        cluster(p.cluster()),
        model(p.model()),
        train(p.train()),
        threads(ThreadsOrAllCores(o.threads)) {}
  const perf::Predictor& predictor;
  const PlannerOptions& options;
  const spec::ClusterSpec& cluster;
  const spec::ModelSpec& model;
  const spec::TrainSpec& train;
  const int threads;
  std::vector<LayoutJob> pending;  // queued layouts (threads > 1), evaluated by Flush()
  bool small = false;
  // Whether mixed layouts follow that take each type's kMixedTpDegrees fastest TP degrees alone
  // (PlanCluster's phase 2 on a cluster that is not small).
  bool tp_order_matters = false;
  std::vector<Candidate> top;                 // sorted by predicted time, at most rank_top
  std::map<int, std::vector<std::pair<double, int>>> per_type_tp;  // type -> (time, tp)
  std::map<int, Candidate> best_per_type;     // homogeneous: best plan per single type
  std::optional<Candidate> best_identical;
  std::set<std::string> seen_layouts;
  std::map<std::string, std::string> reasons;  // category -> an example reason
  std::map<std::string, int64_t> reason_counts;
  int64_t layouts = 0;
  int64_t evaluations = 0;
  int64_t pruned = 0;

  // The ranking's order: by predicted step time.
  static bool PredictedFaster(const Candidate& a, const Candidate& b) {
    return a.prediction.iteration_s < b.prediction.iteration_s;
  }
  void Offer(const Candidate& c) {
    if (static_cast<int>(top.size()) >= options.rank_top &&
        c.prediction.iteration_s >= top.back().prediction.iteration_s) {
      return;
    }
    auto pos = std::upper_bound(top.begin(), top.end(), c, PredictedFaster);
    top.insert(pos, c);
    if (static_cast<int>(top.size()) > options.rank_top) top.pop_back();
  }
  void NoteReason(const std::string& reason) {
    const std::string category = reason.substr(0, reason.find(':'));
    ++reason_counts[category];
    auto it = reasons.find(category);
    // Keep the example with the most context (longest) for the explanation.
    if (it == reasons.end() || reason.size() > it->second.size()) reasons[category] = reason;
  }
  static bool Identical(const spec::Plan& plan, const spec::ClusterSpec& cluster) {
    const spec::PipelinePlan& a = plan.pipelines.front();
    for (const spec::PipelinePlan& b : plan.pipelines) {
      if (b.stages.size() != a.stages.size() || b.chunks != a.chunks ||
          b.micro_batches != a.micro_batches) {
        return false;
      }
      for (size_t i = 0; i < a.stages.size(); ++i) {
        if (b.stages[i].num_blocks != a.stages[i].num_blocks ||
            b.stages[i].tp_degree != a.stages[i].tp_degree ||
            cluster.device(b.stages[i].devices.front()).type !=
                cluster.device(a.stages[i].devices.front()).type) {
          return false;
        }
      }
    }
    return true;
  }

  // Whether every pipeline has the same units' types and TP degrees, stage by stage: only then can
  // a plan of the layout be Identical() and a candidate for best_identical.
  static bool IdenticalShape(const std::vector<Unit>& units, const Layout& layout) {
    for (const auto& p : layout) {
      if (p.size() != layout.front().size()) return false;
      for (size_t i = 0; i < p.size(); ++i) {
        const Unit& a = units[static_cast<size_t>(p[i])];
        const Unit& b = units[static_cast<size_t>(layout.front()[i])];
        if (a.type != b.type || a.tp != b.tp) return false;
      }
    }
    return true;
  }
  // The step time at or above which a candidate changes nothing the search keeps: the ranking
  // (full, at its last time), the per-(type, TP) minima that pick the TP degrees of mixed layouts
  // and the per-type best (single-type layouts) and the best identical plan (identical shapes).
  // Every record compares with a strict <, so a candidate at the threshold is dropped anyway.
  double PruneAbove(int single_type, int single_tp, bool identical_shape) const {
    const double inf = std::numeric_limits<double>::infinity();
    double at =
        static_cast<int>(top.size()) >= options.rank_top ? top.back().prediction.iteration_s : inf;
    if (single_type >= 0) at = std::max(at, PerTypeThreshold(single_type, single_tp));
    if (identical_shape)
      at = std::max(at, best_identical ? best_identical->prediction.iteration_s : inf);
    return at;
  }

  // The per-type records' part of PruneAbove for a layout of `type` alone at TP `tp`. A
  // single-type evaluation matters to them where it can change the best plan of the type (below
  // the type's fastest time) or which TP degrees mixed layouts take and in what order (the
  // kMixedTpDegrees fastest, by (fastest time, tp)): with the type's TP degrees in that order,
  // r_1, r_2, ..., one at r_i (2 <= i <= k) only by passing r_(i-1), one beyond r_k (or with no
  // time yet) only by passing r_k (none to pass while fewer than k have times). Where mixed
  // layouts do not follow (small clusters try every TP degree; a search of one type has no
  // mixed layouts), only the type's fastest time counts. Records only fall as the search goes
  // on, and so does this threshold: a batch of threads judged against the records as they stood
  // when it started prunes only what one thread would.
  double PerTypeThreshold(int type, int tp) const {
    const double inf = std::numeric_limits<double>::infinity();
    auto it = per_type_tp.find(type);
    if (it == per_type_tp.end()) return inf;
    std::map<int, double> fastest;  // tp -> its fastest time
    for (const auto& [time, t] : it->second) {
      auto [f, fresh] = fastest.emplace(t, time);
      if (!fresh) f->second = std::min(f->second, time);
    }
    std::vector<std::pair<double, int>> order;  // (fastest time, tp), as phase 1 ranks them
    for (const auto& [t, time] : fastest) order.emplace_back(time, t);
    std::sort(order.begin(), order.end());
    if (!tp_order_matters) return order.front().first;
    const auto k = static_cast<size_t>(kMixedTpDegrees);
    for (size_t i = 0; i < order.size() && i < k; ++i) {
      if (order[i].second == tp) return order[i == 0 ? 0 : i - 1].first;
    }
    return order.size() >= k ? order[k - 1].first : inf;
  }

  // Queues one layout (each distinct layout once); with one thread it is evaluated at once.
  void TryLayout(const std::shared_ptr<const std::vector<Unit>>& units_ptr, const Layout& layout,
                 const std::string& what, int single_type, int single_tp) {
    if (layout.empty()) return;
    const std::vector<Unit>& units = *units_ptr;
    std::string key;
    for (const auto& p : layout) {
      for (int u : p) key += fmt::format("{}:{},", units[static_cast<size_t>(u)].devices.front(), units[static_cast<size_t>(u)].tp);
      key += ';';
    }
    if (!seen_layouts.insert(key).second) return;
    if (options.identical_only) {
      for (const auto& p : layout) {
        if (p.size() != layout.front().size()) return;
        for (size_t i = 0; i < p.size(); ++i) {
          if (units[static_cast<size_t>(p[i])].type != units[static_cast<size_t>(layout.front()[i])].type) return;
        }
      }
    }
    ++layouts;
    LayoutJob job{units_ptr, layout, what, single_type, single_tp, IdenticalShape(units, layout)};
    if (threads == 1) {
      // The records tighten after every evaluation, as they are applied at once.
      RunLayout(
          job, [&] { return PruneAbove(job.single_type, job.single_tp, job.identical_shape); },
          [&](Outcome o) { Apply(job, std::move(o)); });
      return;
    }
    pending.push_back(std::move(job));
    if (static_cast<int>(pending.size()) >= 4 * threads) Flush();
  }

  // Evaluates the queued layouts on `threads` threads, each against the records as they stood
  // when the batch started (looser than the one-thread search's, so pruning stays exact), then
  // applies their outcomes in queue order: the records end as with one thread.
  void Flush() {
    if (pending.empty()) return;
    for (LayoutJob& job : pending) {
      job.prune_above = PruneAbove(job.single_type, job.single_tp, job.identical_shape);
    }
    std::vector<std::vector<Outcome>> outcomes(pending.size());
    ParallelFor(pending.size(), threads, [&](size_t i) {
      const LayoutJob& job = pending[i];
      RunLayout(
          job, [&] { return job.prune_above; },
          [&](Outcome o) { outcomes[i].push_back(std::move(o)); });
    });
    for (size_t i = 0; i < pending.size(); ++i) {
      for (Outcome& o : outcomes[i]) Apply(pending[i], std::move(o));
    }
    pending.clear();
  }

  // Evaluates one layout over micro-batch sizes and recompute choices, reporting each evaluation
  // to `emit` in order. Reads only the options and the predictor: safe on any thread.
  void RunLayout(const LayoutJob& job, const std::function<double()>& prune_above,
                 const std::function<void(Outcome)>& emit) const {
    const LayoutEvaluator evaluator(predictor, *job.units, options.rates, options.link_rates);
    for (int64_t b : options.micro_batch_sizes) {
      if (b < 1 || train.global_batch % b != 0) continue;
      bool fits = false;
      for (spec::Recompute rec : options.recompute) {
        EvalSettings es;
        es.micro_batch_size = b;
        es.recompute = rec;
        es.schedule = options.schedule;
        es.shardings = options.shardings;
        es.polish_max_stages = small ? 16 : 0;
        es.interleave_chunks = options.interleave_chunks;
        if (options.prune) es.prune_above = prune_above();
        LayoutEval ev = evaluator.Evaluate(job.layout, es);
        Outcome o;
        if (ev.pruned) {
          // No recompute choice at this b can enter the ranking or a per-type record; a larger
          // micro-batch may still be faster.
          o.pruned = true;
          emit(std::move(o));
          fits = true;
          break;
        }
        if (!ev.feasible) {
          const bool memory = ev.reason.rfind("memory", 0) == 0;
          o.reason = std::move(ev.reason);
          emit(std::move(o));
          if (memory) continue;  // heavier recompute may fit
          break;
        }
        Candidate c;
        c.plan = std::move(ev.plan);
        c.prediction = std::move(ev.prediction);
        c.description = fmt::format("{}, b={}, recompute={}{}", job.what, b,
                                    spec::RecomputeSummary(c.plan), ShardingAndChunksNote(c.plan));
        c.plan.comment = "motley planner: " + c.description;
        o.candidate = std::move(c);
        emit(std::move(o));
        fits = true;
        break;  // lighter recompute fits: heavier only costs time
      }
      if (!fits) break;  // a larger micro-batch needs more memory and gives fewer micro-batches
    }
  }

  // Records one evaluation's outcome.
  void Apply(const LayoutJob& job, Outcome o) {
    ++evaluations;
    if (o.pruned) {
      ++pruned;
      return;
    }
    if (!o.candidate) {
      NoteReason(o.reason);
      return;
    }
    const Candidate& c = *o.candidate;
    if (job.single_type >= 0) {
      per_type_tp[job.single_type].emplace_back(c.prediction.iteration_s, job.single_tp);
      auto it = best_per_type.find(job.single_type);
      if (it == best_per_type.end() ||
          c.prediction.iteration_s < it->second.prediction.iteration_s) {
        best_per_type[job.single_type] = c;
      }
    }
    if (Identical(c.plan, cluster) &&
        (!best_identical || c.prediction.iteration_s < best_identical->prediction.iteration_s)) {
      best_identical = c;
    }
    Offer(c);
  }

  // Pipeline counts to try for U units (p = ceil(U/d) <= blocks).
  std::vector<int> DValues(int u) const {
    std::set<int> ds;
    const int L = static_cast<int>(model.num_blocks);
    if (small || u <= 64) {
      for (int d = 1; d <= u; ++d) {
        if ((u + d - 1) / d <= L) ds.insert(d);
      }
    } else {
      std::vector<int> ps;
      for (int p = 1; p <= std::min(L, 16); ++p) ps.push_back(p);
      for (int p = 20; p <= L; p = p * 5 / 4) ps.push_back(p);
      for (int p : ps) {
        const int d = u / p;
        if (d >= 1 && (u + d - 1) / d <= L) ds.insert(d);
        if (d + 1 <= u && (u + d) / (d + 1) <= L) ds.insert(d + 1);
      }
    }
    return {ds.begin(), ds.end()};
  }

  void SearchTypes(const std::vector<int>& types, const TpAssignment& tp, int single_type) {
    const std::vector<Unit> all_units = BuildUnits(cluster, tp);
    if (all_units.empty()) return;
    if (!small || all_units.size() > 6) {
      SearchUnits(types, tp, single_type, all_units);
      Flush();
      return;
    }
    // Small instances: every subset of the units that keeps each type of `types` present.
    const size_t n = all_units.size();
    for (size_t mask = 1; mask < (size_t{1} << n); ++mask) {
      std::vector<Unit> subset;
      for (size_t i = 0; i < n; ++i) {
        if (mask & (size_t{1} << i)) subset.push_back(all_units[i]);
      }
      bool all_types = true;
      for (int t : types) {
        all_types &= std::any_of(subset.begin(), subset.end(), [&](const Unit& u) { return u.type == t; });
      }
      if (all_types) SearchUnits(types, tp, single_type, subset);
    }
    Flush();
  }

  void SearchUnits(const std::vector<int>& types, const TpAssignment& tp, int single_type,
                   const std::vector<Unit>& unit_list) {
    const auto units_ptr = std::make_shared<const std::vector<Unit>>(unit_list);
    const std::vector<Unit>& units = *units_ptr;
    const std::vector<Bucket> buckets = BucketUnits(units);
    const int u = static_cast<int>(units.size());
    // Type orders: by memory descending (memory-first placement: early stages hold the most
    // in-flight activations) and ascending; every permutation on small instances.
    std::vector<std::vector<int>> orders;
    std::vector<int> by_mem = types;
    std::stable_sort(by_mem.begin(), by_mem.end(), [&](int a, int b) {
      return cluster.device_types[static_cast<size_t>(a)].memory_bytes >
             cluster.device_types[static_cast<size_t>(b)].memory_bytes;
    });
    if (small) {
      std::vector<int> perm = types;
      std::sort(perm.begin(), perm.end());
      do orders.push_back(perm);
      while (std::next_permutation(perm.begin(), perm.end()));
    } else {
      orders.push_back(by_mem);
      if (types.size() > 1) orders.emplace_back(by_mem.rbegin(), by_mem.rend());
    }
    const std::string tps = [&] {
      std::string s;
      for (int t : types)
        s += fmt::format("{}{} tp{}", s.empty() ? "" : ", ",
                         cluster.device_types[static_cast<size_t>(t)].name,
                         tp[static_cast<size_t>(t)]);
      return s;
    }();
    const int single_tp = single_type >= 0 ? tp[static_cast<size_t>(single_type)] : 0;
    for (const Placement placement : {Placement::kContiguous, Placement::kStrided}) {
      const char* pl = placement == Placement::kContiguous ? "contiguous" : "strided";
      for (const auto& order : orders) {
        for (int d : DValues(u)) {
          TryLayout(units_ptr, BalancedLayout(units, buckets, d, placement, order),
                    fmt::format("balanced d={} {} [{}]", d, pl, tps), single_type, single_tp);
          if (small && buckets.size() <= 5) {
            // Every order of the buckets (stage order across islands too).
            std::vector<Bucket> perm = buckets;
            std::vector<size_t> idx(perm.size());
            for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
            do {
              for (size_t i = 0; i < idx.size(); ++i) perm[i] = buckets[idx[i]];
              TryLayout(units_ptr, BalancedLayout(units, perm, d, placement, {}),
                        fmt::format("balanced d={} {} bucket order [{}]", d, pl, tps), single_type,
                        single_tp);
            } while (std::next_permutation(idx.begin(), idx.end()));
          }
        }
        for (int key = 0; key < 2; ++key) {
          const std::vector<int> keys = SegregationKeys(buckets, key);
          if (keys.size() < 2) continue;
          std::vector<int> group_units(keys.size(), 0);
          for (const Bucket& b : buckets) {
            const int k = key == 0 ? b.type : b.island;
            const auto pos = std::find(keys.begin(), keys.end(), k) - keys.begin();
            group_units[static_cast<size_t>(pos)] += static_cast<int>(b.units.size());
          }
          std::set<std::vector<int>> choices;
          // Same stage count p everywhere, and (small instances) every combination.
          const int L = static_cast<int>(model.num_blocks);
          for (int p = 1; p <= L; ++p) {
            std::vector<int> ds;
            for (int gu : group_units) ds.push_back(std::max(1, gu / p));
            choices.insert(ds);
            if (!small && p > 16) p = p * 5 / 4;
          }
          if (small) {
            std::vector<int> ds(keys.size(), 0);
            std::function<void(size_t)> rec = [&](size_t g) {
              if (g == keys.size()) {
                if (std::any_of(ds.begin(), ds.end(), [](int x) { return x > 0; })) choices.insert(ds);
                return;
              }
              for (int x = 0; x <= group_units[g]; ++x) {
                ds[g] = x;
                rec(g + 1);
              }
            };
            rec(0);
          }
          for (const auto& ds : choices) {
            std::string dstr;
            for (int x : ds) dstr += fmt::format("{}{}", dstr.empty() ? "" : ",", x);
            TryLayout(units_ptr,
                      SegregatedLayout(units, buckets, key, ds, placement, order, nullptr),
                      fmt::format("segregated by {} d=({}) {} [{}]", key == 0 ? "type" : "island",
                                  dstr, pl, tps),
                      single_type, single_tp);
          }
        }
      }
    }
  }
};

}  // namespace

Result<PlanReport> PlanCluster(const perf::Predictor& predictor, const PlannerOptions& options) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  const spec::ModelSpec& model = predictor.model();
  Search s(predictor, options);
  std::vector<int> types = options.only_types;
  if (types.empty()) {
    const std::vector<int> counts = cluster.DevicesPerType();
    for (size_t t = 0; t < counts.size(); ++t) {
      if (counts[t] > 0) types.push_back(static_cast<int>(t));
    }
  }
  s.small = static_cast<int>(BuildUnits(cluster, TpAssignment(cluster.device_types.size(), 1)).size()) <= 8;
  s.tp_order_matters = !s.small && types.size() >= 2;
  auto progress = [&](std::string_view what, double f) {
    if (options.progress) options.progress(what, f);
  };
  // Phase 1: each type alone, every valid TP degree.
  std::map<int, std::vector<int>> tp_choices;
  for (size_t i = 0; i < types.size(); ++i) {
    const int t = types[i];
    progress(fmt::format("type {}", cluster.device_types[static_cast<size_t>(t)].name),
             0.5 * static_cast<double>(i) / static_cast<double>(types.size()));
    for (int tp : ValidTp(cluster, model, options, t)) {
      TpAssignment a(cluster.device_types.size(), 0);
      a[static_cast<size_t>(t)] = tp;
      s.SearchTypes({t}, a, t);
    }
    auto& found = s.per_type_tp[t];
    std::sort(found.begin(), found.end());
    // The TP degrees mixed layouts try for this type: on small clusters every valid one (a degree
    // with which the type cannot hold the whole model alone may still fit as one stage of a mixed
    // pipeline); otherwise the two fastest of the type alone, or every valid one when none fits.
    std::vector<int> best_tp;
    if (!s.small) {
      for (const auto& [time, tp] : found) {
        if (std::find(best_tp.begin(), best_tp.end(), tp) == best_tp.end()) best_tp.push_back(tp);
        if (best_tp.size() == static_cast<size_t>(kMixedTpDegrees)) break;
      }
    }
    if (best_tp.empty()) best_tp = ValidTp(cluster, model, options, t);
    tp_choices[t] = best_tp;
  }
  // Phase 2: larger subsets of types.
  const size_t nt = types.size();
  for (size_t mask = 1; mask < (size_t{1} << nt); ++mask) {
    std::vector<int> subset;
    for (size_t i = 0; i < nt; ++i) {
      if (mask & (size_t{1} << i)) subset.push_back(types[i]);
    }
    if (subset.size() < 2) continue;
    progress(fmt::format("{} types", subset.size()), 0.5 + 0.4 * static_cast<double>(mask) /
                                                               static_cast<double>(size_t{1} << nt));
    TpAssignment a(cluster.device_types.size(), 0);
    std::function<void(size_t)> rec = [&](size_t i) {
      if (i == subset.size()) {
        s.SearchTypes(subset, a, -1);
        return;
      }
      for (int tp : tp_choices[subset[i]]) {
        a[static_cast<size_t>(subset[i])] = tp;
        rec(i + 1);
      }
    };
    rec(0);
  }
  if (s.top.empty())
    return ExplainNoPlan(predictor, options, s.reasons, s.reason_counts, s.layouts);
  PlanReport report;
  report.ranked = s.top;
  const sim::Simulator simulator(predictor);
  sim::SimOptions so;
  so.rates = options.rates;
  so.links = options.link_rates;
  // The candidates the simulator confirms (the finalists): the first confirm_top of the ranking.
  const size_t finalists =
      std::min(report.ranked.size(), static_cast<size_t>(std::max(options.confirm_top, 0)));
  // At scale the search polishes and interleaves none of its evaluations
  // (EvalSettings::polish_max_stages) and ranks plans at one chunk with the sharding it split
  // with, so a candidate that wins only once reshaped (the other optimizer sharding, or
  // interleaved; plan/sharding.h) can rank below the finalists.
  // 1. The finalists are chosen by reshaped prediction: every ranked candidate is reshaped by
  //    ShardingAndChunksIfFaster (predictions only, a few per candidate) and the ranking is
  //    ordered by those predictions (stable). The candidates keep their own plans for now.
  // 2. Each finalist gets the local search (moves by distinct block split), then the reshaping
  //    again, of the polished plan; where the polish changed nothing, step 1's result is reused.
  //    Each improved variant (polished; polished and reshaped) is judged on its own by the
  //    simulation, the final judge: the fastest simulated of the candidate and its variants
  //    predicted faster replaces it, so a reshaped plan the simulation rejects does not take the
  //    polish with it. The simulated time of the one kept is kept for the confirmation.
  // 3. The ranking is redone by prediction (stable). A finalist chosen for its reshaped
  //    prediction that kept its own plan can move below a candidate that was not a finalist; the
  //    confirmation below simulates the first `finalists` of the new ranking, and the choice is
  //    the fastest simulated candidate of the whole ranking.
  const bool reshapes = options.shardings.size() > 1 || !options.interleave_chunks.empty();
  struct Reshaped {
    Candidate candidate;   // the ranked candidate after ShardingAndChunksIfFaster
    bool changed = false;  // whether that changed its plan
  };
  std::vector<Reshaped> reshaped_of;  // parallel to report.ranked; empty where not reshaped
  if (!s.small && finalists > 0 && reshapes) {
    reshaped_of.resize(report.ranked.size());
    ParallelFor(report.ranked.size(), s.threads, [&](size_t i) {
      Reshaped& r = reshaped_of[i];
      r.candidate = report.ranked[i];
      r.changed = ShardingAndChunksIfFaster(predictor, options.shardings, options.interleave_chunks,
                                            options.rates, options.link_rates, &r.candidate.plan,
                                            &r.candidate.prediction);
    });
    std::vector<size_t> order(report.ranked.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return reshaped_of[a].candidate.prediction.iteration_s <
             reshaped_of[b].candidate.prediction.iteration_s;
    });
    std::vector<Candidate> by_reshaped;
    std::vector<Reshaped> reshaped_in_order;
    for (size_t i : order) {
      by_reshaped.push_back(std::move(report.ranked[i]));
      reshaped_in_order.push_back(std::move(reshaped_of[i]));
    }
    report.ranked = std::move(by_reshaped);
    reshaped_of = std::move(reshaped_in_order);
  }
  if (!s.small && finalists > 0 && (options.finalist_polish_moves > 0 || reshapes)) {
    progress("polishing", 0.88);
    const std::vector<Unit> no_units;  // Polish reads the plan and the predictor only
    const LayoutEvaluator evaluator(predictor, no_units, options.rates, options.link_rates);
    // The polish first, one finalist at a time with each round's moves on every thread: one
    // finalist's polish can take most of the phase, which one thread per finalist would leave
    // to a single core.
    std::vector<Candidate> polished_of(
        report.ranked.begin(), report.ranked.begin() + static_cast<std::ptrdiff_t>(finalists));
    if (options.finalist_polish_moves > 0) {
      for (Candidate& polished : polished_of) {
        evaluator.Polish(&polished.plan, &polished.prediction, options.finalist_polish_moves,
                         LayoutEvaluator::Moves::kPerSplit, s.threads);
      }
    }
    ParallelFor(finalists, s.threads, [&](size_t i) {
      Candidate& c = report.ranked[i];
      Candidate& polished = polished_of[i];
      // Polish changes the plan only when it finds a faster one.
      const bool polish_changed = polished.prediction.iteration_s < c.prediction.iteration_s;
      if (polish_changed) polished.description += ", polished";
      Candidate reshaped;
      bool changed = false;
      if (!polish_changed && !reshaped_of.empty()) {
        reshaped = reshaped_of[i].candidate;
        changed = reshaped_of[i].changed;
      } else {
        reshaped = polished;
        changed = ShardingAndChunksIfFaster(predictor, options.shardings, options.interleave_chunks,
                                            options.rates, options.link_rates, &reshaped.plan,
                                            &reshaped.prediction);
      }
      if (changed) reshaped.description += ShardingAndChunksNote(reshaped.plan);
      std::vector<Candidate*> variants;
      if (polish_changed) variants.push_back(&polished);
      if (changed && reshaped.prediction.iteration_s < c.prediction.iteration_s) {
        variants.push_back(&reshaped);
      }
      if (variants.empty()) return;
      const Result<sim::SimResult> was = simulator.Run(c.plan, so);
      if (!was.ok()) return;  // the confirmation reports the error
      c.simulated_s = was->iteration_s;
      Candidate* best = nullptr;
      double best_s = was->iteration_s;
      for (Candidate* variant : variants) {
        const Result<sim::SimResult> now = simulator.Run(variant->plan, so);
        if (!now.ok() || now->iteration_s >= best_s) continue;
        variant->simulated_s = now->iteration_s;
        best_s = now->iteration_s;
        best = variant;
      }
      if (best == nullptr) return;
      best->plan.comment = "motley planner: " + best->description;
      c = std::move(*best);
    });
    std::stable_sort(report.ranked.begin(), report.ranked.end(), Search::PredictedFaster);
  }
  report.layouts_considered = s.layouts;
  report.evaluations = s.evaluations;
  report.evaluations_pruned = s.pruned;
  // Confirm the finalists with the simulator: those the polish has not simulated, side by side;
  // then taken in rank order (the first of equals, the first error).
  progress("simulating", 0.9);
  std::vector<std::optional<Result<sim::SimResult>>> runs(finalists);
  ParallelFor(finalists, s.threads, [&](size_t i) {
    if (report.ranked[i].simulated_s <= 0)
      runs[i].emplace(simulator.Run(report.ranked[i].plan, so));
  });
  for (size_t i = 0; i < finalists; ++i) {
    if (runs[i].has_value()) {
      if (!runs[i]->ok()) return runs[i]->status();
      report.ranked[i].simulated_s = (*runs[i])->iteration_s;
    }
  }
  size_t best_index = 0;
  for (size_t i = 1; i < report.ranked.size(); ++i) {
    const double t = report.ranked[i].simulated_s;
    if (t > 0 && t < report.ranked[best_index].simulated_s) best_index = i;
  }
  report.best = report.ranked[best_index];
  report.tokens_per_step = predictor.train().global_batch * predictor.train().seq_len;
  auto simulate = [&](Candidate* c) -> Status {
    if (c->simulated_s > 0) return Status::Ok();
    MOTLEY_ASSIGN_OR_RETURN(sim::SimResult r, simulator.Run(c->plan, so));
    c->simulated_s = r.iteration_s;
    return Status::Ok();
  };
  // Baselines and references.
  report.compute_bound_tokens_per_s =
      ComputeBoundTokensPerSecond(predictor, options.micro_batch_sizes, options.tp_degrees);
  if (options.baselines) {
    progress("baselines", 0.95);
    Baseline uniform{"uniform (Megatron-style, whole cluster)", false, "", {}};
    auto u = BestUniformPlan(predictor, options);
    if (u.ok()) {
      uniform.found = true;
      uniform.candidate = *u;
      MOTLEY_RETURN_IF_ERROR(simulate(&uniform.candidate));
    } else {
      uniform.why_not = u.status().message();
    }
    uniform.kind = BaselineKind::kUniform;
    report.baselines.push_back(uniform);
    Baseline homogeneous{"best homogeneous sub-cluster", false, "no single type fits", {}};
    for (auto& [type, cand] : s.best_per_type) {
      MOTLEY_RETURN_IF_ERROR(simulate(&cand));
      const double tps = cand.TokensPerSecond(report.tokens_per_step);
      if (!homogeneous.found ||
          tps > homogeneous.candidate.TokensPerSecond(report.tokens_per_step)) {
        homogeneous.found = true;
        homogeneous.name = fmt::format("best homogeneous sub-cluster ({})",
                                       cluster.device_types[static_cast<size_t>(type)].name);
        homogeneous.candidate = cand;
      }
    }
    progress("homogeneous sum", 0.97);
    report.homogeneous_shares = HomogeneousShares(predictor, options);
    report.homogeneous_sum_tokens_per_s = SumTokensPerSecond(report.homogeneous_shares);
    homogeneous.kind = BaselineKind::kHomogeneous;
    report.baselines.push_back(homogeneous);
    Baseline identical{"identical pipelines only", s.best_identical.has_value(),
                       s.best_identical ? "" : "no layout with identical pipelines fits", {}};
    if (s.best_identical) {
      identical.candidate = *s.best_identical;
      MOTLEY_RETURN_IF_ERROR(simulate(&identical.candidate));
    }
    identical.kind = BaselineKind::kIdentical;
    report.baselines.push_back(identical);
    if (options.exhaustive_max_units > 0) {
      auto ex = ExhaustiveSearch(predictor, options, options.exhaustive_max_units,
                                 options.exhaustive_max_plans);
      if (ex.ok()) report.exhaustive_tokens_per_s = ex->prediction.tokens_per_s;
    }
  }
  // A baseline the simulator finds faster than every confirmed candidate is the better answer;
  // it then heads the ranked table, so that the chosen plan is always in it.
  for (const Baseline& b : report.baselines) {
    if (b.found && b.candidate.simulated_s > 0 && b.candidate.simulated_s < report.best.simulated_s) {
      report.best = b.candidate;
    }
  }
  const bool ranked =
      std::any_of(report.ranked.begin(), report.ranked.end(), [&](const Candidate& c) {
        return c.description == report.best.description && c.simulated_s == report.best.simulated_s;
      });
  if (!ranked) report.ranked.insert(report.ranked.begin(), report.best);
  const double tps = report.best.TokensPerSecond(report.tokens_per_step);
  report.mfu_used = MfuAt(predictor, tps, spec::PlanDevices(report.best.plan));
  std::vector<int> all(static_cast<size_t>(cluster.num_devices()));
  for (size_t d = 0; d < all.size(); ++d) all[d] = static_cast<int>(d);
  report.mfu_all = MfuAt(predictor, tps, all);
  std::vector<const Candidate*> others;
  for (const Candidate& c : report.ranked) others.push_back(&c);
  for (const Baseline& b : report.baselines) {
    if (b.found) others.push_back(&b.candidate);
  }
  report.left_out = ExplainLeftOut(predictor, options, report.best, others, report.tokens_per_step);
  progress("done", 1.0);
  return report;
}

}  // namespace motley::plan
