// Every shipped example (examples/clusters, runs, plans) loads, and every plan validates against
// the run it was written for. Uniform plans equal what UniformPlan builds.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "motley_source_dir.h"
#include "spec/plan.h"
#include "spec/run_file.h"

namespace motley::spec {
namespace {

const std::filesystem::path kExamples = std::filesystem::path(MOTLEY_SOURCE_DIR) / "examples";

std::vector<std::string> FilesIn(const std::string& sub, const std::string& ext) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(kExamples / sub)) {
    if (e.path().extension() == ext) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ExamplesTest, ClustersLoadWithTheAdvertisedShapes) {
  const std::vector<std::string> files = FilesIn("clusters", ".yaml");
  EXPECT_GE(files.size(), 3u);
  for (const std::string& f : files) {
    Result<ClusterSpec> c = LoadClusterSpec(f);
    EXPECT_TRUE(c.ok()) << c.status().message();
  }
  Result<ClusterSpec> hetero = LoadClusterSpec((kExamples / "clusters/local-hetero.yaml").string());
  ASSERT_TRUE(hetero.ok());
  EXPECT_EQ(hetero->num_devices(), 6);
  EXPECT_EQ(hetero->DevicesPerType(), (std::vector<int>{2, 4}));
  for (const DeviceType& t : hetero->device_types) EXPECT_TRUE(t.is_emulated()) << t.name;
  Result<ClusterSpec> hethub = LoadClusterSpec((kExamples / "clusters/hethub-768.yaml").string());
  ASSERT_TRUE(hethub.ok());
  EXPECT_EQ(hethub->DevicesPerType(), (std::vector<int>{128, 640}));
  EXPECT_EQ(hethub->device_types[0].vendor, "cuda");
  EXPECT_EQ(hethub->device_types[1].vendor, "rocm");
  EXPECT_EQ(hethub->LinkBetween(0, 767).name, "roce-100g");
  EXPECT_EQ(hethub->LinkBetween(128, 767).name, "ib-hdr");
  Result<ClusterSpec> two = LoadClusterSpec((kExamples / "clusters/two-island.yaml").string());
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->num_devices(), 64);
  EXPECT_EQ(two->LinkBetween(0, 8).name, "ib-hdr");
  EXPECT_EQ(two->LinkBetween(32, 40).name, "roce-100g");
  EXPECT_EQ(two->LinkBetween(0, 63).name, "eth-25g");
}

TEST(ExamplesTest, RunsLoad) {
  const std::vector<std::string> files = FilesIn("runs", ".yaml");
  EXPECT_GE(files.size(), 4u);
  for (const std::string& f : files) {
    Result<RunFile> r = LoadRunFile(f);
    EXPECT_TRUE(r.ok()) << r.status().message();
  }
}

// Plan file -> the run file it was written for. A new plan must be added here.
const std::map<std::string, std::string> kPlanRuns = {
    {"local-hetero-uniform.json", "local-hetero.yaml"},
    {"local-hetero-mixed.json", "local-hetero.yaml"},
    {"hetero-4-uniform.json", "hetero-4.yaml"},
    {"hetero-4-balanced.json", "hetero-4.yaml"},
    {"two-island-uniform.json", "gpt2-124m.yaml"},
    {"hethub-768-mixed.json", "hethub-140b.yaml"},
};

TEST(ExamplesTest, PlansValidateAgainstTheirRuns) {
  const std::vector<std::string> files = FilesIn("plans", ".json");
  EXPECT_EQ(files.size(), kPlanRuns.size());
  for (const std::string& f : files) {
    const std::string name = std::filesystem::path(f).filename().string();
    auto it = kPlanRuns.find(name);
    ASSERT_NE(it, kPlanRuns.end()) << name << " has no run in kPlanRuns";
    Result<Plan> plan = LoadPlan(f);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    Result<RunFile> run = LoadRunFile((kExamples / "runs" / it->second).string());
    ASSERT_TRUE(run.ok()) << run.status().message();
    Status s = ValidatePlan(*plan, run->cluster, run->model, run->train);
    EXPECT_TRUE(s.ok()) << s.message();
  }
}

TEST(ExamplesTest, UniformPlansMatchTheBuilder) {
  struct Uniform {
    const char* plan;
    const char* run;
    UniformPlanOptions options;
  };
  const Uniform cases[] = {
      {"local-hetero-uniform.json", "local-hetero.yaml", {3, 2, 1, 1}},
      {"hetero-4-uniform.json", "hetero-4.yaml", {2, 2, 1, 2}},
      {"two-island-uniform.json", "gpt2-124m.yaml", {4, 4, 4, 1}},
  };
  for (const Uniform& u : cases) {
    Result<RunFile> run = LoadRunFile((kExamples / "runs" / u.run).string());
    ASSERT_TRUE(run.ok()) << run.status().message();
    Result<Plan> built = UniformPlan(run->cluster, run->model, run->train, u.options);
    ASSERT_TRUE(built.ok()) << built.status().message();
    Result<Plan> shipped = LoadPlan((kExamples / "plans" / u.plan).string());
    ASSERT_TRUE(shipped.ok());
    EXPECT_EQ(PlanToJson(*built), PlanToJson(*shipped)) << u.plan;
  }
}

}  // namespace
}  // namespace motley::spec
