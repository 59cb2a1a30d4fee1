// Tests of the profiler (train/profiler.h): the points it returns, its option checks, the BLAS
// thread count it measures with (the runtime's per-rank count, restored after) and the
// companion threads that load the other cores while one is timed.
#include "train/profiler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace motley::train {
namespace {

spec::ModelSpec Tiny() {
  Result<spec::ModelSpec> m = spec::ModelPreset("tiny");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return *m;
}

ProfileOptions Quick(const spec::ModelSpec& m) {
  ProfileOptions o;
  o.micro_batch_sizes = {1, 2};
  o.seq_len = std::min<int64_t>(16, m.max_seq_len);
  o.warmup = 1;
  o.repeats = 3;
  return o;
}

bool Positive(const PartTimes& p) {
  return std::isfinite(p.forward_s) && std::isfinite(p.backward_s) && p.forward_s > 0 &&
         p.backward_s > 0;
}

TEST(ProfilerTest, OnePointPerSizeWithPositiveTimes) {
  const spec::ModelSpec m = Tiny();
  const ProfileOptions o = Quick(m);
  Result<std::vector<ProfilePoint>> points = ProfileModel(m, o);
  ASSERT_TRUE(points.ok()) << points.status().message();
  ASSERT_EQ(points->size(), 2U);
  for (size_t i = 0; i < points->size(); ++i) {
    const ProfilePoint& p = (*points)[i];
    EXPECT_EQ(p.micro_batch_size, o.micro_batch_sizes[i]);
    EXPECT_EQ(p.seq_len, o.seq_len);
    EXPECT_EQ(p.tp, 1);
    EXPECT_TRUE(Positive(p.block));
    EXPECT_TRUE(Positive(p.embedding));
    EXPECT_TRUE(Positive(p.head));
  }
}

// The runtime runs each rank's BLAS with one thread; the profile must measure with the same count
// (OpenBLAS's default, every core, made blocks profile 12-16% fast), and leave the process's
// count as it found it.
TEST(ProfilerTest, MeasuresWithTheRanksBlasThreadsAndRestoresThem) {
  const spec::ModelSpec m = Tiny();
  ProfileOptions o = Quick(m);
  o.threads = 1;
  backend::SetBlasThreads(2);
  const int before = backend::BlasThreads();
  std::vector<int> during;
  o.progress = [&](const std::string&) { during.push_back(backend::BlasThreads()); };
  ASSERT_TRUE(ProfileModel(m, o).ok());
  ASSERT_EQ(during.size(), 2U);
  for (const int n : during) EXPECT_EQ(n, 1);
  EXPECT_EQ(backend::BlasThreads(), before);
  ASSERT_TRUE(ProfileStepPerParam(m, o).ok());
  EXPECT_EQ(backend::BlasThreads(), before);
  backend::SetBlasThreads(1);
}

TEST(ProfilerTest, CompanionsRunBesideTheMeasurement) {
  const spec::ModelSpec m = Tiny();
  ProfileOptions o = Quick(m);
  o.companions = 1;
  Result<std::vector<ProfilePoint>> points = ProfileModel(m, o);
  ASSERT_TRUE(points.ok()) << points.status().message();
  ASSERT_EQ(points->size(), 2U);
  for (const ProfilePoint& p : *points) EXPECT_TRUE(Positive(p.block));
  Result<double> step = ProfileStepPerParam(m, o);
  ASSERT_TRUE(step.ok()) << step.status().message();
  EXPECT_GT(*step, 0.0);
}

TEST(ProfilerTest, RejectsBadOptions) {
  const spec::ModelSpec m = Tiny();
  ProfileOptions o = Quick(m);
  o.companions = -1;
  Result<std::vector<ProfilePoint>> bad = ProfileModel(m, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("companions"), std::string::npos);
  EXPECT_FALSE(ProfileStepPerParam(m, o).ok());
  o = Quick(m);
  o.micro_batch_sizes = {2, 0};
  bad = ProfileModel(m, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("micro-batch size"), std::string::npos);
  o = Quick(m);
  o.micro_batch_sizes.clear();
  EXPECT_FALSE(ProfileModel(m, o).ok());
  o = Quick(m);
  o.tp = 3;
  EXPECT_FALSE(ProfileModel(m, o).ok());
}

}  // namespace
}  // namespace motley::train
