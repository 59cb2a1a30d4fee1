// Every command applies the one plan rule (spec::ValidatePlan, spec/plan.h, after the reader's
// structural checks), so no command accepts a plan another refuses: on each plan of the
// invalid-plan set (invalid_plans.h) `motley validate --plan`, `predict`, `simulate` and `train
// --plan` all fail with the same exit code and the rule's own message; on the valid base plan,
// whose stages recompute nothing, selectively and fully, and on it with a replica interleaved,
// all four succeed (`train` for one step);
// and a plan `motley plan` writes is accepted by the other four. Runs the `motley` binary.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/file_util.h"
#include "invalid_plans.h"
#include "parallel_test_util.h"
#include "spec/plan.h"
#include "spec/run_file.h"

namespace motley::testing {
namespace {

struct Outcome {
  int exit_code = -1;
  std::string err;
};

class PlanAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("motley_plan_agreement_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // The tiny run of parallel_test_util.h (TinyModel, TinyTrain with one step) on `cluster_yaml`,
  // as a run file; returns its path.
  std::string WriteRun(const std::string& cluster_yaml) const {
    EXPECT_TRUE(WriteFileAtomic(Path("cluster.yaml"), cluster_yaml).ok());
    const std::string run = R"(cluster: cluster.yaml
model: {name: tiny4, num_blocks: 4, hidden: 32, num_heads: 4, num_kv_heads: 2, ffn_hidden: 64,
        vocab_size: 256, max_seq_len: 16}
train:
  global_batch: 12
  seq_len: 16
  steps: 1
  seed: 5
  val_every: 0
  threads: 1
  optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 3, grad_clip: 1.0}
)";
    EXPECT_TRUE(WriteFileAtomic(Path("run.yaml"), run).ok());
    return Path("run.yaml");
  }

  Outcome Run(const std::string& args) const {
    const std::string cmd =
        std::string(MOTLEY_BINARY) + " " + args + " >" + Path("stdout") + " 2>" + Path("stderr");
    const int status = std::system(cmd.c_str());
    Outcome o;
    o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    o.err = ReadFile(Path("stderr")).value();
    return o;
  }

  // The four commands that take a plan, on (run, plan).
  std::vector<std::pair<std::string, Outcome>> EveryCommand(const std::string& run,
                                                            const std::string& plan) const {
    return {{"validate", Run("validate " + run + " --plan " + plan)},
            {"predict", Run("predict " + run + " " + plan)},
            {"simulate", Run("simulate " + run + " " + plan)},
            {"train", Run("train " + run + " --plan " + plan)}};
  }

  std::filesystem::path dir_;
};

TEST_F(PlanAgreementTest, EveryCommandRefusesEachInvalidPlanWithTheSameError) {
  const std::vector<InvalidPlanCase> cases = InvalidPlanCases();
  ASSERT_GE(cases.size(), 12U);
  for (const InvalidPlanCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string run_path = WriteRun(c.cluster_yaml);
    spec::Plan plan = ValidPlan();
    c.breaks(plan);
    const std::string plan_path = Path("plan.json");
    ASSERT_TRUE(spec::SavePlan(plan, plan_path).ok());
    // The verdict, in process, on the plan as every command reads it: the reader's structural
    // checks (spec::LoadPlan), then the rule (spec::ValidatePlan).
    Result<spec::RunFile> run = spec::LoadRunFile(run_path);
    ASSERT_TRUE(run.ok()) << run.status().message();
    Result<spec::Plan> loaded = spec::LoadPlan(plan_path);
    const Status rule = loaded.ok()
                            ? spec::ValidatePlan(*loaded, run->cluster, run->model, run->train)
                            : loaded.status();
    ASSERT_FALSE(rule.ok());
    for (const std::string& part : c.expected) {
      EXPECT_NE(rule.message().find(part), std::string::npos) << rule.message();
    }
    int exit_code = -1;
    for (const auto& [command, o] : EveryCommand(run_path, plan_path)) {
      EXPECT_NE(o.exit_code, 0) << command << " accepted it";
      if (exit_code < 0) exit_code = o.exit_code;
      EXPECT_EQ(o.exit_code, exit_code) << command;
      EXPECT_NE(o.err.find(rule.message()), std::string::npos)
          << command << " did not report the rule's error '" << rule.message() << "': " << o.err;
    }
    std::printf("%-36s all refuse (exit %d): %s\n", c.name.c_str(), exit_code,
                rule.message().c_str());
  }
}

TEST_F(PlanAgreementTest, EveryCommandAcceptsTheValidPlanWithRecompute) {
  const std::string run_path = WriteRun(kClusterYaml);
  const spec::Plan plan = ValidPlan();
  ASSERT_EQ(spec::RecomputeSummary(plan), "per stage");
  const std::string plan_path = Path("plan.json");
  ASSERT_TRUE(spec::SavePlan(plan, plan_path).ok());
  for (const auto& [command, o] : EveryCommand(run_path, plan_path)) {
    EXPECT_EQ(o.exit_code, 0) << command << ": " << o.err;
  }
}

TEST_F(PlanAgreementTest, EveryCommandAcceptsAnInterleavedPlan) {
  const std::string run_path = WriteRun(kClusterYaml);
  spec::Plan plan = ValidPlan();
  InterleaveSecondPipeline(plan);
  const std::string plan_path = Path("plan.json");
  ASSERT_TRUE(spec::SavePlan(plan, plan_path).ok());
  for (const auto& [command, o] : EveryCommand(run_path, plan_path)) {
    EXPECT_EQ(o.exit_code, 0) << command << ": " << o.err;
  }
}

TEST_F(PlanAgreementTest, PlansThePlannerWritesAreAcceptedEverywhere) {
  for (const std::string& cluster : {std::string(kClusterYaml), EmulatedClusterYaml()}) {
    const std::string run_path = WriteRun(cluster);
    const std::string plan_path = Path("planned.json");
    const Outcome planned =
        Run("plan " + run_path + " -o " + plan_path + " --quiet --no-baselines");
    ASSERT_EQ(planned.exit_code, 0) << planned.err;
    for (const auto& [command, o] : EveryCommand(run_path, plan_path)) {
      EXPECT_EQ(o.exit_code, 0) << command << ": " << o.err;
    }
  }
}

// On a cluster of real and emulated devices the planner may only write a plan on one kind: it
// either does, and the plan is accepted everywhere, or fails with the rule's reason.
TEST_F(PlanAgreementTest, PlannerOnAHalfEmulatedClusterKeepsToTheRule) {
  const std::string run_path = WriteRun(MixedEmulationClusterYaml());
  const std::string plan_path = Path("planned.json");
  const Outcome planned = Run("plan " + run_path + " -o " + plan_path + " --quiet --no-baselines");
  if (planned.exit_code != 0) {
    EXPECT_NE(planned.err.find("all emulated or all real"), std::string::npos) << planned.err;
    EXPECT_FALSE(std::filesystem::exists(plan_path));
    std::printf("motley plan refuses: %s", planned.err.c_str());
    return;
  }
  for (const auto& [command, o] : EveryCommand(run_path, plan_path)) {
    EXPECT_EQ(o.exit_code, 0) << command << ": " << o.err;
  }
}

}  // namespace
}  // namespace motley::testing
