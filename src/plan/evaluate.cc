// See evaluate.h.
#include "plan/evaluate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <queue>

#include <fmt/format.h>

#include "core/parallel_for.h"
#include "perf/memory_model.h"
#include "perf/step_model.h"
#include "plan/interleave.h"
#include "plan/sharding.h"
#include "spec/plan_topology.h"

namespace motley::plan {
namespace {

// Stage cost as an affine function of its block count n (compute models are per block).
struct StageLine {
  double base = 0;       // forward + backward with 0 blocks (embedding/head), + boundary transfers
  double per_block = 0;  // forward + backward of one block
  double fwd0 = 0, fwd1 = 0, bwd0 = 0, bwd1 = 0;
  int64_t min_n = 1;
  int64_t max_n = 0;     // memory limit
  double Period(int64_t n) const { return base + static_cast<double>(n) * per_block; }
  int64_t MaxForPeriod(double t) const {
    if (Period(min_n) > t * (1 + 1e-12)) return -1;
    const double n = std::floor((t * (1 + 1e-12) - base) / per_block);
    // Compared in double first: a block time tiny against the period (a profile's 1e-300 s, a
    // huge link latency) makes n exceed int64, and the cast would be undefined (issue 17).
    if (!(n < static_cast<double>(max_n))) return max_n;
    return static_cast<int64_t>(n);
  }
};

struct ShapeSplit {
  bool ok = false;
  std::string reason;
  std::vector<int64_t> blocks;
  double fixed = 0;  // T(m = 1)
  double per = 0;    // steady-state period
  // Per stage at the split's blocks without recompute (the lightest, which LightenRecompute may
  // reach): the inputs of the pruning bound, perf::PipelinePhaseLowerBound.
  std::vector<double> bound_forward, bound_backward;
};

}  // namespace

std::vector<int64_t> SplitMicroBatches(const std::vector<double>& fixed,
                                       const std::vector<double>& per,
                                       const std::vector<int64_t>& min_m, int64_t total) {
  const size_t n = fixed.size();
  std::vector<int64_t> m = min_m;
  int64_t used = 0;
  for (int64_t x : m) used += x;
  if (used > total) return {};
  using Item = std::pair<double, size_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> heap;
  auto next_time = [&](size_t k) { return fixed[k] + static_cast<double>(m[k]) * per[k]; };
  for (size_t k = 0; k < n; ++k) heap.emplace(next_time(k), k);
  for (int64_t r = total - used; r > 0; --r) {
    const size_t k = heap.top().second;
    heap.pop();
    ++m[k];
    heap.emplace(next_time(k), k);
  }
  return m;
}

LayoutEvaluator::LayoutEvaluator(const perf::Predictor& predictor, const std::vector<Unit>& units,
                                 perf::StragglerRates rates, perf::LinkRates links)
    : predictor_(predictor), units_(units), rates_(std::move(rates)), links_(std::move(links)) {}

LayoutEval LayoutEvaluator::Evaluate(const Layout& layout, const EvalSettings& es) const {
  const spec::ModelSpec& model = predictor_.model();
  const spec::TrainSpec& train = predictor_.train();
  const spec::ClusterSpec& cluster = predictor_.cluster();
  LayoutEval out;
  const int64_t b = es.micro_batch_size;
  const int64_t L = model.num_blocks;
  if (layout.empty()) {
    out.reason = "no pipeline";
    return out;
  }
  if (train.global_batch % b != 0) {
    out.reason = fmt::format("batch: train.global_batch {} is not divisible by the micro-batch size {}",
                             train.global_batch, b);
    return out;
  }
  const int64_t total_m = train.global_batch / b;
  int64_t stages_total = 0;
  for (const auto& pipe : layout) {
    stages_total += static_cast<int64_t>(pipe.size());
    if (static_cast<int64_t>(pipe.size()) > L) {
      out.reason = fmt::format("depth: a pipeline of {} stages for a model of {} blocks", pipe.size(), L);
      return out;
    }
  }
  if (stages_total > total_m) {
    out.reason = fmt::format(
        "batch: {} pipelines with {} stages in all need at least that many micro-batches (one per "
        "stage each), but train.global_batch {} / micro-batch size {} gives {}",
        layout.size(), stages_total, train.global_batch, b, total_m);
    return out;
  }
  const int64_t d = static_cast<int64_t>(layout.size());
  spec::Plan& plan = out.plan;
  plan.schedule = es.schedule;
  plan.optimizer_sharding = ShardingsFor(es.shardings, d).front();
  for (const auto& units : layout) {
    spec::PipelinePlan pipe;
    pipe.micro_batch_size = b;
    for (size_t i = 0; i < units.size(); ++i) {
      const Unit& u = units_[static_cast<size_t>(units[i])];
      spec::StagePlan st;
      st.devices = u.devices;
      st.tp_degree = u.tp;
      st.has_embedding = i == 0;
      st.has_head = i + 1 == units.size();
      st.recompute = es.recompute;
      pipe.stages.push_back(std::move(st));
    }
    plan.pipelines.push_back(std::move(pipe));
  }
  const perf::Predictor::BoundaryTimes boundary = predictor_.SolveBoundaryTimes(plan, links_);
  const int64_t gpipe_m = (total_m + d - 1) / d;
  std::map<std::string, ShapeSplit> cache;
  std::vector<double> fixed(static_cast<size_t>(d));
  std::vector<double> per(static_cast<size_t>(d));
  std::vector<int64_t> min_m(static_cast<size_t>(d));
  std::vector<const ShapeSplit*> split_of(static_cast<size_t>(d));
  for (size_t k = 0; k < layout.size(); ++k) {
    spec::PipelinePlan& pipe = plan.pipelines[k];
    const size_t p = pipe.stages.size();
    std::vector<double> c(p, 0.0);
    std::string sig;
    for (size_t i = 0; i < p; ++i) {
      if (i + 1 < p) c[i] = boundary.Of(k, i);
      const Unit& u = units_[static_cast<size_t>(layout[k][i])];
      sig += fmt::format("{}/{}/{}/{}|", u.type, u.tp, perf::GroupRate(rates_, u.devices), c[i]);
    }
    auto it = cache.find(sig);
    if (it == cache.end()) {
      ShapeSplit split;
      std::vector<StageLine> lines(p);
      std::vector<spec::LinkClass> intra_links(p);
      std::vector<double> rates(p);
      for (size_t i = 0; i < p; ++i) {
        const Unit& u = units_[static_cast<size_t>(layout[k][i])];
        if (u.devices.size() > 1)
          intra_links[i] = predictor_.LinkOf(u.devices[0], u.devices[1], links_);
        const spec::LinkClass* intra = u.devices.size() > 1 ? &intra_links[i] : nullptr;
        const double rate = perf::GroupRate(rates_, u.devices);
        rates[i] = rate;
        const bool emb = i == 0;
        const bool head = i + 1 == p;
        const perf::StageCost c0 =
            predictor_.StageCostOfShape(u.type, u.tp, intra, 0, emb, head, b, es.recompute, rate);
        // The same stage with one block: the difference is one block's cost, the stage's fixed
        // costs (embedding, head, boundary copies) staying in c0 once.
        const perf::StageCost c1 =
            predictor_.StageCostOfShape(u.type, u.tp, intra, 1, emb, head, b, es.recompute, rate);
        StageLine& line = lines[i];
        line.fwd0 = c0.forward_s;
        line.bwd0 = c0.backward_s;
        line.fwd1 = c1.forward_s - c0.forward_s;
        line.bwd1 = c1.backward_s - c0.backward_s;
        line.base = c0.forward_s + c0.backward_s + (i > 0 ? c[i - 1] : 0.0) + c[i];
        line.per_block = line.fwd1 + line.bwd1;
        perf::StageMemoryInput in;
        in.has_embedding = emb;
        in.has_head = head;
        in.tp = u.tp;
        in.micro_batch_size = b;
        in.seq_len = train.seq_len;
        in.in_flight = es.schedule == spec::PipelineSchedule::k1F1B
                           ? static_cast<int64_t>(p - i)
                           : gpipe_m;
        in.dp_degree = d;
        in.recompute = es.recompute;
        in.sharding = plan.optimizer_sharding;
        const double cap = cluster.device_types[static_cast<size_t>(u.type)].memory_bytes;
        auto mem = [&](int64_t n) {
          in.num_blocks = n;
          return predictor_.StageMemoryForPlanning(in, es.schedule);
        };
        const double m1 = mem(1);
        if (m1 > cap) {
          line.max_n = 0;
        } else {
          const double slope = mem(2) - m1;
          line.max_n = slope > 0 ? 1 + static_cast<int64_t>(std::floor((cap - m1) / slope)) : L;
        }
        line.max_n = std::min(line.max_n, L);
      }
      int64_t most = 0;
      size_t tightest = 0;
      for (size_t i = 0; i < p; ++i) {
        most += std::max<int64_t>(0, lines[i].max_n);
        if (lines[i].max_n < lines[tightest].max_n) tightest = i;
      }
      if (most < L || lines[tightest].max_n < lines[tightest].min_n) {
        const Unit& u = units_[static_cast<size_t>(layout[k][tightest])];
        split.reason = fmt::format(
            "memory: a pipeline of {} stages holds at most {} of the {} blocks at micro-batch size "
            "{} with recompute '{}'; its tightest stage {} ('{}', tp {}, {:.1f} GiB) fits {} blocks",
            p, most, L, b, spec::RecomputeName(es.recompute), tightest,
            cluster.device_types[static_cast<size_t>(u.type)].name, u.tp,
            cluster.device_types[static_cast<size_t>(u.type)].memory_bytes / kGiB,
            lines[tightest].max_n);
      } else {
        std::vector<double> values;
        for (const StageLine& line : lines) {
          for (int64_t n = line.min_n; n <= line.max_n; ++n) values.push_back(line.Period(n));
        }
        std::sort(values.begin(), values.end());
        values.erase(std::unique(values.begin(), values.end()), values.end());
        auto feasible = [&](double t) {
          int64_t sum = 0;
          for (const StageLine& line : lines) {
            const int64_t n = line.MaxForPeriod(t);
            if (n < line.min_n) return false;
            sum += n;
          }
          return sum >= L;
        };
        size_t lo = 0;
        size_t hi = values.size() - 1;
        while (lo < hi) {
          const size_t mid = (lo + hi) / 2;
          if (feasible(values[mid])) {
            hi = mid;
          } else {
            lo = mid + 1;
          }
        }
        const double t = values[lo];
        MOTLEY_CHECK(feasible(t), "the largest period must be feasible");
        split.blocks.assign(p, 0);
        int64_t left = L;
        for (size_t i = 0; i < p; ++i) {
          split.blocks[i] = lines[i].min_n;
          left -= lines[i].min_n;
        }
        std::vector<size_t> order(p);
        for (size_t i = 0; i < p; ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
          return lines[x].per_block < lines[y].per_block;
        });
        for (size_t i : order) {
          const int64_t add = std::min(left, lines[i].MaxForPeriod(t) - split.blocks[i]);
          split.blocks[i] += add;
          left -= add;
        }
        MOTLEY_CHECK(left == 0, "block split left blocks over");
        std::vector<perf::StageCost> costs(p);
        for (size_t i = 0; i < p; ++i) {
          const double n = static_cast<double>(split.blocks[i]);
          costs[i] = {lines[i].fwd0 + n * lines[i].fwd1, lines[i].bwd0 + n * lines[i].bwd1};
        }
        for (size_t i = 0; i < p; ++i) {
          const Unit& u = units_[static_cast<size_t>(layout[k][i])];
          const perf::StageCost none = predictor_.StageCostOfShape(
              u.type, u.tp, u.devices.size() > 1 ? &intra_links[i] : nullptr, split.blocks[i],
              i == 0, i + 1 == p, b, spec::Recompute::kNone, rates[i]);
          split.bound_forward.push_back(none.forward_s);
          split.bound_backward.push_back(none.backward_s);
        }
        const std::vector<double> boundaries(c.begin(), c.end() - 1);
        split.fixed = perf::PipelineClosedForm(costs, boundaries, 1, es.schedule).time_s;
        split.per = perf::PipelineClosedForm(costs, boundaries, 2, es.schedule).time_s - split.fixed;
        split.ok = true;
      }
      it = cache.emplace(sig, std::move(split)).first;
    }
    const ShapeSplit& split = it->second;
    split_of[k] = &split;
    if (!split.ok) {
      out.reason = split.reason;
      return out;
    }
    for (size_t i = 0; i < p; ++i) pipe.stages[i].num_blocks = split.blocks[i];
    spec::RenumberBlocks(&pipe);
    fixed[k] = split.fixed;
    per[k] = split.per;
    min_m[k] = static_cast<int64_t>(p);
  }
  const std::vector<int64_t> m = SplitMicroBatches(fixed, per, min_m, total_m);
  MOTLEY_CHECK(!m.empty(), "micro-batch split after the stage-count check");
  for (size_t k = 0; k < plan.pipelines.size(); ++k) plan.pipelines[k].micro_batches = m[k];
  // The step cannot end before its slowest pipeline's phase (the step starts every rank at or
  // after 0, and a transfer takes at least its flows' time alone); the polish may go below the
  // bound, so it only prunes without.
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    out.lower_bound_s = std::max(
        out.lower_bound_s,
        perf::PipelinePhaseLowerBound(split_of[k]->bound_forward, split_of[k]->bound_backward, m[k],
                                      boundary.fwd_floor_s[k], boundary.bwd_floor_s[k]));
  }
  const bool polish = stages_total <= es.polish_max_stages;
  // Only a plan known to fit memory is pruned: one Predict finds over memory sends the search to
  // a heavier recompute, which a pruned one would not. One known to be over is not predicted.
  using Verdict = perf::Predictor::MemoryVerdict;
  const perf::Predictor::PlanMemoryCheck memory = predictor_.CheckPlanMemory(plan);
  if (memory.verdict == Verdict::kOver) {
    out.reason = "memory: " + memory.violation;
    return out;
  }
  // Built once for the step bound and the prediction, where both need it.
  std::optional<sched::StepProgram> program;
  if (!polish && memory.verdict == Verdict::kFits && std::isfinite(es.prune_above)) {
    // The pipelines' bound first (no step program); where it does not prune, the whole step's
    // (the data-parallel syncs and optimizer after the phase, at their floors), on worlds that
    // Predict walks exactly (at most exact_ring_max_ranks ranks: two passes, every ring step by
    // step), where it costs a fraction of a prediction. Above, Predict's one pass costs about
    // what the bound's walk does, and the bound prunes too few more to pay for itself
    // (hethub-768 and the three-type 1,024 cluster planned a few per cent slower with it).
    if (out.lower_bound_s * (1 - 1e-12) < es.prune_above &&
        spec::PlanDevices(plan).size() <=
            static_cast<size_t>(predictor_.settings().exact_ring_max_ranks)) {
      program = predictor_.StepProgramFor(plan);
      out.lower_bound_s = std::max(
          out.lower_bound_s, predictor_.StepLowerBound(plan, rates_, links_, &boundary, &*program));
    }
    if (out.lower_bound_s * (1 - 1e-12) >= es.prune_above) {
      out.pruned = true;
      return out;
    }
  }
  out.prediction = predictor_.Predict(plan, rates_, links_, program ? &*program : nullptr);
  MOTLEY_CHECK(out.lower_bound_s <= out.prediction.iteration_s * (1 + 1e-9),
               fmt::format("the pruning bound {} s is above the predicted step {} s",
                           out.lower_bound_s, out.prediction.iteration_s));
  MOTLEY_CHECK(memory.verdict != Verdict::kFits || out.prediction.fits_memory,
               "Predictor::CheckPlanMemory said fits, Predict: " + out.prediction.memory_violation);
  if (!out.prediction.fits_memory) {
    out.reason = "memory: " + out.prediction.memory_violation;
    return out;
  }
  if (es.recompute != spec::Recompute::kNone) LightenRecompute(&plan, &out.prediction);
  if (polish) {
    Polish(&plan, &out.prediction, 50);
    ShardingAndChunksIfFaster(predictor_, es.shardings, es.interleave_chunks, rates_, links_, &plan,
                              &out.prediction);
  }
  out.feasible = true;
  return out;
}

