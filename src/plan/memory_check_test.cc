// Predictor::CheckPlanMemory, which lets the planner skip predicting plans whose memory verdict it
// knows, against Predict itself (the oracle): on the plans the planner ranks for a mixed
// cluster, and on the same plans with recompute off and at a larger micro-batch size (many over
// memory), the verdict outside the runtime's configuration is Predict's: kFits exactly when
// Predict fits, kOver with Predict's violation text otherwise. Predictor::PredictIfFits, built
// on it, is Predict where a plan fits and Predict's memory verdict where it does not.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/planner.h"
#include "plan/test_util.h"

namespace motley::plan {
namespace {

using Verdict = perf::Predictor::MemoryVerdict;

// The plan at `factor` times each pipeline's micro-batch size (nullopt where a pipeline's
// micro-batches do not divide, or would fall below its stage count).
std::optional<spec::Plan> Scaled(spec::Plan plan, int64_t factor) {
  for (spec::PipelinePlan& pipe : plan.pipelines) {
    if (pipe.micro_batches % factor != 0 || pipe.micro_batches / factor < pipe.num_stages()) {
      return std::nullopt;
    }
    pipe.micro_batches /= factor;
    pipe.micro_batch_size *= factor;
  }
  return plan;
}

TEST(MemoryCheckTest, VerdictIsPredictsOnRankedPlansAndHeavierVariants) {
  auto w = testing::MakeWorld({{"h", "h100", 2, 8, "nvlink", "ib-hdr"},
                               {"a", "a100-40g", 2, 8, "nvlink", "roce-100g"},
                               {"m", "mi250x", 2, 8, "xgmi", "eth-25g"}},
                              "eth-25g", "llama2-13b", 128, 4096);
  PlannerOptions options;
  options.baselines = false;
  options.confirm_top = 1;
  options.rank_top = 40;
  auto report = PlanCluster(*w->predictor, options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  std::vector<spec::Plan> plans;
  for (const Candidate& c : report->ranked) {
    plans.push_back(c.plan);
    spec::Plan none = c.plan;
    for (spec::PipelinePlan& pipe : none.pipelines) {
      for (spec::StagePlan& st : pipe.stages) st.recompute = spec::Recompute::kNone;
    }
    plans.push_back(none);
    for (int64_t f : {2, 4}) {
      if (auto s = Scaled(none, f)) plans.push_back(*s);
    }
  }
  int over = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    const perf::Prediction pred = w->predictor->Predict(plans[i]);
    const perf::Predictor::PlanMemoryCheck check = w->predictor->CheckPlanMemory(plans[i]);
    ASSERT_NE(check.verdict, Verdict::kUnknown) << "plan " << i;
    EXPECT_EQ(check.verdict == Verdict::kFits, pred.fits_memory) << "plan " << i;
    EXPECT_EQ(check.violation, pred.memory_violation) << "plan " << i;
    // PredictIfFits skips the walk only where the verdict is kOver, and then says what Predict
    // says about memory; elsewhere it is Predict.
    const perf::Prediction if_fits = w->predictor->PredictIfFits(plans[i]);
    EXPECT_EQ(if_fits.fits_memory, pred.fits_memory) << "plan " << i;
    EXPECT_EQ(if_fits.memory_violation, pred.memory_violation) << "plan " << i;
    if (pred.fits_memory) {
      EXPECT_EQ(if_fits.iteration_s, pred.iteration_s) << "plan " << i;
    } else {
      EXPECT_TRUE(std::isinf(if_fits.iteration_s)) << "plan " << i;
    }
    over += pred.fits_memory ? 0 : 1;
  }
  EXPECT_GT(over, 0) << "no variant went over memory: the test would not see a wrong kOver";
  EXPECT_LT(over, static_cast<int>(plans.size()));
  std::printf("%zu plans, %d over memory\n", plans.size(), over);
}

}  // namespace
}  // namespace motley::plan
