// See run_report.h.
#include "report/run_report.h"

#include <cmath>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "core/format_units.h"
#include "core/throughput.h"
#include "report/html.h"
#include "report/svg_chart.h"

namespace motley::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using RowValue = std::function<double(const MetricsRow&)>;

// One series of `run`: y(row) against x(row) for every row (a NaN y draws no mark).
Series MakeSeries(const RunMetrics& run, const std::string& label, const std::string& colour,
                  const RowValue& x, const RowValue& y, const std::string& unit) {
  Series s;
  s.label = label;
  s.colour = colour;
  for (const ResumeRecord& r : run.resumes) s.breaks.push_back(r.row);
  for (const MetricsRow& row : run.rows) {
    s.x.push_back(x(row));
    s.y.push_back(y(row));
    s.tips.push_back(fmt::format("{}: step {}: {:.5g}{}", label, row.step, s.y.back(), unit));
  }
  return s;
}

double Step(const MetricsRow& r) {
  return static_cast<double>(r.step);
}
double Wall(const MetricsRow& r) {
  return r.wall_s;
}
double WallRate(const MetricsRow& r) {
  return r.wall_step_time_s > 0 ? TokensPerSecond(r.tokens, r.wall_step_time_s) : kNaN;
}

std::string ClockName(const RunMetrics& run) {
  return run.clock.empty() ? "wall" : run.clock;
}

// Resume markers of every run on a step axis or a wall-time axis.
std::vector<Marker> ResumeMarkers(const std::vector<RunMetrics>& runs, bool on_wall) {
  std::vector<Marker> markers;
  for (const RunMetrics& run : runs) {
    for (const ResumeRecord& r : run.resumes) {
      if (on_wall && r.row >= run.rows.size()) continue;
      const double x = on_wall ? run.rows[r.row].wall_s : static_cast<double>(r.step);
      markers.push_back({x, fmt::format("{} resumed", run.label)});
    }
  }
  return markers;
}

std::string LossChart(const std::vector<RunMetrics>& runs, bool on_wall) {
  LineChart c;
  c.id = on_wall ? "loss-wall" : "loss-step";
  c.title = on_wall ? "Loss against wall time" : "Loss against step";
  c.x_label = on_wall ? "wall time since the start (s)" : "step";
  c.y_label = "loss (nats per token)";
  const RowValue x = on_wall ? RowValue(Wall) : RowValue(Step);
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMetrics& run = runs[i];
    const std::string colour = Colour(static_cast<int>(i));
    c.series.push_back(MakeSeries(
        run, run.label + " train", colour, x, [](const MetricsRow& r) { return r.loss; }, ""));
    Series val = MakeSeries(
        run, run.label + " validation", colour, x,
        [](const MetricsRow& r) { return r.val_loss.value_or(kNaN); }, "");
    val.dashed = true;
    val.square_marks = true;
    bool any = false;
    for (const MetricsRow& r : run.rows) any = any || r.val_loss.has_value();
    if (any) c.series.push_back(std::move(val));
  }
  c.markers = ResumeMarkers(runs, on_wall);
  return RenderLineChart(c);
}

std::string ThroughputChart(const std::vector<RunMetrics>& runs, bool on_wall) {
  LineChart c;
  c.id = on_wall ? "throughput-wall" : "throughput-step";
  c.title = on_wall ? "Throughput against wall time" : "Throughput against step";
  c.x_label = on_wall ? "wall time since the start (s)" : "step";
  c.y_label = "tokens/s";
  c.y_from_zero = true;
  const RowValue x = on_wall ? RowValue(Wall) : RowValue(Step);
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMetrics& run = runs[i];
    const std::string colour = Colour(static_cast<int>(i));
    c.series.push_back(MakeSeries(
        run, fmt::format("{} ({} clock)", run.label, ClockName(run)), colour, x,
        [](const MetricsRow& r) { return r.tokens_per_s; }, " tokens/s"));
    if (run.emulated_clock()) {
      Series wall = MakeSeries(run, run.label + " (wall clock)", colour, x, WallRate, " tokens/s");
      wall.dashed = true;
      c.series.push_back(std::move(wall));
    }
  }
  c.markers = ResumeMarkers(runs, on_wall);
  return RenderLineChart(c);
}