void LayoutEvaluator::LightenRecompute(spec::Plan* plan, perf::Prediction* prediction) const {
  spec::Plan lighter = *plan;
  bool changed = false;
  for (size_t k = 0; k < lighter.pipelines.size(); ++k) {
    for (size_t i = 0; i < lighter.pipelines[k].stages.size(); ++i) {
      spec::StagePlan& st = lighter.pipelines[k].stages[i];
      const perf::StagePrediction& sp = prediction->stages[k][i];
      for (spec::Recompute r : {spec::Recompute::kNone, spec::Recompute::kSelective}) {
        if (r >= st.recompute) break;
        const Bytes change = predictor_.RecomputeMemoryChange(
            *plan, static_cast<int>(k), static_cast<int>(i), r);
        if (sp.memory.total() + change <= sp.capacity) {
          st.recompute = r;
          changed = true;
          break;
        }
      }
    }
  }
  if (!changed) return;
  perf::Prediction pred = predictor_.Predict(lighter, rates_, links_);
  if (!pred.fits_memory || pred.iteration_s > prediction->iteration_s) return;
  *plan = std::move(lighter);
  *prediction = std::move(pred);
}

namespace {

// Same stage count and the same blocks per stage.
bool SameBlockSplit(const spec::PipelinePlan& a, const spec::PipelinePlan& b) {
  if (a.stages.size() != b.stages.size()) return false;
  for (size_t i = 0; i < a.stages.size(); ++i) {
    if (a.stages[i].num_blocks != b.stages[i].num_blocks) return false;
  }
  return true;
}

}  // namespace

