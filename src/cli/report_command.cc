// `motley report METRICS.jsonl [MORE.jsonl ...] -o report.html`: one self-contained HTML page with
// the runs' metrics overlaid (src/report/run_report.h): loss (train and validation) and throughput
// against step and wall time, measured against predicted step time. Reads the single-device and
// the parallel metrics formats, with or without timestamps and resume records.
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "cli/cli_help.h"
#include "cli/commands.h"
#include "cli/fail.h"
#include "core/file_util.h"
#include "report/run_report.h"

namespace motley::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> metrics;
  std::vector<std::string> labels;
  std::string out_path;
  std::string title = "motley runs";
};

int RunReport(const ReportArgs& args) {
  if (!args.labels.empty() && args.labels.size() != args.metrics.size()) {
    return Fail("report",
                Err(StatusCode::kInvalidArgument,
                    "--label: {} label(s) for {} metrics file(s); give one per file or none",
                    args.labels.size(), args.metrics.size()));
  }
  std::vector<report::RunMetrics> runs;
  for (size_t i = 0; i < args.metrics.size(); ++i) {
    Result<report::RunMetrics> run =
        report::ReadMetricsFile(args.metrics[i], args.labels.empty() ? "" : args.labels[i]);
    if (!run.ok()) return Fail("report", run.status());
    runs.push_back(std::move(*run));
  }
  const Status s = WriteFileAtomic(args.out_path, report::RunReportHtml(args.title, runs));
  if (!s.ok()) return Fail("report", s);
  size_t rows = 0;
  for (const report::RunMetrics& r : runs) rows += r.rows.size();
  fmt::print("report written to {} ({} run(s), {} steps)\n", args.out_path, runs.size(), rows);
  return 0;
}

}  // namespace

void AddReportCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Write one self-contained HTML page (SVG charts, no network needed) of one or more runs' "
      "metrics files, overlaid: loss and validation loss against step and wall time, throughput, "
      "and measured against predicted step time.");
  cmd->add_option("metrics", args->metrics,
                  "Metrics files (JSONL, docs/formats/metrics.md and parallel-metrics.md)")
      ->type_name("METRICS.jsonl ...")
      ->required();
  cmd->add_option("-o,--output", args->out_path, "The HTML file to write")
      ->type_name("report.html")
      ->required();
  cmd->add_option("--label", args->labels,
                  "A name per metrics file, in order (default: each file's name)")
      ->type_name("NAME");
  cmd->add_option("--title", args->title, "The page's title")->type_name("TEXT");
  SetExamples(cmd, {"motley train examples/runs/tiny.yaml --metrics tiny.jsonl && motley report "
                    "tiny.jsonl -o tiny.html",
                    "motley report planned.jsonl uniform.jsonl --label planned --label uniform "
                    "-o compare.html"});
  cmd->callback([args, &exit_code] { exit_code = RunReport(*args); });
}

}  // namespace motley::cli