std::string StepTimeChart(const std::vector<RunMetrics>& runs) {
  LineChart c;
  c.id = "step-time";
  c.title = "Step time: measured against predicted";
  c.x_label = "step";
  c.y_label = "step time (s)";
  c.y_from_zero = true;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMetrics& run = runs[i];
    const std::string colour = Colour(static_cast<int>(i));
    c.series.push_back(MakeSeries(
        run, fmt::format("{} measured ({} clock)", run.label, ClockName(run)), colour, Step,
        [](const MetricsRow& r) { return r.step_time_s; }, " s"));
    bool any = false;
    for (const MetricsRow& r : run.rows) any = any || r.predicted_step_time_s.has_value();
    if (!any) continue;
    Series p = MakeSeries(
        run, run.label + " predicted", colour, Step,
        [](const MetricsRow& r) { return r.predicted_step_time_s.value_or(kNaN); }, " s");
    p.dashed = true;
    p.square_marks = true;
    c.series.push_back(std::move(p));
  }
  c.markers = ResumeMarkers(runs, false);
  return RenderLineChart(c);
}

std::string SummaryTable(const std::vector<RunMetrics>& runs) {
  std::vector<std::vector<std::string>> rows;
  for (const RunMetrics& run : runs) {
    double tokens = 0, clock_s = 0, wall_s = 0, predicted = 0;
    int64_t predicted_rows = 0;
    std::optional<double> val;
    for (const MetricsRow& r : run.rows) {
      tokens += static_cast<double>(r.tokens);
      clock_s += r.step_time_s;
      wall_s += r.wall_step_time_s;
      if (r.val_loss) val = r.val_loss;
      if (r.predicted_step_time_s) {
        predicted += *r.predicted_step_time_s;
        ++predicted_rows;
      }
    }
    const double n = static_cast<double>(run.rows.size());
    const std::string pred =
        predicted_rows > 0
            ? fmt::format(
                  "{} ({:+.1f}% measured vs predicted)",
                  FormatSeconds(predicted / static_cast<double>(predicted_rows)),
                  100.0 * ((clock_s / n) / (predicted / static_cast<double>(predicted_rows)) - 1.0))
            : "-";
    rows.push_back({Escape(run.label), Escape(run.path), fmt::format("{}", run.rows.size()),
                    Escape(ClockName(run)),
                    run.rows.empty() ? "-" : fmt::format("{:.4f}", run.rows.front().loss),
                    run.rows.empty() ? "-" : fmt::format("{:.4f}", run.rows.back().loss),
                    val ? fmt::format("{:.4f}", *val) : "-",
                    clock_s > 0 ? fmt::format("{:.1f}", tokens / clock_s) : "-",
                    wall_s > 0 ? fmt::format("{:.1f}", tokens / wall_s) : "-",
                    n > 0 ? FormatSeconds(clock_s / n) : "-", Escape(pred),
                    fmt::format("{}", run.resumes.size())});
  }
  return Table(
      {"run", "file", "steps", "clock", "first loss", "last loss", "last val loss",
       "tokens/s (run's clock)", "tokens/s (wall)", "mean step time", "predicted step", "resumes"},
      rows);
}

}  // namespace

std::string RunSections(const std::vector<RunMetrics>& runs) {
  if (runs.empty()) return "<h2>Runs</h2><p>No runs.</p>\n";
  std::string h = "<h2>Runs</h2>\n";
  h += SummaryTable(runs);
  bool from_elapsed = true;
  for (const RunMetrics& run : runs) from_elapsed = from_elapsed && run.wall_from_elapsed;
  h += fmt::format(
      "<p class=\"note\">Clocks: 'virtual' is the exact emulated time of an emulated cluster "
      "(nothing slept); 'wall' and 'host' are real seconds. Wall time since the start comes from "
      "{}.</p>\n",
      from_elapsed ? "each line's elapsed_s"
                   : "the sum of wall step times (some lines have no elapsed_s; validation and "
                     "checkpoint time between steps is not counted)");
  h += "<h2>Loss</h2>\n" + LossChart(runs, false) + LossChart(runs, true);
  h += "<h2>Throughput</h2>\n" + ThroughputChart(runs, false) + ThroughputChart(runs, true);
  h += "<h2>Step time</h2>\n" + StepTimeChart(runs);
  return h;
}

std::string RunReportHtml(const std::string& title, const std::vector<RunMetrics>& runs) {
  return Page(title, RunSections(runs));
}

}  // namespace motley::report
