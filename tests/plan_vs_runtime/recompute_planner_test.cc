// Issue 12 acceptance: on an emulated cluster whose devices are too small for every plan without
// activation recompute, `motley plan`'s search (plan::PlanCluster) picks a recompute plan, and the
// runtime trains it within the devices' memory (the emulated backend enforces the capacity).
// Each rank's peak of live bytes, as its emulated backend counts every allocation, is within 2%
// of the predicted memory, and below the same plan's without recompute by the predicted amount
// (within 2% of the no-recompute peak).
//
// The capacity is not a tuned constant: the test first finds, by bisection on the device memory
// of the two-speed cluster, the smallest capacity at which the planner still finds a plan without
// recompute, and then plans just below it. Bytes only: nothing depends on this machine's speed.
//
// The same check for the interleaved schedule's in-flight activations, on an interleaved plan the
// planner ranks, against the same plan with one chunk per device group.
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "../parallel/emulated_ranks.h"
#include "parallel/world_layout.h"
#include "perf/emulated_compute_model.h"
#include "perf/predictor.h"
#include "perf/settings.h"
#include "plan/planner.h"
#include "pvr_planner.h"
#include "pvr_plans.h"

namespace motley::testing {
namespace {

constexpr int64_t kSteps = 2;

// The two-speed cluster with every device type's memory set to `capacity` bytes.
spec::RunFile RunWithMemory(double capacity) {
  spec::RunFile run = TinyRunOn(kTwoSpeedYaml, kSteps);
  for (spec::DeviceType& t : run.cluster.device_types) t.memory_bytes = capacity;
  return run;
}

struct Planned {
  bool found = false;
  spec::Plan plan;
};

// The planner's report on the cluster of `capacity` with these recompute choices.
Result<plan::PlanReport> PlanReportAt(double capacity,
                                      const std::vector<spec::Recompute>& recompute) {
  const spec::RunFile run = RunWithMemory(capacity);
  const perf::EmulatedComputeModel compute(run.cluster, run.model);
  const perf::Predictor predictor(run.cluster, run.model, run.train, compute,
                                  perf::DefaultSettings(run.cluster));
  plan::PlannerOptions options = TwoSpeedPlannerOptions();
  options.recompute = recompute;
  options.baselines = false;
  return plan::PlanCluster(predictor, options);
}

Planned PlanWith(double capacity, const std::vector<spec::Recompute>& recompute) {
  auto report = PlanReportAt(capacity, recompute);
  if (!report.ok()) return {};
  return {true, report->best.plan};
}

// Each rank's predicted bytes (its stage's memory) of `plan` on a cluster of `capacity`.
std::vector<double> PredictedPerRank(const spec::Plan& plan, double capacity) {
  const spec::RunFile run = RunWithMemory(capacity);
  const perf::EmulatedComputeModel compute(run.cluster, run.model);
  const perf::Predictor predictor(run.cluster, run.model, run.train, compute,
                                  perf::DefaultSettings(run.cluster));
  const perf::Prediction pred = predictor.Predict(plan);
  auto layout = parallel::WorldLayout::Build(plan);
  EXPECT_TRUE(layout.ok());
  std::vector<double> out;
  if (!layout.ok()) return out;
  for (int r = 0; r < layout->size(); ++r) {
    const parallel::RankInfo& me = layout->rank(r);
    out.push_back(pred.stages[static_cast<size_t>(me.pipeline)][static_cast<size_t>(me.stage)]
                      .memory.total());
  }
  return out;
}

TEST(RecomputePlannerTest, TooSmallDevicesGetARecomputePlanThatTrainsInThePredictedMemory) {
  // Bisection (geometric, to 1%) for the smallest memory at which a plan without recompute fits.
  double fits = 1.0 * 1024 * 1024 * 1024;  // 1 GiB: the cluster as written
  double too_small = 64.0 * 1024;
  ASSERT_TRUE(PlanWith(fits, {spec::Recompute::kNone}).found);
  ASSERT_FALSE(PlanWith(too_small, {spec::Recompute::kNone}).found);
  while (fits / too_small > 1.01) {
    const double mid = std::sqrt(fits * too_small);
    (PlanWith(mid, {spec::Recompute::kNone}).found ? fits : too_small) = mid;
  }
  const double capacity = too_small;
  std::printf("smallest memory with a plan without recompute: %.0f bytes; planning at %.0f\n",
              fits, capacity);

  const Planned chosen = PlanWith(
      capacity, {spec::Recompute::kNone, spec::Recompute::kSelective, spec::Recompute::kFull});
  ASSERT_TRUE(chosen.found) << "no plan with recompute fits " << capacity << " bytes";
  const spec::Plan& plan = chosen.plan;
  std::printf("chosen: %s (recompute %s)\n", plan.comment.c_str(),
              spec::RecomputeSummary(plan).c_str());
  EXPECT_NE(spec::HeaviestRecompute(plan), spec::Recompute::kNone) << plan.comment;

  // It trains within the capacity (the backends enforce it), at the predicted peak per rank.
  const std::vector<RankCounts> with = RunEmulated(RunWithMemory(capacity), plan, kSteps);
  const std::vector<double> predicted = PredictedPerRank(plan, capacity);
  ASSERT_EQ(with.size(), predicted.size());
  // The same plan without recompute, on devices large enough to hold it.
  spec::Plan none = plan;
  none.SetRecompute(spec::Recompute::kNone);
  const double large = 1.0 * 1024 * 1024 * 1024;
  const std::vector<RankCounts> without = RunEmulated(RunWithMemory(large), none, kSteps);
  const std::vector<double> predicted_none = PredictedPerRank(none, large);
  ASSERT_EQ(without.size(), predicted.size());
  bool any_above = false;
  for (size_t r = 0; r < with.size(); ++r) {
    const double measured = static_cast<double>(with[r].peak_bytes);
    const double measured_none = static_cast<double>(without[r].peak_bytes);
    std::printf("rank %zu: peak %.0f (predicted %.0f), without recompute %.0f (predicted %.0f), "
                "capacity %.0f\n",
                r, measured, predicted[r], measured_none, predicted_none[r], capacity);
    EXPECT_LE(measured, capacity) << "rank " << r;
    EXPECT_LE(std::abs(predicted[r] - measured), 0.02 * measured) << "rank " << r;
    const double saved = measured_none - measured;
    const double predicted_saved = predicted_none[r] - predicted[r];
    EXPECT_LE(std::abs(saved - predicted_saved), 0.02 * measured_none) << "rank " << r;
    any_above |= measured_none > capacity;
  }
  // Without recompute some rank would not have fit: the recompute was needed.
  EXPECT_TRUE(any_above);
}

// `plan` with each pipeline's chunks folded back into one per device group (the group's blocks
// together): the plan the planner interleaved (plan/interleave.h deals a group's blocks to its
// chunks, so the group holds the same blocks either way).
spec::Plan OneChunk(const spec::Plan& plan) {
  spec::Plan out = plan;
  for (spec::PipelinePlan& pipe : out.pipelines) {
    const int p = pipe.num_stages();
    std::vector<spec::StagePlan> groups(pipe.stages.begin(), pipe.stages.begin() + p);
    for (int g = 0; g < p; ++g) {
      spec::StagePlan& st = groups[static_cast<size_t>(g)];
      st.num_blocks = 0;
      for (int c = 0; c < pipe.chunks; ++c) {
        st.num_blocks += pipe.stages[static_cast<size_t>(pipe.virtual_stage(g, c))].num_blocks;
      }
      st.has_head = g + 1 == p;
    }
    pipe.stages = std::move(groups);
    pipe.chunks = 1;
    spec::RenumberBlocks(&pipe);
  }
  return out;
}

// The interleaved schedule's in-flight activations: the planner offers interleaved plans on the
// two-speed cluster (plan::PlannerOptions::interleave_chunks); the fastest it ranks trains with
// each rank's peak within 2% of the predicted memory, and above the same plan's with one chunk per
// group by the predicted amount (within 2% of the one-chunk peak).
TEST(RecomputePlannerTest, PlannersInterleavedPlanTrainsInThePredictedMemory) {
  const double capacity = 1.0 * 1024 * 1024 * 1024;
  const spec::RunFile run = RunWithMemory(capacity);
  auto report = PlanReportAt(capacity, {spec::Recompute::kNone});
  ASSERT_TRUE(report.ok()) << report.status().message();
  const plan::Candidate* interleaved = nullptr;
  for (const plan::Candidate& c : report->ranked) {
    for (const spec::PipelinePlan& pipe : c.plan.pipelines) {
      if (pipe.chunks > 1 && interleaved == nullptr) interleaved = &c;
    }
  }
  ASSERT_NE(interleaved, nullptr) << "the planner ranked no interleaved plan";
  const spec::Plan& plan = interleaved->plan;
  std::printf("interleaved: %s\n", interleaved->description.c_str());
  const spec::Plan one = OneChunk(plan);
  ASSERT_TRUE(spec::ValidatePlan(plan, run.cluster, run.model, run.train).ok());
  ASSERT_TRUE(spec::ValidatePlan(one, run.cluster, run.model, run.train).ok());

  const std::vector<RankCounts> with = RunEmulated(run, plan, kSteps);
  const std::vector<RankCounts> without = RunEmulated(run, one, kSteps);
  const std::vector<double> predicted = PredictedPerRank(plan, capacity);
  const std::vector<double> predicted_one = PredictedPerRank(one, capacity);
  ASSERT_EQ(with.size(), predicted.size());
  ASSERT_EQ(without.size(), predicted.size());
  bool any_more = false;
  for (size_t r = 0; r < with.size(); ++r) {
    const double measured = static_cast<double>(with[r].peak_bytes);
    const double measured_one = static_cast<double>(without[r].peak_bytes);
    std::printf("rank %zu: peak %.0f (predicted %.0f), one chunk %.0f (predicted %.0f)\n", r,
                measured, predicted[r], measured_one, predicted_one[r]);
    EXPECT_LE(std::abs(predicted[r] - measured), 0.02 * measured) << "rank " << r;
    const double added = measured - measured_one;
    const double predicted_added = predicted[r] - predicted_one[r];
    EXPECT_LE(std::abs(added - predicted_added), 0.02 * measured_one) << "rank " << r;
    any_more |= added > 0;
  }
  // Interleaving holds more activations in flight on some rank.
  EXPECT_TRUE(any_more);
}

}  // namespace
}  // namespace motley::testing
