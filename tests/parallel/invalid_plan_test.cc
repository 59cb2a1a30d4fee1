// Invalid plans (the set of invalid_plans.h) are rejected by the launch path (train::TrainParallel,
// as `motley train --plan`) before any rank starts: no metrics file is created, and each error
// names the pipeline / stage and the field at fault. Every other command refuses them alike:
// plan_agreement_test.cc.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "invalid_plans.h"
#include "parallel_test_util.h"
#include "train/parallel_trainer.h"

namespace motley::testing {
namespace {

TEST(InvalidPlanTest, TheValidBasePlanTrains) {
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  auto summary = train::TrainParallel(TinyRun(1), ValidPlan(), options);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
}

TEST(InvalidPlanTest, EachBrokenPlanIsRejectedBeforeTraining) {
  const std::vector<InvalidPlanCase> cases = InvalidPlanCases();
  ASSERT_GE(cases.size(), 12U);
  for (const InvalidPlanCase& c : cases) {
    SCOPED_TRACE(c.name);
    spec::Plan plan = ValidPlan();
    c.breaks(plan);
    train::ParallelTrainerOptions options;
    options.out = nullptr;
    options.metrics_path = TempPath("invalid.jsonl");
    auto result = train::TrainParallel(TinyRunOn(c.cluster_yaml, 2), plan, options);
    ASSERT_FALSE(result.ok());
    const std::string& message = result.status().message();
    std::printf("%-40s -> %s\n", c.name.c_str(), message.c_str());
    EXPECT_EQ(message.rfind("bad.json: ", 0), 0U) << message;
    for (const std::string& part : c.expected) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
    EXPECT_FALSE(std::filesystem::exists(options.metrics_path)) << "training started: " << message;
  }
}

TEST(InvalidPlanTest, MalformedPlanFilesAreRejectedByTheReader) {
  // The file half of the launch path (LoadPlan) names the field too.
  const std::string path = TempPath("malformed.json");
  spec::Plan plan = ValidPlan();
  std::string text = spec::PlanToJson(plan);
  const std::string from = "\"schedule\": \"1f1b\"";
  ASSERT_NE(text.find(from), std::string::npos) << text;
  text.replace(text.find(from), from.size(), "\"schedule\": \"zigzag\"");
  std::ofstream(path) << text;
  auto loaded = spec::LoadPlan(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("schedule"), std::string::npos)
      << loaded.status().message();
}

}  // namespace
}  // namespace motley::testing
