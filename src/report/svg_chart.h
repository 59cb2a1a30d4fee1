// SVG charts for motley's HTML reports (report/*.h): line charts of several series (runs overlaid),
// horizontal bar charts and grouped column charts. Every data point is drawn as one element of
// class "mark" (a circle, square or bar, with a <title> tooltip), so a chart's marks can be counted
// in the page's DOM against the rows it was drawn from; axes, grid, legend and markers are not
// marks. Each chart is one <svg class="chart" data-chart="ID"> inside a <figure>. No scripts, no
// external resources. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace motley::report {

// One series of a line chart: points (x[i], y[i]), drawn as a polyline (unless !line) and one mark
// per point. A point whose y is not finite is skipped (no mark). `breaks` lists point indices where
// the polyline restarts (e.g. where a resumed run starts again), without a connecting segment.
struct Series {
  std::string label;
  std::string colour;
  std::vector<double> x;
  std::vector<double> y;
  std::vector<std::string> tips;  // per point (may be empty): the mark's tooltip
  std::vector<size_t> breaks;
  bool line = true;
  bool dashed = false;
  bool square_marks = false;  // squares instead of circles (e.g. validation loss)
};

// A vertical line at x with a label (e.g. "resumed from DIR").
struct Marker {
  double x = 0.0;
  std::string label;
};

struct LineChart {
  std::string id;  // data-chart attribute, unique in the page
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
  std::vector<Marker> markers;
  bool y_from_zero = false;  // include 0 on the y axis
};

std::string RenderLineChart(const LineChart& chart);

// Horizontal bars, one mark per bar, the value printed at its end.
struct Bar {
  std::string label;
  double value = 0.0;
  std::string colour;
  std::string tip;
  std::string value_text;  // printed beside the bar; empty: the value with 4 significant digits
};

struct BarChart {
  std::string id;
  std::string title;
  std::string value_label;
  std::vector<Bar> bars;
};

std::string RenderBarChart(const BarChart& chart);

// Vertical columns in labelled groups (e.g. per-device utilisation grouped by node type): columns
// shrink to fit the width, down to one pixel, so thousands stay on one chart.
struct Column {
  double value = 0.0;
  std::string colour;
  std::string tip;
};

struct ColumnGroup {
  std::string label;
  std::vector<Column> columns;
};

struct ColumnChart {
  std::string id;
  std::string title;
  std::string y_label;
  double y_max = 0.0;  // 0: the largest value
  std::vector<ColumnGroup> groups;
};

std::string RenderColumnChart(const ColumnChart& chart);

// Axis ticks: about `target` round values (1, 2, 5 x 10^k) covering [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int target);
// A compact tick label: "0", "0.25", "12", "1.5k", "2.3M", "1e-05".
std::string TickLabel(double v);

}  // namespace motley::report
