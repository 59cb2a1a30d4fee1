// The world is the launched ranks (issue 14): a run over every device of the cluster
// (ParallelTrainerOptions::world_devices, what `motley train` launches) trains a plan that leaves
// devices idle with the serial losses; the idle ranks join the collectives and run the probe op;
// with straggler_reports ranks on real (CPU) devices all probe (an idle device's peers) and report
// their link traffic only on emulated links; a checkpoint resumes into a world with idle ranks.
#include <filesystem>
#include <vector>

#include <gtest/gtest.h>

#include "parallel_test_util.h"
#include "train/parallel_trainer.h"

namespace motley::testing {
namespace {

constexpr int64_t kSteps = 6;

// Three replicas on devices 0, 1 and 5 of the 8-device CPU cluster: five ranks idle.
spec::Plan ThreeOfEight() {
  return MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 2, 2),
                   Pipeline({Stage(0, 4, true, true, {1})}, 2, 2),
                   Pipeline({Stage(0, 4, true, true, {5})}, 2, 2)},
                  "dp3-of-8");
}

TEST(WorldTest, APlanLeavingDevicesIdleTrainsTheSerialTrajectoryAndIdleRanksProbe) {
  const spec::RunFile run = TinyRun(kSteps);
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  options.world_devices = train::ClusterWorld(run.cluster);
  options.straggler_reports = true;
  std::vector<train::StepReport> reports;
  options.plan_switch = [&](int64_t, const train::StepReport& report) {
    train::StepReport copy = report;
    copy.plan = nullptr;
    reports.push_back(copy);
    return std::optional<spec::Plan>();
  };
  auto summary = train::TrainParallel(run, ThreeOfEight(), options);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_EQ(summary->ranks, 8);
  ExpectLossesContinue(SerialLosses(run), summary->losses, 1, "3 of 8 devices, 5 idle");
  ASSERT_EQ(reports.size(), static_cast<size_t>(kSteps - 1));  // asked after every step but last
  for (const train::StepReport& report : reports) {
    ASSERT_EQ(report.ranks.size(), 8U);
    for (const train::StepReport::Rank& r : report.ranks) {
      EXPECT_EQ(r.device, r.rank);
      EXPECT_EQ(r.idle, r.device != 0 && r.device != 1 && r.device != 5) << r.device;
      // Real devices: every rank probes (idle or not), and no profile gives an expected time.
      EXPECT_GT(r.probe_s, 0.0) << r.device;
      EXPECT_EQ(r.probe_expected_s, 0.0) << r.device;
      EXPECT_TRUE(r.links.empty()) << "links are measured on emulated links only";
      if (r.idle) {
        EXPECT_EQ(r.times.forward_s, 0.0);
      } else {
        EXPECT_GT(r.times.forward_s, 0.0);
      }
    }
  }
}

TEST(WorldTest, EmulatedRanksReportTheirLinkTraffic) {
  const spec::RunFile run = TinyEmulatedRun(3);
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  options.world_devices = train::ClusterWorld(run.cluster);  // 6 devices
  options.straggler_reports = true;
  std::vector<train::StepReport> reports;
  options.plan_switch = [&](int64_t, const train::StepReport& report) {
    reports.push_back(report);
    return std::optional<spec::Plan>();
  };
  // Two replicas, on the two fast devices: the slow four idle, probing at their emulated profile.
  const spec::Plan plan = MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 3, 2),
                                    Pipeline({Stage(0, 4, true, true, {1})}, 3, 2)},
                                   "dp2-fast");
  auto summary = train::TrainParallel(run, plan, options);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  ASSERT_FALSE(reports.empty());
  for (const train::StepReport::Rank& r : reports.front().ranks) {
    if (r.idle) {
      EXPECT_GT(r.probe_s, 0.0);
      EXPECT_NEAR(r.probe_s, r.probe_expected_s, 1e-12) << "a healthy emulated probe is exact";
    } else {
      EXPECT_EQ(r.probe_s, 0.0);  // emulated ranks that train do not probe
    }
    // Every rank sends to its successor on the world ring (loss all-reduce, metrics gather);
    // the two replicas also exchange gradients.
    double bytes = 0.0;
    for (const train::StepReport::Rank::Link& l : r.links) {
      EXPECT_NE(l.to_rank, r.rank);
      EXPECT_GT(l.transfers, 0);
      EXPECT_GT(l.seconds, 0.0);
      bytes += l.bytes;
    }
    EXPECT_GT(bytes, 0.0) << "rank " << r.rank;
  }
}

TEST(WorldTest, ACheckpointResumesIntoAWorldWithIdleRanks) {
  const auto dir = std::filesystem::path(TempPath("world_ckpt"));
  std::filesystem::remove_all(dir);
  spec::RunFile run = TinyRun(kSteps);
  run.train.checkpoint.dir = dir.string();
  run.train.checkpoint.every_steps = 3;
  train::ParallelTrainerOptions options;
  options.out = nullptr;
  options.world_devices = train::ClusterWorld(run.cluster);
  spec::RunFile first = run;
  first.train.steps = 3;
  auto saved = train::TrainParallel(first, ThreeOfEight(), options);
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  options.resume = dir.string();
  auto resumed = train::TrainParallel(run, ThreeOfEight(), options);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(resumed->first_step, 4);
  // The serial oracle saves nothing (a fresh run refuses a folder that holds checkpoints).
  spec::RunFile serial = run;
  serial.train.checkpoint.dir.clear();
  ExpectLossesContinue(SerialLosses(serial), resumed->losses, 4, "resumed with idle ranks");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace motley::testing