void LayoutEvaluator::Polish(spec::Plan* plan, perf::Prediction* prediction, int max_rounds,
                             Moves moves, int threads) const {
  const bool per_split = moves == Moves::kPerSplit;
  // Whether pipeline k is the first of those with its block split.
  auto first_of_split = [&](size_t k) {
    for (size_t k2 = 0; k2 < k; ++k2) {
      if (SameBlockSplit(plan->pipelines[k2], plan->pipelines[k])) return false;
    }
    return true;
  };
  for (int round = 0; round < max_rounds; ++round) {
    // The round's moves, in the order they are judged.
    std::vector<spec::Plan> cands;
    // One block across one stage boundary: in one pipeline, or in every pipeline with the same
    // block split at once (moving one of them alone splits the data-parallel groups of the
    // block that moves, so a better common split is not reached one pipeline at a time).
    for (size_t k = 0; k < plan->pipelines.size(); ++k) {
      const size_t p = plan->pipelines[k].stages.size();
      std::vector<size_t> same_split;
      for (size_t k2 = 0; k2 < plan->pipelines.size(); ++k2) {
        if (SameBlockSplit(plan->pipelines[k], plan->pipelines[k2])) same_split.push_back(k2);
      }
      const bool first_of_group = same_split.front() == k;
      for (size_t i = 0; i + 1 < p; ++i) {
        for (int dir = 0; dir < 2; ++dir) {
          const size_t from_i = dir == 0 ? i : i + 1;
          const size_t to_i = dir == 0 ? i + 1 : i;
          if (plan->pipelines[k].stages[from_i].num_blocks <= 1) continue;
          auto move = [&](spec::Plan* cand, size_t k2) {
            --cand->pipelines[k2].stages[from_i].num_blocks;
            ++cand->pipelines[k2].stages[to_i].num_blocks;
            spec::RenumberBlocks(&cand->pipelines[k2]);
          };
          if (!per_split || same_split.size() == 1) {
            move(&cands.emplace_back(*plan), k);
          }
          if (same_split.size() > 1 && first_of_group) {
            spec::Plan& together = cands.emplace_back(*plan);
            for (size_t k2 : same_split) move(&together, k2);
          }
        }
      }
    }
    // One micro-batch from one pipeline to another.
    for (size_t k1 = 0; k1 < plan->pipelines.size(); ++k1) {
      for (size_t k2 = 0; k2 < plan->pipelines.size(); ++k2) {
        if (k1 == k2) continue;
        if (per_split && (SameBlockSplit(plan->pipelines[k1], plan->pipelines[k2]) ||
                          !first_of_split(k1) || !first_of_split(k2))) {
          continue;
        }
        const spec::PipelinePlan& from = plan->pipelines[k1];
        if (from.micro_batches <= from.num_stages()) continue;
        spec::Plan cand = *plan;
        --cand.pipelines[k1].micro_batches;
        ++cand.pipelines[k2].micro_batches;
        // An interleaved pipeline runs only some micro-batch counts.
        auto runs = [](const spec::PipelinePlan& pipe) {
          return pipe.chunks == 1 ||
                 spec::InterleavedMicroBatchesOk(pipe.num_stages(), pipe.micro_batches);
        };
        if (!runs(cand.pipelines[k1]) || !runs(cand.pipelines[k2])) continue;
        cands.push_back(std::move(cand));
      }
    }
    // Judged in order: kPerSplit takes the first improving move (first improvement),
    // kEveryPipeline the best of them all (best improvement; the first of equals). The moves are
    // predicted `threads` at a time (kEveryPipeline: all at once), so the answer is the same on
    // any thread count; kPerSplit predicts at most threads - 1 moves past its first improving
    // one.
    double best = prediction->iteration_s;
    size_t best_index = cands.size();
    perf::Prediction best_pred;
    const size_t batch = per_split ? static_cast<size_t>(std::max(threads, 1)) : cands.size();
    std::vector<perf::Prediction> preds;
    for (size_t first = 0; first < cands.size() && !(per_split && best_index < cands.size());
         first += batch) {
      const size_t count = std::min(batch, cands.size() - first);
      preds.assign(count, perf::Prediction{});
      ParallelFor(count, threads, [&](size_t j) {
        preds[j] = predictor_.PredictIfFits(cands[first + j], rates_, links_);
      });
      for (size_t j = 0; j < count; ++j) {
        if (preds[j].fits_memory && preds[j].iteration_s < best * (1 - 1e-12)) {
          best = preds[j].iteration_s;
          best_index = first + j;
          best_pred = std::move(preds[j]);
          if (per_split) break;
        }
      }
    }
    if (best_index == cands.size()) return;
    *plan = std::move(cands[best_index]);
    *prediction = std::move(best_pred);
  }
}

}  // namespace motley::plan
