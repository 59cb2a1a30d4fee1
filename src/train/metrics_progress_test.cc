// Tests for the metrics JSONL file and the progress display (terminal and plain modes).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "train/metrics.h"
#include "train/progress.h"

namespace motley::train {
namespace {

StepMetrics Sample(int64_t step) {
  StepMetrics m;
  m.step = step;
  m.loss = 2.5;
  m.lr = 3e-4;
  m.grad_norm = 0.75;
  m.tokens = 1024;
  m.step_time_s = 0.5;
  m.tokens_per_s = 2048.0;
  m.gflops = 1.25;
  return m;
}

std::string ReadAll(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

TEST(MetricsTest, JsonHasEveryFieldAndValLossOnlyWhenMeasured) {
  StepMetrics m = Sample(3);
  auto j = nlohmann::json::parse(StepMetricsToJson(m));
  EXPECT_EQ(j["step"], 3);
  EXPECT_DOUBLE_EQ(j["loss"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j["lr"].get<double>(), 3e-4);
  EXPECT_DOUBLE_EQ(j["grad_norm"].get<double>(), 0.75);
  EXPECT_EQ(j["tokens"], 1024);
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), 2048.0);
  EXPECT_DOUBLE_EQ(j["gflops"].get<double>(), 1.25);
  EXPECT_FALSE(j.contains("val_loss"));
  EXPECT_EQ(j["loss_spike"], false);
  m.val_loss = 2.0;
  m.loss_spike = true;
  j = nlohmann::json::parse(StepMetricsToJson(m));
  EXPECT_DOUBLE_EQ(j["val_loss"].get<double>(), 2.0);
  EXPECT_EQ(j["loss_spike"], true);
}

TEST(MetricsTest, WriterAppendsOneLinePerStep) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("motley_metrics_test_" + std::to_string(::getpid()) + ".jsonl"))
                               .string();
  {
    auto writer = MetricsWriter::Open(path);
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    for (int64_t s = 1; s <= 3; ++s) ASSERT_TRUE(writer->Write(Sample(s)).ok());
  }
  auto text = ReadFile(path);
  ASSERT_TRUE(text.ok());
  size_t lines = 0;
  size_t start = 0;
  for (size_t pos = 0; (pos = text->find('\n', start)) != std::string::npos; start = pos + 1) {
    auto j = nlohmann::json::parse(text->substr(start, pos - start));
    EXPECT_EQ(j["step"], static_cast<int64_t>(++lines));
  }
  EXPECT_EQ(lines, 3U);
  std::filesystem::remove(path);
}

TEST(MetricsTest, UnwritablePathIsAnErrorNamingIt) {
  auto writer = MetricsWriter::Open("/nonexistent-dir/m.jsonl");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find("/nonexistent-dir/m.jsonl"), std::string::npos);
}

ProgressStep Line(int64_t step) {
  ProgressStep s;
  s.step = step;
  s.loss = 2.5;
  s.lr = 3e-4;
  s.grad_norm = 0.75;
  s.tokens = 1024;
  s.wall_step_s = 0.5;
  return s;
}

TEST(ProgressTest, PlainModePrintsEveryNStepsAndTheLast) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressReporter progress(f, /*interactive=*/false, /*first_step=*/1, /*total_steps=*/25,
                            /*every=*/10);
  for (int64_t s = 1; s <= 25; ++s) progress.Update(Line(s), 0.1 * static_cast<double>(s));
  progress.Note("step 25: val_loss 2.0000");
  progress.Finish();
  const std::string out = ReadAll(f);
  std::fclose(f);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_NE(out.find("step 1/25 |"), std::string::npos) << out;
  EXPECT_NE(out.find("step 10/25 | loss 2.5000 | lr 3.00e-04 | norm 0.750 | 2048 tok/s | ETA 2s\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("step 20/25 |"), std::string::npos) << out;
  EXPECT_NE(out.find("step 25/25 |"), std::string::npos) << out;
  EXPECT_EQ(out.find("step 11/25 "), std::string::npos) << out;
  EXPECT_NE(out.find("val_loss 2.0000\n"), std::string::npos);
  // 4 progress lines + 1 note.
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 5);
}

// A resumed run counts its ETA from its own first step; an emulated run shows both rates; a
// flagged step always prints, also between intervals.
TEST(ProgressTest, PlainModeResumeEmulatedRateAndFlags) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressReporter progress(f, /*interactive=*/false, /*first_step=*/11, /*total_steps=*/20,
                            /*every=*/5);
  for (int64_t s = 11; s <= 20; ++s) {
    ProgressStep p = Line(s);
    p.emulated_tokens_per_s = 312.0;
    p.mfu = 0.4383;
    if (s == 13) p.flag = "SKIPPED: non-finite loss or gradient norm";
    progress.Update(p, 2.0 * static_cast<double>(s - 10));  // 2 s per step
  }
  const std::string out = ReadAll(f);
  std::fclose(f);
  EXPECT_NE(out.find("step 11/20 | loss 2.5000 | lr 3.00e-04 | norm 0.750 | 2048 tok/s | 312 "
                     "tok/s virtual | MFU 43.83% | ETA 18s\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("step 13/20 |"), std::string::npos) << out;
  EXPECT_NE(out.find("| SKIPPED: non-finite loss or gradient norm\n"), std::string::npos) << out;
  EXPECT_NE(out.find("step 15/20 | loss 2.5000 | lr 3.00e-04 | norm 0.750 | 2048 tok/s | 312 "
                     "tok/s virtual | MFU 43.83% | ETA 10s\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("step 12/20"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 4);  // 11, 13, 15, 20
}

TEST(ProgressTest, TerminalModeRewritesOneLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressReporter progress(f, /*interactive=*/true, /*first_step=*/1, /*total_steps=*/4,
                            /*every=*/10);
  for (int64_t s = 1; s <= 4; ++s) progress.Update(Line(s), 1.0 * static_cast<double>(s));
  progress.Finish();
  progress.Finish();  // idempotent
  const std::string out = ReadAll(f);
  std::fclose(f);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 4);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);
  EXPECT_NE(out.find("step 4/4 [####################] loss 2.5000 | 2048 tok/s | ETA 0s"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("step 2/4 [##########..........] loss 2.5000 | 2048 tok/s | ETA 2s"),
            std::string::npos)
      << out;
}

TEST(ProgressTest, FormatsDurations) {
  EXPECT_EQ(ProgressReporter::FormatDuration(7.2), "7s");
  EXPECT_EQ(ProgressReporter::FormatDuration(245), "4:05");
  EXPECT_EQ(ProgressReporter::FormatDuration(3723), "1:02:03");
  EXPECT_EQ(ProgressReporter::FormatDuration(-1), "?");
  EXPECT_EQ(ProgressReporter::FormatRate(950), "950");
  EXPECT_EQ(ProgressReporter::FormatRate(12345), "12.3k");
  EXPECT_EQ(ProgressReporter::FormatRate(3.4e6), "3.40M");
  EXPECT_EQ(DefaultLogInterval(80), 4);
  EXPECT_EQ(DefaultLogInterval(5), 1);
}

}  // namespace
}  // namespace motley::train
