// LayoutEvaluator: turns a layout (pipelines of units) into the best plan the planner knows for
// it at one micro-batch size and recompute choice: block split per distinct pipeline shape under
// memory limits (exact min-max of the stage period, then blocks to the fastest stages), micro-
// batches across pipelines by water-filling (min max_k T_k(m_k), m_k >= stages), then the full
// predictor; then each stage keeps the lightest recompute its memory holds; small plans are
// polished by a local search on the predicted iteration time (moving one block across a boundary
// or one micro-batch between pipelines; the planner polishes its finalists at scale, Polish with
// Moves::kPerSplit) and then interleaved where that is faster (plan/interleave.h). Identical
// pipelines share one split computation.
//
// Ownership: keeps references to the predictor and the units, which must outlive it. Thread
// safety: Evaluate() is const and thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "perf/predictor.h"
#include "plan/units.h"
#include "spec/plan.h"

namespace motley::plan {

struct EvalSettings {
  int64_t micro_batch_size = 1;
  spec::Recompute recompute = spec::Recompute::kNone;
  spec::PipelineSchedule schedule = spec::PipelineSchedule::k1F1B;
  // As PlannerOptions::shardings: a plan of several pipelines is split with the first; a polished
  // plan is also predicted at the others (plan/sharding.h), at each of interleave_chunks, and
  // kept where faster.
  std::vector<spec::OptimizerSharding> shardings = {spec::OptimizerSharding::kZero1};
  int polish_max_stages = 16;  // local search when the plan has at most this many stages
  // Interleaving degrees tried on a polished plan (plan/interleave.h InterleaveIfFaster), after
  // the polish; empty: none. Plans that are not polished are not interleaved here, so the
  // pruning bound below (one chunk per group) covers every plan Evaluate returns unpolished.
  std::vector<int> interleave_chunks;
  // Branch and bound: a plan that is not polished, whose proven lower bound on the step
  // (LayoutEval::lower_bound_s) is at or above this and which surely passes Predict's memory
  // check is not predicted (LayoutEval::pruned). Exact: no plan of this layout and settings, at
  // any recompute of the settings' or lighter, can be faster than the bound, and the search takes
  // the same next step (a larger micro-batch) as after predicting it.
  double prune_above = std::numeric_limits<double>::infinity();
};

struct LayoutEval {
  bool feasible = false;
  std::string reason;   // why not, naming the binding constraint (empty when pruned)
  bool pruned = false;  // not predicted: lower_bound_s >= EvalSettings::prune_above
  // A lower bound on the predicted step of the split plan, at every recompute choice (0 when the
  // layout is infeasible before the split): the slowest pipeline's perf::PipelinePhaseLowerBound
  // at recompute 'none', with its transfers' floors (Predictor::BoundaryTimes); where that does
  // not prune a plan that could be pruned, the larger Predictor::StepLowerBound. Checked against
  // every prediction made.
  double lower_bound_s = 0;
  spec::Plan plan;
  perf::Prediction prediction;
};

class LayoutEvaluator {
 public:
  LayoutEvaluator(const perf::Predictor& predictor, const std::vector<Unit>& units,
                  perf::StragglerRates rates, perf::LinkRates links = {});
  LayoutEval Evaluate(const Layout& layout, const EvalSettings& settings) const;
  // Which moves Polish tries. kEveryPipeline: one block across a stage boundary in any one
  // pipeline, and in every pipeline of the same block split at once; one micro-batch between any
  // two pipelines. kPerSplit (plans at scale): pipelines that share a block split move blocks
  // only together, and micro-batches move only between the first pipelines of different splits,
  // so a round costs in proportion to distinct splits, not pipelines; and a round takes its
  // first improving move (kEveryPipeline: the best of the round).
  enum class Moves { kEveryPipeline, kPerSplit };
  // Local search on a complete plan by the predicted step, at most `max_rounds` moves. Reads the
  // plan and the predictor only (not the units). A round's moves are predicted on up to
  // `threads` threads (ParallelFor); the plan found is the same on any thread count.
  void Polish(spec::Plan* plan, perf::Prediction* prediction, int max_rounds,
              Moves moves = Moves::kEveryPipeline, int threads = 1) const;
  // Gives each stage the lightest recompute its memory holds (a lighter recompute only saves
  // time): stages whose devices have room keep fewer recomputed activations than the one choice
  // the split was made with. Kept when the re-predicted plan fits and is no slower.
  void LightenRecompute(spec::Plan* plan, perf::Prediction* prediction) const;

 private:
  const perf::Predictor& predictor_;
  const std::vector<Unit>& units_;
  perf::StragglerRates rates_;
  perf::LinkRates links_;
};

// Water-filling: m_k >= min_m[k], sum m_k = total, minimising max_k (fixed[k] + (m_k - 1) *
// per[k]). Empty when sum(min_m) > total.
std::vector<int64_t> SplitMicroBatches(const std::vector<double>& fixed,
                                       const std::vector<double>& per,
                                       const std::vector<int64_t>& min_m, int64_t total);

}  // namespace motley::plan
