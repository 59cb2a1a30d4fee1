// Plan switches inside the training loop (issue 6 part 1), ranks as threads over `local`: the
// loss trajectory of 20 steps with a mid-run switch of plan (data -> pipeline parallel with
// uneven blocks and back; a change of TP degrees; dropping a device and taking it back) equals
// the serial run's within 1e-5 relative, and every replica's state checksum per full tensor is
// the same just before and just after each migration. Also: the rank-0 callback and its step
// report, the metrics `migration` record and progress line, an emulated cluster's virtual-clock
// migration time and link-aware choice of senders, and the errors of an unusable new plan.
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "plan_switch_test_util.h"

namespace motley::testing {
namespace {

const std::vector<double>& Oracle() {
  static const std::vector<double> losses = SerialLosses(TinyRun(kSwitchSteps));
  return losses;
}

Result<train::ParallelTrainSummary> RunCase(const SwitchCase& c, const spec::RunFile& run,
                                            train::ParallelTrainerOptions options = {}) {
  options.out = options.out == stdout ? nullptr : options.out;
  options.plan_switches = c.switches;
  options.check_migrations = true;
  return train::TrainParallel(run, c.start, options);
}

TEST(PlanSwitchTest, DataParallelToUnevenPipelineAndBack) {
  SwitchCase c = DpToPpUneven();
  c.switches.push_back({15, c.start});  // pipeline -> data parallel needs transfers
  auto s = RunCase(c, TinyRun(kSwitchSteps));
  ASSERT_TRUE(s.ok()) << s.status().message();
  ExpectSwitchedRunMatches(c, *s, Oracle());
  // Every data-parallel rank holds the whole model: going to the pipeline moves nothing; coming
  // back, each rank receives the blocks it lacks.
  EXPECT_EQ(s->migrations[0].bytes, 0);
  EXPECT_GT(s->migrations[0].local_bytes, 0);
  EXPECT_GT(s->migrations[1].bytes, 0);
  for (int64_t b : s->migrations[1].received_bytes) EXPECT_GT(b, 0);
}

TEST(PlanSwitchTest, TensorParallelDegreesChange) {
  const SwitchCase c = TpChange();
  auto s = RunCase(c, TinyRun(kSwitchSteps));
  ASSERT_TRUE(s.ok()) << s.status().message();
  ExpectSwitchedRunMatches(c, *s, Oracle());
  EXPECT_GT(s->migrations[0].bytes, 0);
}

// ZeRO-1 on both sides of the switches: the drop-and-rejoin case with optimizer_sharding 'zero1'
// on the full plan (every layer group of the two replicas is uniform, so every moment is sharded)
// and on the plan without device 3; the moments are gathered whole for the checksums and the
// moves, and sharded again by the next step.
TEST(PlanSwitchTest, ZeroOnePlansSwitchAndKeepTheTrajectory) {
  SwitchCase c = DropAndRejoin();
  c.start.optimizer_sharding = spec::OptimizerSharding::kZero1;
  for (train::PlanSwitch& sw : c.switches) sw.plan.optimizer_sharding = c.start.optimizer_sharding;
  auto s = RunCase(c, TinyRun(kSwitchSteps));
  ASSERT_TRUE(s.ok()) << s.status().message();
  ExpectSwitchedRunMatches(c, *s, Oracle());
}

TEST(PlanSwitchTest, ADroppedDeviceIdlesAndRejoins) {
  const SwitchCase c = DropAndRejoin();
  train::ParallelTrainerOptions options;
  options.metrics_path = TempPath("switch_metrics.jsonl");
  char* text = nullptr;
  size_t text_size = 0;
  std::FILE* out = open_memstream(&text, &text_size);
  ASSERT_NE(out, nullptr);
  options.out = out;
  options.log_every = 100;
  auto s = RunCase(c, TinyRun(kSwitchSteps), options);
  std::fclose(out);
  const std::string progress(text, text_size);
  std::free(text);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ExpectSwitchedRunMatches(c, *s, Oracle());
  EXPECT_EQ(s->ranks, 4);
  // Dropped: device 3 (rank 3) sends its stage away and receives nothing; back: it receives.
  EXPECT_GT(s->migrations[0].sent_bytes[3], 0);
  EXPECT_EQ(s->migrations[0].received_bytes[3], 0);
  EXPECT_EQ(s->migrations[1].sent_bytes[3], 0);
  EXPECT_GT(s->migrations[1].received_bytes[3], 0);
  EXPECT_NE(progress.find("step 7: plan pp2-dp2 -> without-device-3: migrated"), std::string::npos)
      << progress;
  EXPECT_NE(progress.find("plan switches: 2,"), std::string::npos) << progress;

  const auto lines = ReadJsonLines(options.metrics_path);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSwitchSteps));
  for (const auto& j : lines) {
    const int64_t step = j.at("step");
    const bool dropped = step > 7 && step <= 14;
    EXPECT_EQ(j.at("plan"), dropped ? "without-device-3" : "pp2-dp2") << "step " << step;
    EXPECT_EQ(j.at("ranks").size(), 4U);
    EXPECT_EQ(j.at("ranks")[3].contains("idle"), dropped) << "step " << step;
    EXPECT_EQ(j.contains("migration"), step == 7 || step == 14) << "step " << step;
  }
  const auto& m = lines[6].at("migration");
  EXPECT_EQ(m.at("from"), "pp2-dp2");
  EXPECT_EQ(m.at("to"), "without-device-3");
  EXPECT_EQ(m.at("bytes").get<int64_t>(), s->migrations[0].bytes);
  EXPECT_DOUBLE_EQ(m.at("time_s").get<double>(), s->migrations[0].time_s);
  EXPECT_EQ(m.at("checksum_before"), m.at("checksum_after"));
}

