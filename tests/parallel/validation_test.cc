// Validation in parallel runs: every train.val_every steps and after the last step, every plan
// measures the serial loop's validation loss (the same fixed batches of the validation split) and
// writes it into that step's metrics line, and only there; measuring it leaves the training
// trajectory and the virtual step times untouched.
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "parallel_test_util.h"
#include "train/parallel_trainer.h"
#include "train/trainer.h"

namespace motley::testing {
namespace {

constexpr int64_t kSteps = 8;
constexpr double kRelTol = 1e-5;

spec::RunFile WithValidation(spec::RunFile run) {
  run.train.val_every = 3;
  run.train.val_batches = 2;
  return run;
}

// The serial loop's (step, val_loss).
std::vector<std::pair<int64_t, double>> SerialValidation(const spec::RunFile& run) {
  train::TrainerOptions options;
  options.out = nullptr;
  auto summary = train::Train(run.model, run.train, options);
  EXPECT_TRUE(summary.ok()) << summary.status().message();
  return summary.ok() ? summary->val_history : std::vector<std::pair<int64_t, double>>{};
}

void ExpectSerialValidation(const spec::RunFile& run, const spec::Plan& plan) {
  const auto serial = SerialValidation(run);
  ASSERT_EQ(serial.size(), 3U);  // steps 3, 6 and the last, 8
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  options.metrics_path = TempPath(plan.source + "_validation.jsonl");
  auto summary = train::TrainParallel(run, plan, options);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  ASSERT_EQ(summary->val_history.size(), serial.size());
  for (size_t i = 0; i < serial.size(); ++i) {
    EXPECT_EQ(summary->val_history[i].first, serial[i].first);
    EXPECT_LE(std::abs(summary->val_history[i].second - serial[i].second) / serial[i].second,
              kRelTol)
        << plan.source << " step " << serial[i].first << ": " << summary->val_history[i].second
        << " vs serial " << serial[i].second;
  }
  const std::set<int64_t> want = {3, 6, 8};
  const auto lines = ReadJsonLines(options.metrics_path);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps));
  size_t v = 0;
  for (const auto& j : lines) {
    const int64_t step = j.at("step").get<int64_t>();
    EXPECT_EQ(j.contains("val_loss"), want.count(step) == 1) << "step " << step;
    if (j.contains("val_loss")) {
      EXPECT_DOUBLE_EQ(j.at("val_loss").get<double>(), summary->val_history[v++].second);
    }
  }
  // The training trajectory is that of the same plan without validation.
  spec::RunFile without = run;
  without.train.val_every = 0;
  options.metrics_path.clear();
  auto plain = train::TrainParallel(without, plan, options);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->losses, summary->losses);
  EXPECT_TRUE(plain->val_history.empty());
}

TEST(ParallelValidationTest, PipelineTensorAndUnevenDataParallelMatchSerial) {
  ExpectSerialValidation(
      WithValidation(TinyRun(kSteps)),
      MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 3, false, true, {1})}, 3, 2),
                Pipeline({Stage(0, 4, true, true, {2, 3})}, 2, 3)},
               "pp2-and-tp2"));
}

TEST(ParallelValidationTest, EmulatedClusterKeepsItsVirtualStepTimes) {
  const spec::RunFile run = WithValidation(TinyEmulatedRun(kSteps));
  const spec::Plan plan =
      MakePlan({Pipeline({Stage(0, 2, true, false, {0}), Stage(2, 2, false, true, {1})}, 3, 2),
                Pipeline({Stage(0, 4, true, true, {2, 3})}, 2, 3)},
               "emulated-validation");
  ExpectSerialValidation(run, plan);
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  auto with = train::TrainParallel(run, plan, options);
  spec::RunFile without = run;
  without.train.val_every = 0;
  auto plain = train::TrainParallel(without, plan, options);
  ASSERT_TRUE(with.ok() && plain.ok());
  // Steps before the first validation are unchanged to the bit; validation runs outside steps.
  ASSERT_EQ(with->step_times_s.size(), plain->step_times_s.size());
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(with->step_times_s[k], plain->step_times_s[k]);
}

}  // namespace
}  // namespace motley::testing
