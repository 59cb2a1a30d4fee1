// The layout evaluator's block split (plan/evaluate.cc) against an enumeration of every split: for
// one pipeline, the blocks it gives the stages minimise the largest stage period (the stage's
// forward + backward at its blocks, as the predictor costs it, plus the boundary transfers on
// either side). Run with the emulated compute model, whose stages have fixed costs besides the
// embedding and head (the copies of received activations and gradients), so a split that charged
// a stage's fixed costs once per block would pick a worse split on mixed device types.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <string>

#include "perf/cluster_presets.h"
#include "perf/emulated_compute_model.h"
#include "perf/predictor.h"
#include "perf/settings.h"
#include "plan/evaluate.h"
#include "plan/units.h"

namespace motley::plan {
namespace {

// The largest period over the stages of `pipe` at its block counts.
double LargestPeriod(const perf::Predictor& predictor, const spec::PipelinePlan& pipe,
                     const perf::Predictor::BoundaryTimes& boundary) {
  double worst = 0;
  for (size_t i = 0; i < pipe.stages.size(); ++i) {
    const perf::StageCost c =
        predictor.StageCostOf(pipe.stages[i], pipe.micro_batch_size, spec::Recompute::kNone, {});
    double period = c.forward_s + c.backward_s;
    if (i > 0) period += boundary.Of(0, i - 1);
    if (i + 1 < pipe.stages.size()) period += boundary.Of(0, i);
    worst = std::max(worst, period);
  }
  return worst;
}

// The smallest LargestPeriod over every split of the model's blocks (at least one per stage).
double BestLargestPeriod(const perf::Predictor& predictor, spec::PipelinePlan pipe,
                         const perf::Predictor::BoundaryTimes& boundary, int64_t blocks) {
  double best = std::numeric_limits<double>::infinity();
  const size_t p = pipe.stages.size();
  std::function<void(size_t, int64_t)> place = [&](size_t i, int64_t left) {
    if (i + 1 == p) {
      pipe.stages[i].num_blocks = left;
      best = std::min(best, LargestPeriod(predictor, pipe, boundary));
      return;
    }
    for (int64_t n = 1; n <= left - static_cast<int64_t>(p - i - 1); ++n) {
      pipe.stages[i].num_blocks = n;
      place(i + 1, left - n);
    }
  };
  place(0, blocks);
  return best;
}

TEST(BlockSplitTest, MinimisesTheLargestStagePeriodCountingFixedCostsOnce) {
  auto cluster = perf::MakeCluster(
      "split",
      {{"h", "h100", 1, 8, "nvlink", "ib-hdr"}, {"a", "a100-40g", 1, 8, "nvlink", "roce-100g"}},
      "eth-25g");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  int checked = 0;
  // The "small" preset at 4 and at 24 blocks (boundary copies weigh against a few blocks'
  // compute, and the error of charging them per block grows with the blocks), and gpt2-124m.
  for (const char* preset : {"small", "small-24", "gpt2-124m"}) {
    const bool deep = std::string(preset) == "small-24";
    auto model = spec::ModelPreset(deep ? "small" : preset);
    ASSERT_TRUE(model.ok());
    if (deep) model->num_blocks = 24;
    spec::TrainSpec train;
    train.global_batch = 16;
    train.seq_len = std::min<int64_t>(model->max_seq_len, 1024);
    const perf::PerfSettings settings = perf::DefaultSettings(*cluster);
    const perf::EmulatedComputeModel compute(*cluster, *model);
    const perf::Predictor predictor(*cluster, *model, train, compute, settings);
    for (int tp_h : {1, 2}) {
      const std::vector<Unit> units = BuildUnits(*cluster, {tp_h, 1});
      // Units of type 0 (h100) come first, then type 1; pipelines that alternate and that group
      // the types, of 2 to 4 stages.
      std::vector<int> h, a;
      for (size_t u = 0; u < units.size(); ++u) {
        (units[u].type == 0 ? h : a).push_back(static_cast<int>(u));
      }
      const std::vector<Layout> layouts = {{{h[0], a[0]}},
                                           {{a[0], h[0]}},
                                           {{h[0], a[0], a[1]}},
                                           {{h[0], h[1], a[0], a[1]}},
                                           {{a[0], h[0], a[1], h[1]}}};
      const LayoutEvaluator evaluator(predictor, units, {});
      for (const Layout& layout : layouts) {
        for (int64_t b : {1, 2}) {
          EvalSettings es;
          es.micro_batch_size = b;
          es.polish_max_stages = 0;  // the split alone, no local search after it
          const LayoutEval eval = evaluator.Evaluate(layout, es);
          ASSERT_TRUE(eval.feasible) << preset << ": " << eval.reason;
          const spec::PipelinePlan& pipe = eval.plan.pipelines.front();
          const perf::Predictor::BoundaryTimes boundary = predictor.SolveBoundaryTimes(eval.plan);
          const double chosen = LargestPeriod(predictor, pipe, boundary);
          const double best = BestLargestPeriod(predictor, pipe, boundary, model->num_blocks);
          EXPECT_LE(chosen, best * (1 + 1e-9))
              << preset << ", tp " << tp_h << ", " << pipe.stages.size() << " stages, b " << b;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 2 * 5 * 2);
}

}  // namespace
}  // namespace motley::plan
