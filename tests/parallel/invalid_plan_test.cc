// Invalid plans are rejected by the launch path (train::TrainParallel, as `motley train --plan`)
// before any rank starts: no metrics file is created, and each error names the pipeline / stage
// and the field at fault.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "parallel_test_util.h"
#include "train/parallel_trainer.h"

namespace motley::testing {
namespace {

// A valid 2-replica plan on devices 0..5 that each case breaks in one place.
spec::Plan ValidPlan() {
  return MakePlan(
      {Pipeline({Stage(0, 2, true, false, {0, 1}), Stage(2, 2, false, true, {2})}, 3, 2),
       Pipeline({Stage(0, 1, true, false, {4}), Stage(1, 3, false, true, {5})}, 2, 3)},
      "bad.json");
}

struct Case {
  std::string name;
  std::function<void(spec::Plan&)> breaks;
  std::vector<std::string> expected;  // substrings of the error
};

std::vector<Case> Cases() {
  using P = spec::Plan;
  return {
      {"gap between stages", [](P& p) { p.pipelines[0].stages[1].first_block = 3; },
       {"pipelines[0].stages[1].first_block"}},
      {"blocks past the model", [](P& p) { p.pipelines[1].stages[1].num_blocks = 4; },
       {"pipelines[1].stages[1].num_blocks"}},
      {"blocks missing at the end", [](P& p) { p.pipelines[1].stages[1].num_blocks = 2; },
       {"pipelines[1].stages"}},
      {"embedding on a later stage", [](P& p) { p.pipelines[0].stages[1].has_embedding = true; },
       {"pipelines[0].stages[1].has_embedding"}},
      {"no embedding on the first stage",
       [](P& p) { p.pipelines[1].stages[0].has_embedding = false; },
       {"pipelines[1].stages[0].has_embedding"}},
      {"head on an early stage", [](P& p) { p.pipelines[1].stages[0].has_head = true; },
       {"pipelines[1].stages[0].has_head"}},
      {"no head on the last stage", [](P& p) { p.pipelines[0].stages[1].has_head = false; },
       {"pipelines[0].stages[1].has_head"}},
      {"unknown device", [](P& p) { p.pipelines[1].stages[1].devices = {42}; },
       {"pipelines[1].stages[1].devices", "42"}},
      {"device used twice", [](P& p) { p.pipelines[1].stages[1].devices = {2}; },
       {"pipelines[1].stages[1].devices", "device 2"}},
      {"tp_degree differs from devices",
       [](P& p) { p.pipelines[0].stages[0].tp_degree = 1; },
       {"pipelines[0].stages[0].tp_degree"}},
      {"tp_degree does not divide the heads",
       [](P& p) {
         p.pipelines[0].stages[0].devices = {0, 1, 3};
         p.pipelines[0].stages[0].tp_degree = 3;
       },
       {"pipelines[0].stages[0].tp_degree", "does not divide"}},
      {"TP group across nodes",
       [](P& p) {
         p.pipelines[1].stages[1].devices = {3, 6};
         p.pipelines[1].stages[1].tp_degree = 2;
       },
       {"pipelines[1].stages[1].devices", "node"}},
      {"fewer micro-batches than stages", [](P& p) { p.pipelines[0].micro_batches = 1; },
       {"pipelines[0].micro_batches"}},
      {"zero micro-batch size", [](P& p) { p.pipelines[1].micro_batch_size = 0; },
       {"pipelines[1].micro_batch_size"}},
      {"batches do not sum to the global batch",
       [](P& p) { p.pipelines[1].micro_batch_size = 2; }, {"pipelines", "global"}},
      {"stage without devices", [](P& p) { p.pipelines[1].stages[0].devices.clear(); },
       {"pipelines[1].stages[0].devices"}},
      {"pipeline without stages", [](P& p) { p.pipelines[1].stages.clear(); },
       {"pipelines[1].stages"}},
      {"no pipelines", [](P& p) { p.pipelines.clear(); }, {"pipelines"}},
      {"recompute requested", [](P& p) { p.recompute = spec::Recompute::kFull; },
       {"recompute", "full"}},
  };
}

TEST(InvalidPlanTest, TheValidBasePlanTrains) {
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  auto summary = train::TrainParallel(TinyRun(1), ValidPlan(), options);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
}

TEST(InvalidPlanTest, EachBrokenPlanIsRejectedBeforeTraining) {
  const std::vector<Case> cases = Cases();
  ASSERT_GE(cases.size(), 12U);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    spec::Plan plan = ValidPlan();
    c.breaks(plan);
    train::ParallelTrainerOptions options;
    options.out = nullptr;
    options.metrics_path = TempPath("invalid.jsonl");
    auto result = train::TrainParallel(TinyRun(2), plan, options);
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
