// See replan.h.
#include "plan/replan.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "perf/comm_model.h"
#include "plan/evaluate.h"
#include "plan/units.h"

namespace motley::plan {
namespace {

// What one device holds: block ranges [first, end) (one per model chunk: several under
// interleaved 1F1B), embedding, head, at TP degree tp.
struct Holding {
  std::vector<std::pair<int64_t, int64_t>> blocks;
  bool embedding = false;
  bool head = false;
  int tp = 0;
  int64_t num_blocks() const {
    int64_t n = 0;
    for (const auto& [first, end] : blocks) n += end - first;
    return n;
  }
  // Blocks held in both (each holding's ranges are disjoint).
  int64_t Common(const Holding& other) const {
    int64_t n = 0;
    for (const auto& [a0, a1] : blocks) {
      for (const auto& [b0, b1] : other.blocks)
        n += std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
    }
    return n;
  }
};

std::map<int, Holding> Holdings(const spec::Plan& plan) {
  std::map<int, Holding> out;
  for (const spec::PipelinePlan& pipe : plan.pipelines) {
    for (const spec::StagePlan& st : pipe.stages) {
      for (int d : st.devices) {
        Holding& h = out[d];
        h.blocks.emplace_back(st.first_block, st.end_block());
        h.embedding = h.embedding || st.has_embedding;
        h.head = h.head || st.has_head;
        h.tp = st.tp_degree;
      }
    }
  }
  return out;
}

// Re-splits often tie (the step is bound elsewhere): shifts each stage boundary of the re-split
// back toward where it is in `current`, one block at a time, while the predicted step does not
// get slower and the plan fits, so that among equally fast splits the one moving least state wins.
void TowardCurrent(const perf::Predictor& predictor, const spec::Plan& current,
                   const perf::StragglerRates& rates, const perf::LinkRates& links,
                   LayoutEval* ev) {
  spec::Plan& plan = ev->plan;
  bool moved = true;
  while (moved) {
    moved = false;
    for (size_t k = 0; k < plan.pipelines.size() && k < current.pipelines.size(); ++k) {
      const auto& old = current.pipelines[k].stages;
      if (plan.pipelines[k].stages.size() != old.size()) continue;
      for (size_t i = 0; i + 1 < old.size(); ++i) {
        const int64_t want = old[i].end_block();
        const int64_t have = plan.pipelines[k].stages[i].end_block();
        if (want == have) continue;
        spec::Plan cand = plan;
        auto& cs = cand.pipelines[k].stages;
        const int64_t step = want > have ? 1 : -1;
        cs[i].num_blocks += step;
        cs[i + 1].num_blocks -= step;
        if (cs[i].num_blocks < 0 || cs[i + 1].num_blocks < 0) continue;
        if (cs[i].num_blocks == 0 && !cs[i].has_embedding && !cs[i].has_head) continue;
        if (cs[i + 1].num_blocks == 0 && !cs[i + 1].has_embedding && !cs[i + 1].has_head) continue;
        cs[i + 1].first_block = cs[i].end_block();
        perf::Prediction pred = predictor.Predict(cand, rates, links);
        if (!pred.fits_memory || pred.iteration_s > ev->prediction.iteration_s * (1 + 1e-9)) continue;
        plan = std::move(cand);
        ev->prediction = std::move(pred);
        moved = true;
      }
    }
  }
}

}  // namespace

void MovedState(const perf::Predictor& predictor, const spec::Plan& current, const spec::Plan& next,
                Bytes* moved_bytes, Seconds* migration_s) {
  const spec::ModelSpec& model = predictor.model();
  const spec::ClusterSpec& cluster = predictor.cluster();
  // Bytes of state per parameter that must move: weights + master weights + two moments (bf16
  // mixed: 2 + 4 + 8), or weights + moments (fp32: 4 + 8). Gradients are rebuilt each step.
  const double per_param = predictor.settings().precision == spec::Precision::kFp32 ? 12.0 : 14.0;
  const std::map<int, Holding> old_h = Holdings(current);
  const std::map<int, Holding> new_h = Holdings(next);
  *moved_bytes = 0;
  *migration_s = 0;
  for (const auto& [device, h] : new_h) {
    double params = 0;
    const auto it = old_h.find(device);
    const bool same_tp = it != old_h.end() && it->second.tp == h.tp;
    const int64_t kept = same_tp ? h.Common(it->second) : 0;
    params += static_cast<double>(h.num_blocks() - kept) * static_cast<double>(model.BlockParams());
    if (h.embedding && !(same_tp && it->second.embedding)) params += static_cast<double>(model.EmbeddingParams());
    if (h.head && !(same_tp && it->second.head)) params += static_cast<double>(model.HeadParams());
    const Bytes bytes = params / h.tp * per_param;
    *moved_bytes += bytes;
    if (bytes > 0) {
      const Seconds t = bytes / perf::NodeNicBandwidth(cluster, cluster.device(device).node);
      *migration_s = std::max(*migration_s, t);
    }
  }
}

Result<ReplanResult> Replan(const perf::Predictor& predictor, const spec::Plan& current,
                            const ReplanOptions& options) {
  const perf::StragglerRates& rates = options.planner.rates;
  const perf::LinkRates& links = options.planner.link_rates;
  ReplanResult result;
  const double horizon = static_cast<double>(options.horizon_steps);
  auto choice = [&](Candidate c) {
    ReplanChoice ch;
    MovedState(predictor, current, c.plan, &ch.moved_bytes, &ch.migration_s);
    ch.score_s = horizon * c.prediction.iteration_s + ch.migration_s;
    ch.candidate = std::move(c);
    return ch;
  };
  result.current =
      choice(Candidate{current, predictor.Predict(current, rates, links), 0, "current plan"});
  result.chosen = result.current;
  // Current layout (its device groups), re-split for the new rates.
  std::vector<Unit> units;
  Layout layout;
  for (const spec::PipelinePlan& pipe : current.pipelines) {
    layout.emplace_back();
    for (int g = 0; g < pipe.num_stages(); ++g) {
      const spec::StagePlan& st = pipe.stages[static_cast<size_t>(g)];
      Unit u;
      u.devices = st.devices;
      u.tp = st.tp_degree;
      u.type = predictor.cluster().device(st.devices.front()).type;
      u.node = predictor.cluster().device(st.devices.front()).node;
      u.island = predictor.cluster().device(st.devices.front()).island;
      layout.back().push_back(static_cast<int>(units.size()));
      units.push_back(std::move(u));
    }
  }
  const LayoutEvaluator evaluator(predictor, units, rates, links);
  EvalSettings es;
  es.micro_batch_size = current.pipelines.front().micro_batch_size;
  es.recompute = spec::HeaviestRecompute(current);
  es.schedule = current.schedule;
  es.shardings = {current.optimizer_sharding};
  es.interleave_chunks = options.planner.interleave_chunks;
  LayoutEval ev = evaluator.Evaluate(layout, es);
  if (ev.feasible) TowardCurrent(predictor, current, rates, links, &ev);
  if (ev.feasible) {
    // Keep the blocks where they are when the re-split is not faster (no needless moves).
    if (ev.prediction.iteration_s < result.current.candidate.prediction.iteration_s) {
      ev.plan.comment = "re-split of the current layout for the new straggler rates";
      result.rebalanced = choice(Candidate{ev.plan, ev.prediction, 0, "current layout, re-split"});
    } else {
      result.rebalanced = result.current;
    }
    if (result.rebalanced.score_s < result.chosen.score_s) result.chosen = result.rebalanced;
  }
  PlannerOptions po = options.planner;
  po.baselines = false;
  auto planned = PlanCluster(predictor, po);
  if (planned.ok()) {
    for (const Candidate& c : planned->ranked) {
      result.fresh.push_back(choice(c));
      if (result.fresh.back().score_s < result.chosen.score_s) result.chosen = result.fresh.back();
    }
  }
  return result;
}

}  // namespace motley::plan
