// The metrics file's life cycle (metrics.h): every line carries an ISO-8601 UTC timestamp with
// milliseconds and elapsed_s; a resumed run keeps the lines up to its checkpoint's step, drops
// the steps it trains again, appends one resume record, and so holds every step once; an output
// that is not a regular file is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "train/metrics.h"

namespace motley::train {
namespace {

namespace fs = std::filesystem;

std::string TempFile(const std::string& name) {
  return (fs::temp_directory_path() / ("motley_metrics_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

StepMetrics Step(int64_t step) {
  StepMetrics m;
  m.step = step;
  m.loss = 3.0 - 0.1 * static_cast<double>(step);
  m.tokens = 128;
  return m;
}

std::vector<nlohmann::ordered_json> Lines(const std::string& path) {
  std::vector<nlohmann::ordered_json> out;
  const std::string text = ReadFile(path).value();
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    out.push_back(nlohmann::ordered_json::parse(text.substr(start, end - start)));
  }
  return out;
}

TEST(MetricsLifeCycle, IsoTimestampUtcWithMilliseconds) {
  // 2026-12-01T15:04:05.123Z is 1796137445.123 s after the epoch.
  const std::chrono::system_clock::time_point t{std::chrono::milliseconds(1796137445123LL)};
  EXPECT_EQ(IsoTimestampUtc(t), "2026-12-01T15:04:05.123Z");
  EXPECT_EQ(IsoTimestampUtc(std::chrono::system_clock::time_point{}), "1970-01-01T00:00:00.000Z");
}

TEST(MetricsLifeCycle, EveryLineCarriesTimestampAndElapsedAfterTheStep) {
  const std::string path = TempFile("stamp.jsonl");
  {
    auto w = MetricsWriter::Open(path);
    ASSERT_TRUE(w.ok()) << w.status().message();
    for (int64_t s = 1; s <= 3; ++s) ASSERT_TRUE(w->Write(Step(s)).ok());
    nlohmann::ordered_json other;
    other["step"] = 4;
    other["loss"] = 1.0;
    ASSERT_TRUE(w->WriteLine(other).ok());
  }
  const std::regex iso(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)");
  double last_elapsed = 0.0;
  const auto lines = Lines(path);
  ASSERT_EQ(lines.size(), 4U);
  for (const auto& j : lines) {
    auto it = j.begin();
    EXPECT_EQ(it.key(), "step");
    EXPECT_EQ((++it).key(), "timestamp");
    EXPECT_EQ((++it).key(), "elapsed_s");
    EXPECT_TRUE(std::regex_match(j["timestamp"].get<std::string>(), iso)) << j.dump();
    const double elapsed = j["elapsed_s"].get<double>();
    EXPECT_GE(elapsed, last_elapsed);
    last_elapsed = elapsed;
  }
  fs::remove(path);
}

TEST(MetricsLifeCycle, AResumeKeepsEveryStepOnce) {
  const std::string path = TempFile("resume.jsonl");
  {  // a run that reached step 6, then crashed mid-line; its last checkpoint was step 4
    auto w = MetricsWriter::Open(path);
    ASSERT_TRUE(w.ok());
    for (int64_t s = 1; s <= 6; ++s) ASSERT_TRUE(w->Write(Step(s)).ok());
  }
  {
    std::FILE* f = std::fopen(path.c_str(), "a");
    std::fputs("{\"step\":7,\"lo", f);
    std::fclose(f);
  }
  for (int attempt = 0; attempt < 2; ++attempt) {  // resumed twice from the same checkpoint
    auto w = MetricsWriter::Open(path, MetricsResume{4, "ckpt/step-00000004"});
    ASSERT_TRUE(w.ok()) << w.status().message();
    if (attempt == 1) {
      for (int64_t s = 5; s <= 8; ++s) ASSERT_TRUE(w->Write(Step(s)).ok());
    }
  }
  const auto lines = Lines(path);
  std::vector<int64_t> steps;
  int resumes = 0;
  for (const auto& j : lines) {
    if (j.contains("event")) {
      ++resumes;
      EXPECT_EQ(j["event"], "resume");
      EXPECT_EQ(j["step"], 4);
      EXPECT_EQ(j["from"], "ckpt/step-00000004");
      EXPECT_TRUE(j.contains("timestamp") && j.contains("elapsed_s"));
      EXPECT_EQ(steps.size(), 4U);  // right after step 4
      continue;
    }
    steps.push_back(j["step"].get<int64_t>());
  }
  EXPECT_EQ(resumes, 1);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  // A resume without a metrics file starts one with the record.
  fs::remove(path);
  ASSERT_TRUE(MetricsWriter::Open(path, MetricsResume{9, "c"}).ok());
  ASSERT_EQ(Lines(path).size(), 1U);
  fs::remove(path);
}

TEST(MetricsLifeCycle, ATargetThatIsNotARegularFileIsRefused) {
  const std::string victim = TempFile("victim");
  const std::string link = TempFile("link.jsonl");
  ASSERT_TRUE(WriteFileAtomic(victim, "precious").ok());
  fs::remove(link);
  fs::create_symlink(victim, link);
  for (const bool resume : {false, true}) {
    auto w = resume ? MetricsWriter::Open(link, MetricsResume{1, "c"}) : MetricsWriter::Open(link);
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().message().find("a symbolic link"), std::string::npos)
        << w.status().message();
  }
  EXPECT_EQ(ReadFile(victim).value(), "precious");
  fs::remove(link);
  fs::remove(victim);
}

}  // namespace
}  // namespace motley::train