TEST(PlanSwitchTest, TheCallbackDecidesOnRankZeroFromTheStepReport) {
  const SwitchCase c = TpChange();
  std::vector<int64_t> asked;
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  options.check_migrations = true;
  options.plan_switch = [&](int64_t step,
                            const train::StepReport& report) -> std::optional<spec::Plan> {
    asked.push_back(step);
    EXPECT_EQ(report.step, step);
    EXPECT_EQ(report.ranks.size(), 4U);
    EXPECT_GT(report.step_time_s, 0.0);
    EXPECT_EQ(report.clock, "host");
    EXPECT_GT(report.ranks[0].times.step_s, 0.0);
    EXPECT_EQ(report.plan->source, step <= 10 ? "tp2-pp2" : "dp2-mixed-tp");
    if (step == 10) return c.switches[0].plan;
    return std::nullopt;
  };
  auto s = train::TrainParallel(TinyRun(kSwitchSteps), c.start, options);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ExpectSwitchedRunMatches(c, *s, Oracle());
  ASSERT_EQ(asked.size(), static_cast<size_t>(kSwitchSteps - 1));  // not after the last step
  EXPECT_EQ(asked.front(), 1);
}

TEST(PlanSwitchTest, EmulatedClusterChargesTheMigrationOnTheVirtualClock) {
  // A fast device holds a replica; two slow devices (one node) hold a 2-stage replica. Dropping
  // device 3 moves blocks 2-3 and the head to device 2: they come from device 3 over the node's
  // shared memory (10 GB/s), not from device 0 over Ethernet (1 GB/s); only a small piece goes
  // over Ethernet when device 0's sends would finish before device 3's queue.
  const spec::Plan start =
      MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 3),
                Pipeline({Stage(0, 2, true, false, {2}), Stage(2, 2, false, true, {3})}, 3, 2)},
               "emulated-two-replicas");
  const spec::Plan dropped = MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 3),
                                       Pipeline({Stage(0, 4, true, true, {2})}, 3, 2)},
                                      "emulated-without-3");
  const SwitchCase c{start, {{10, dropped}}};
  auto s = RunCase(c, TinyEmulatedRun(kSwitchSteps));
  ASSERT_TRUE(s.ok()) << s.status().message();
  ExpectSwitchedRunMatches(c, *s, Oracle());
  EXPECT_EQ(s->clock, "virtual");
  const train::MigrationRecord& m = s->migrations[0];
  // Ranks: devices 0, 2, 3 -> 0, 1, 2.
  EXPECT_GT(m.sent_bytes[2], 20 * m.sent_bytes[0]);
  EXPECT_EQ(m.received_bytes[1], m.bytes);
  // At least the bytes over the 10 GB/s link, and far less than over Ethernet.
  EXPECT_GE(m.transfer_s, static_cast<double>(m.bytes) / 10e9);
  EXPECT_LT(m.transfer_s, static_cast<double>(m.bytes) / 1e9);
  EXPECT_NEAR(
      s->train_time_s,
      [&] {
        double t = 0.0;
        for (double x : s->step_times_s) t += x;
        return t + m.time_s;
      }(),
      1e-12);
  // Issue 6: the migration costs less than one training step (both exact virtual times).
  double mean_step_s = 0.0;
  for (double x : s->step_times_s) mean_step_s += x / static_cast<double>(s->step_times_s.size());
  EXPECT_LT(m.time_s, mean_step_s);
  std::printf("  virtual clock: migration %.3f ms, mean step %.3f ms\n", m.time_s * 1e3,
              mean_step_s * 1e3);
  // The virtual clock is exact: a second run reports the same migration time.
  auto again = RunCase(c, TinyEmulatedRun(kSwitchSteps));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->migrations[0].time_s, m.time_s);
}

TEST(PlanSwitchTest, AnUnusableNewPlanIsAnErrorNamingTheStep) {
  SwitchCase c = DropAndRejoin();
  // A device outside the running world.
  c.switches = {{5, MakePlan({Pipeline({Stage(0, 4, true, true, {5})}, 4, 3)}, "elsewhere")}};
  auto s = RunCase(c, TinyRun(kSwitchSteps));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("plan switch after step 5"), std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find("device 5 is not one of the 4 devices"), std::string::npos)
      << s.status().message();
  // A plan that does not cover the global batch.
  c.switches = {{3, MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 1, 3)}, "too-small")}};
  s = RunCase(c, TinyRun(kSwitchSteps));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("plan switch after step 3"), std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find("too-small"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace motley::testing
