// The planner's references (plan/references.h): the batch-share rule, the homogeneous sum on a
// one-type cluster (where the chosen plan is its own term), a type too small for one block (no
// term, left out for memory), and MFU over all devices against MFU over the devices used.
#include "plan/references.h"

#include <gtest/gtest.h>

#include "plan/test_util.h"
#include "spec/plan_topology.h"

namespace motley::plan {
namespace {

using testing::MakeWorld;

PlannerOptions SmallSearch() {
  PlannerOptions options;
  options.micro_batch_sizes = {1, 2};
  options.recompute = {spec::Recompute::kNone};
  options.exhaustive_max_units = 0;  // not a reference these tests look at
  return options;
}

TEST(ReferencesTest, BatchShareRoundsToTheNearestSequenceAndNeverBelowOne) {
  EXPECT_EQ(BatchShare(32, 4, 8), 16);
  EXPECT_EQ(BatchShare(10, 1, 3), 3);  // 3.33
  EXPECT_EQ(BatchShare(10, 2, 3), 7);  // 6.67
  EXPECT_EQ(BatchShare(768, 128, 768), 128);
  EXPECT_EQ(BatchShare(8, 1, 768), 1);  // 0.01, but a type's plan needs one sequence
}

// One device type: its share is the whole batch, so the sum's only term is the planner's own
// search over the same space and the chosen plan scores exactly 1.0 of it.
TEST(ReferencesTest, OnOneTypeTheChosenPlanIsTheWholeHomogeneousSum) {
  auto w = MakeWorld({{"h", "h100", 2, 4, "nvlink", "ib-hdr"}}, "ib-hdr", "gpt2-124m", 16, 512);
  auto report = PlanCluster(*w->predictor, SmallSearch());
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(report->homogeneous_shares.size(), 1u);
  const TypeShare& term = report->homogeneous_shares[0];
  EXPECT_EQ(term.type_name, "h100");
  EXPECT_EQ(term.devices, 8);
  EXPECT_EQ(term.global_batch, 16);
  const double tps = report->best.TokensPerSecond(report->tokens_per_step);
  EXPECT_DOUBLE_EQ(report->homogeneous_sum_tokens_per_s, term.tokens_per_s);
  EXPECT_NEAR(tps / report->homogeneous_sum_tokens_per_s, 1.0, 1e-12);
  // The chosen plan is in the ranked table.
  bool listed = false;
  for (const Candidate& c : report->ranked) listed |= c.description == report->best.description;
  EXPECT_TRUE(listed);
}

// A type whose memory cannot hold one block: it has no term of its own, the chosen plan leaves it
// out, and the report says it is memory, with the numbers.
TEST(ReferencesTest, ATypeTooSmallForOneBlockIsLeftOutForMemory) {
  auto w = MakeWorld(
      {{"h", "h100", 1, 4, "nvlink", "ib-hdr"}, {"a", "a100-40g", 1, 4, "nvlink", "ib-hdr"}},
      "ib-hdr", "gpt2-124m", 16, 512);
  for (spec::DeviceType& t : w->cluster.device_types) {
    if (t.name == "a100-40g") t.memory_bytes = 1 << 20;
  }
  w->Finish();
  auto report = PlanCluster(*w->predictor, SmallSearch());
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(report->homogeneous_shares.size(), 2u);
  const TypeShare* small = nullptr;
  const TypeShare* big = nullptr;
  for (const TypeShare& t : report->homogeneous_shares) {
    (t.type_name == "a100-40g" ? small : big) = &t;
    EXPECT_EQ(t.global_batch, 8);
  }
  ASSERT_TRUE(small != nullptr && big != nullptr);
  EXPECT_EQ(small->tokens_per_s, 0);
  EXPECT_FALSE(small->what.empty());
  EXPECT_GT(big->tokens_per_s, 0);
  EXPECT_DOUBLE_EQ(report->homogeneous_sum_tokens_per_s, big->tokens_per_s);

  ASSERT_EQ(report->left_out.size(), 1u);
  const LeftOutDevices& left = report->left_out[0];
  EXPECT_EQ(left.type_name, "a100-40g");
  EXPECT_EQ(left.devices, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(left.reason.rfind("memory: one block with full recompute at TP 4 needs", 0), 0u)
      << left.reason;
  // Half the cluster idle: MFU over all devices is the used devices' MFU scaled by their share
  // of the cluster's peak.
  const double used_peak = w->predictor->PeakFlopsSum(spec::PlanDevices(report->best.plan));
  const double all_peak = w->predictor->PeakFlopsSum({0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_GT(report->mfu_used, 0);
  EXPECT_NEAR(report->mfu_all, report->mfu_used * used_peak / all_peak, 1e-12);
  EXPECT_LT(report->mfu_all, report->mfu_used);
  const std::string summary = SummarizeReport(*report);
  EXPECT_NE(summary.find("left out: 4 devices of type a100-40g: memory"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("homogeneous sum term: 4 devices of type a100-40g at 8 of the batch: "
                         "none fits"),
            std::string::npos)
      << summary;
}

// A small model on four equal devices uses them all: both MFU figures agree and nothing is listed
// as left out.
TEST(ReferencesTest, EveryDeviceUsedLeavesNothingOut) {
  auto w = MakeWorld({{"h", "h100", 1, 4, "nvlink", "ib-hdr"}}, "ib-hdr", "gpt2-124m", 16, 512);
  auto report = PlanCluster(*w->predictor, SmallSearch());
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(spec::PlanDevices(report->best.plan).size(), 4u) << report->best.description;
  EXPECT_TRUE(report->left_out.empty());
  EXPECT_NEAR(report->mfu_all, report->mfu_used, 1e-12);
  EXPECT_EQ(SummarizeReport(*report).find("left out"), std::string::npos);
}

}  // namespace
}  // namespace motley::plan
