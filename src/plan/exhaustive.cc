// See exhaustive.h. Recursion over: TP assignment -> units -> subset + partition into ordered
// pipelines (each unit is skipped, or appended to an existing pipeline at any position, or
// starts a new pipeline; pipelines are unordered, so a new one only opens after the last) -> per
// (b, recompute): block splits per pipeline x micro-batch splits x interleaving degrees (one
// chunk, and each of PlannerOptions::interleave_chunks where plan/interleave.h allows it).
#include "plan/exhaustive.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "plan/interleave.h"
#include "plan/sharding.h"
#include "plan/units.h"

namespace motley::plan {
namespace {

// All compositions of `total` into `parts` parts each >= min_part.
void Compositions(int64_t total, size_t parts, int64_t min_part,
                  std::vector<std::vector<int64_t>>* out) {
  std::vector<int64_t> cur;
  std::function<void(int64_t, size_t)> rec = [&](int64_t left, size_t k) {
    if (k + 1 == parts) {
      if (left >= min_part) {
        cur.push_back(left);
        out->push_back(cur);
        cur.pop_back();
      }
      return;
    }
    for (int64_t x = min_part; left - x >= min_part * static_cast<int64_t>(parts - k - 1); ++x) {
      cur.push_back(x);
      rec(left - x, k + 1);
      cur.pop_back();
    }
  };
  if (parts > 0) rec(total, 0);
}

}  // namespace

Result<ExhaustiveResult> ExhaustiveSearch(const perf::Predictor& predictor,
                                          const PlannerOptions& options, int max_units,
                                          int64_t max_plans) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  const spec::ModelSpec& model = predictor.model();
  const spec::TrainSpec& train = predictor.train();
  const size_t ntypes = cluster.device_types.size();
  // Valid TP degrees per type.
  std::vector<std::vector<int>> tps(ntypes);
  for (size_t t = 0; t < ntypes; ++t) {
    int smallest_node = std::numeric_limits<int>::max();
    for (const spec::NodeSpec& n : cluster.nodes) {
      if (n.device_type == cluster.device_types[t].name) smallest_node = std::min(smallest_node, n.device_count);
    }
    for (int d : options.tp_degrees) {
      if (d <= smallest_node && model.SplitsForTensorParallel(d) && model.vocab_size % d == 0) {
        tps[t].push_back(d);
      }
    }
    if (tps[t].empty()) tps[t].push_back(1);
  }
  TpAssignment ones(ntypes, 1);
  if (static_cast<int>(BuildUnits(cluster, ones).size()) > max_units) {
    return Err("exhaustive search: more than {} TP groups", max_units);
  }
  ExhaustiveResult best;
  double best_s = std::numeric_limits<double>::infinity();
  int64_t scored = 0;      // predictions, interleaved variants included
  int64_t enumerated = 0;  // one-chunk plans: what max_plans bounds
  TpAssignment tp(ntypes, 1);
  std::function<void(size_t)> over_tp = [&](size_t t) {
    if (t < ntypes) {
      for (int d : tps[t]) {
        tp[t] = d;
        over_tp(t + 1);
      }
      return;
    }
    const std::vector<Unit> units = BuildUnits(cluster, tp);
    Layout layout;
    std::function<void(size_t)> over_units = [&](size_t u) {
      if (u == units.size()) {
        if (layout.empty()) return;
        const int64_t d = static_cast<int64_t>(layout.size());
        for (int64_t b : options.micro_batch_sizes) {
          if (train.global_batch % b != 0) continue;
          const int64_t total_m = train.global_batch / b;
          for (spec::Recompute rec : options.recompute) {
            spec::Plan plan;
            plan.schedule = options.schedule;
            const std::vector<spec::OptimizerSharding> shardings =
                ShardingsFor(options.shardings, d);
            std::vector<std::vector<std::vector<int64_t>>> splits(layout.size());
            std::vector<int64_t> min_m;
            bool ok = true;
            for (size_t k = 0; k < layout.size(); ++k) {
              Compositions(model.num_blocks, layout[k].size(), 1, &splits[k]);
              if (splits[k].empty()) ok = false;
              min_m.push_back(static_cast<int64_t>(layout[k].size()));
              spec::PipelinePlan pipe;
              pipe.micro_batch_size = b;
              for (size_t i = 0; i < layout[k].size(); ++i) {
                const Unit& un = units[static_cast<size_t>(layout[k][i])];
                spec::StagePlan st;
                st.devices = un.devices;
                st.tp_degree = un.tp;
                st.has_embedding = i == 0;
                st.has_head = i + 1 == layout[k].size();
                st.recompute = rec;
                pipe.stages.push_back(st);
              }
              plan.pipelines.push_back(pipe);
            }
            if (!ok) continue;
            std::vector<std::vector<int64_t>> msplits;
            {
              // Micro-batch splits: compositions with per-pipeline minimum = stages.
              std::vector<int64_t> cur;
              std::function<void(int64_t, size_t)> rec_m = [&](int64_t left, size_t k) {
                if (k + 1 == layout.size()) {
                  if (left >= min_m[k]) {
                    cur.push_back(left);
                    msplits.push_back(cur);
                    cur.pop_back();
                  }
                  return;
                }
                for (int64_t x = min_m[k]; x <= left; ++x) {
                  cur.push_back(x);
                  rec_m(left - x, k + 1);
                  cur.pop_back();
                }
              };
              rec_m(total_m, 0);
            }
            if (msplits.empty()) continue;
            std::vector<size_t> idx(layout.size(), 0);
            std::function<void(size_t)> over_splits = [&](size_t k) {
              if (k < layout.size()) {
                for (const auto& s : splits[k]) {
                  for (size_t i = 0; i < s.size(); ++i) {
                    plan.pipelines[k].stages[i].num_blocks = s[i];
                  }
                  spec::RenumberBlocks(&plan.pipelines[k]);
                  over_splits(k + 1);
                }
                return;
              }
              for (const auto& ms : msplits) {
                if (enumerated >= max_plans) return;  // over budget: the caller gets an error
                ++enumerated;
                for (size_t j = 0; j < ms.size(); ++j) plan.pipelines[j].micro_batches = ms[j];
                auto score = [&](const spec::Plan& scored_plan) {
                  const perf::Prediction pred =
                      predictor.Predict(scored_plan, options.rates, options.link_rates);
                  ++scored;
                  if (pred.fits_memory && pred.iteration_s < best_s) {
                    best_s = pred.iteration_s;
                    best.plan = scored_plan;
                    best.prediction = pred;
                  }
                };
                for (spec::OptimizerSharding sharding : shardings) {
                  plan.optimizer_sharding = sharding;
                  score(plan);
                  for (int v : options.interleave_chunks) {
                    spec::Plan interleaved;
                    if (InterleavedWhereAllowed(plan, v, &interleaved)) score(interleaved);
                  }
                }
              }
            };
            over_splits(0);
          }
        }
        return;
      }
      // Skip unit u.
      over_units(u + 1);
      // Insert into an existing pipeline at any position.
      for (size_t k = 0; k < layout.size(); ++k) {
        for (size_t pos = 0; pos <= layout[k].size(); ++pos) {
          layout[k].insert(layout[k].begin() + static_cast<std::ptrdiff_t>(pos), static_cast<int>(u));
          over_units(u + 1);
          layout[k].erase(layout[k].begin() + static_cast<std::ptrdiff_t>(pos));
        }
      }
      // Start a new pipeline.
      layout.push_back({static_cast<int>(u)});
      over_units(u + 1);
      layout.pop_back();
    };
    over_units(0);
  };
  over_tp(0);
  if (enumerated >= max_plans) {
    return Err("exhaustive search: more than {} plans; instance too large", max_plans);
  }
  if (!std::isfinite(best_s)) return Err("exhaustive search: no plan fits ({} scored)", scored);
  best.plans_scored = scored;
  best.plan.comment = fmt::format("exhaustive optimum over {} plans", scored);
  return best;
}

}  // namespace motley::plan
