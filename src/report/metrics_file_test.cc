// Tests of reading metrics files for the reports: single-device and parallel lines, files with and
// without timestamps / elapsed_s, resume records, and errors that name the file and line.
#include "report/metrics_file.h"

#include <gtest/gtest.h>

namespace motley::report {
namespace {

TEST(MetricsFileTest, ReadsSingleDeviceLinesWithoutTimestamps) {
  const std::string text =
      R"({"step":1,"loss":5.5,"lr":0.001,"grad_norm":2,"tokens":128,"step_time_s":0.5,"tokens_per_s":256,"gflops":1,"loss_spike":false}
{"step":2,"loss":5.0,"lr":0.001,"grad_norm":2,"tokens":128,"step_time_s":0.25,"tokens_per_s":512,"gflops":1,"val_loss":5.1,"loss_spike":false}

)";
  auto run = ParseMetrics(text, "m.jsonl", "m");
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->rows.size(), 2U);
  EXPECT_EQ(run->clock, "");
  EXPECT_FALSE(run->wall_from_elapsed);
  EXPECT_FALSE(run->rows[0].val_loss.has_value());
  EXPECT_DOUBLE_EQ(*run->rows[1].val_loss, 5.1);
  EXPECT_DOUBLE_EQ(run->rows[0].wall_s, 0.5);  // summed step times
  EXPECT_DOUBLE_EQ(run->rows[1].wall_s, 0.75);
  EXPECT_DOUBLE_EQ(run->rows[1].tokens_per_s, 512);
}

TEST(MetricsFileTest, ParallelLinesTimestampsAndResumes) {
  const std::string text =
      R"({"step":1,"loss":5,"tokens":64,"clock":"virtual","step_time_s":2,"wall_step_time_s":0.1,"tokens_per_s":32,"predicted_step_time_s":2.0,"timestamp":"2026-12-01T15:04:05.123Z","elapsed_s":0.4}
{"step":2,"loss":4,"tokens":64,"clock":"virtual","step_time_s":2,"wall_step_time_s":0.1,"tokens_per_s":32,"timestamp":"2026-12-01T15:04:05.223Z","elapsed_s":0.5}
{"event":"resume","step":1,"from":"/tmp/ckpt/step-00000001","timestamp":"2026-12-01T16:00:00.000Z"}
{"event":"something-else","step":9}
{"step":2,"loss":4,"tokens":64,"clock":"virtual","step_time_s":2,"wall_step_time_s":0.1,"tokens_per_s":32,"elapsed_s":0.2}
)";
  auto run = ParseMetrics(text, "p.jsonl", "p");
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->clock, "virtual");
  EXPECT_TRUE(run->emulated_clock());
  ASSERT_EQ(run->rows.size(), 3U);
  ASSERT_EQ(run->resumes.size(), 1U);
  EXPECT_EQ(run->resumes[0].step, 1);
  EXPECT_EQ(run->resumes[0].row, 2U);
  EXPECT_EQ(run->resumes[0].from, "/tmp/ckpt/step-00000001");
  EXPECT_TRUE(run->wall_from_elapsed);
  EXPECT_DOUBLE_EQ(run->rows[1].wall_s, 0.5);
  EXPECT_DOUBLE_EQ(run->rows[2].wall_s, 0.7);  // the resumed process's clock continues
  EXPECT_EQ(run->rows[0].timestamp, "2026-12-01T15:04:05.123Z");
  EXPECT_DOUBLE_EQ(*run->rows[0].predicted_step_time_s, 2.0);
  EXPECT_FALSE(run->rows[1].predicted_step_time_s.has_value());
  EXPECT_DOUBLE_EQ(run->rows[0].wall_step_time_s, 0.1);
}

TEST(MetricsFileTest, ErrorsNameTheFileAndLine) {
  auto bad = ParseMetrics("{\"step\":1,\"loss\":2}\nnot json\n", "m.jsonl", "m");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("m.jsonl:2"), std::string::npos) << bad.status().message();
  auto no_loss = ParseMetrics("{\"step\":1}\n", "m.jsonl", "m");
  ASSERT_FALSE(no_loss.ok());
  EXPECT_NE(no_loss.status().message().find("m.jsonl:1"), std::string::npos);
  EXPECT_NE(no_loss.status().message().find("'loss'"), std::string::npos);
  auto missing = ReadMetricsFile("/nonexistent/m.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/m.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace motley::report
