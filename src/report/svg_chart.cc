// See svg_chart.h.
#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "report/html.h"

namespace motley::report {
namespace {

// Plot geometry of a line chart (pixels).
constexpr double kWidth = 760;
constexpr double kHeight = 300;
constexpr double kLeft = 64;
constexpr double kRight = 16;
constexpr double kTop = 16;
constexpr double kBottom = 44;

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void Add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
  // A non-degenerate range: an empty one becomes [0, 1], a single value v becomes v +- 1 (or
  // +- 10% of |v|).
  void Widen() {
    if (empty()) {
      lo = 0;
      hi = 1;
    } else if (lo == hi) {
      const double d = lo == 0 ? 1.0 : 0.1 * std::fabs(lo);
      lo -= d;
      hi += d;
    }
  }
};

std::string Figure(const std::string& title, const std::string& svg, const std::string& legend) {
  return fmt::format("<figure><figcaption>{}</figcaption>{}{}</figure>\n", Escape(title), legend,
                     svg);
}

std::string Legend(const std::vector<Series>& series) {
  std::string h = "<div class=\"legend\">";
  for (const Series& s : series) {
    h += fmt::format(
        "<span><svg width=\"22\" height=\"10\"><line x1=\"0\" y1=\"5\" x2=\"22\" y2=\"5\" "
        "stroke=\"{}\" stroke-width=\"2\"{}/></svg> {}</span>",
        s.colour, s.dashed ? " stroke-dasharray=\"4 3\"" : "", Escape(s.label));
  }
  return h + "</div>";
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi) || target < 1) return {lo};
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  // The round step whose tick count comes closest to `target`.
  double step = mag;
  double best = std::numeric_limits<double>::infinity();
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    const double miss = std::fabs((hi - lo) / (m * mag) - target);
    if (miss < best) {
      best = miss;
      step = m * mag;
    }
  }
  std::vector<double> ticks;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * step; k += 1) {
    ticks.push_back(k == 0 ? 0.0 : k * step);
  }
  return ticks;
}

std::string TickLabel(double v) {
  const double a = std::fabs(v);
  if (a == 0) return "0";
  if (a >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:g}k", v / 1e3);
  if (a < 1e-3) return fmt::format("{:.0e}", v);
  return fmt::format("{:g}", v);
}

std::string RenderLineChart(const LineChart& chart) {
  Range xr, yr;
  for (const Series& s : chart.series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) continue;
      xr.Add(s.x[i]);
      yr.Add(s.y[i]);
    }
  }
  for (const Marker& m : chart.markers) xr.Add(m.x);
  if (chart.y_from_zero) yr.Add(0.0);
  xr.Widen();
  yr.Widen();
  const double pw = kWidth - kLeft - kRight;
  const double ph = kHeight - kTop - kBottom;
  const std::vector<double> yticks = NiceTicks(yr.lo, yr.hi, 5);
  const std::vector<double> xticks = NiceTicks(xr.lo, xr.hi, 8);
  // Extend the y range to the outer ticks' neighbours so that the data never touches the frame.
  const double ylo = std::min(yr.lo, yticks.front());
  const double yhi = std::max(yr.hi, yticks.back());
  auto px = [&](double x) { return kLeft + (x - xr.lo) / (xr.hi - xr.lo) * pw; };
  auto py = [&](double y) { return kTop + (1.0 - (y - ylo) / (yhi - ylo)) * ph; };
  int marks = 0;
  std::string body;
  // Grid and axes.
  for (double t : yticks) {
    body += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>",
        kLeft, py(t), kLeft + pw, py(t), kLeft - 4, py(t) + 4, Escape(TickLabel(t)));
  }
  for (double t : xticks) {
    body += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#888\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>",
        px(t), kTop + ph, px(t), kTop + ph + 4, px(t), kTop + ph + 16, Escape(TickLabel(t)));
  }
  body += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
      "stroke=\"#888\"/>",
      kLeft, kTop, pw, ph);
  body += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>",
                      kLeft + pw / 2, kHeight - 6, Escape(chart.x_label));
  body += fmt::format(
      "<text transform=\"translate(14 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
      kTop + ph / 2, Escape(chart.y_label));
  for (const Marker& m : chart.markers) {
    body += fmt::format(
        "<g class=\"marker\"><line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" "
        "stroke=\"#666\" stroke-dasharray=\"2 3\"/><text x=\"{3:.1f}\" y=\"{4:.1f}\">{5}</text>"
        "</g>",
        px(m.x), kTop, kTop + ph, px(m.x) + 3, kTop + 11, Escape(m.label));
  }
  for (const Series& s : chart.series) {
    const size_t n = std::min(s.x.size(), s.y.size());
    body += fmt::format("<g class=\"series\" data-series=\"{}\">", Escape(s.label));
    if (s.line) {
      std::string points;
      auto flush = [&] {
        if (points.empty()) return;
        body += fmt::format(
            "<polyline class=\"line\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{} "
            "points=\"{}\"/>",
            s.colour, s.dashed ? " stroke-dasharray=\"4 3\"" : "", points);
        points.clear();
      };
      for (size_t i = 0; i < n; ++i) {
        if (std::find(s.breaks.begin(), s.breaks.end(), i) != s.breaks.end()) flush();
        if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
        points += fmt::format("{}{:.1f},{:.1f}", points.empty() ? "" : " ", px(s.x[i]), py(s.y[i]));
      }
      flush();
    }
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      const std::string tip =
          i < s.tips.size() ? s.tips[i] : fmt::format("{}: {:g}, {:g}", s.label, s.x[i], s.y[i]);
      if (s.square_marks) {
        body += fmt::format(
            "<rect class=\"mark\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"6\" height=\"6\" "
            "fill=\"{}\"><title>{}</title></rect>",
            px(s.x[i]) - 3, py(s.y[i]) - 3, s.colour, Escape(tip));
      } else {
        body += fmt::format(
            "<circle class=\"mark\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.2\" fill=\"{}\">"
            "<title>{}</title></circle>",
            px(s.x[i]), py(s.y[i]), s.colour, Escape(tip));
      }
      ++marks;
    }
    body += "</g>";
  }
  const std::string svg = fmt::format(
      "<svg class=\"chart\" data-chart=\"{}\" data-marks=\"{}\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">{}</svg>",
      Escape(chart.id), marks, kWidth, kHeight, kWidth, kHeight, Escape(chart.title), body);
  return Figure(chart.title, svg, Legend(chart.series));
}

std::string RenderBarChart(const BarChart& chart) {
  constexpr double kLabel = 300, kBarArea = 360, kRow = 22, kPad = 6;
  double vmax = 0;
  for (const Bar& b : chart.bars) vmax = std::max(vmax, std::isfinite(b.value) ? b.value : 0.0);
  if (vmax <= 0) vmax = 1;
  const double width = kLabel + kBarArea + 220;
  const double height = kPad * 2 + kRow * static_cast<double>(chart.bars.size()) + 18;
  std::string body;
  int marks = 0;
  for (size_t i = 0; i < chart.bars.size(); ++i) {
    const Bar& b = chart.bars[i];
    const double y = kPad + kRow * static_cast<double>(i);
    const double w = std::max(1.0, kBarArea * std::max(0.0, b.value) / vmax);
    const std::string value = b.value_text.empty() ? fmt::format("{:.4g}", b.value) : b.value_text;
    body += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>"
        "<rect class=\"mark\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
        "fill=\"{}\"><title>{}</title></rect>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>",
        kLabel - 6, y + 15, Escape(b.label), kLabel, y + 3, w, kRow - 6, b.colour,
        Escape(b.tip.empty() ? b.label + ": " + value : b.tip), kLabel + w + 4, y + 15,
        Escape(value));
    ++marks;
  }
  body += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>",
                      kLabel + kBarArea / 2, height - 4, Escape(chart.value_label));
  const std::string svg = fmt::format(
      "<svg class=\"chart\" data-chart=\"{}\" data-marks=\"{}\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">{}</svg>",
      Escape(chart.id), marks, width, height, width, height, Escape(chart.title), body);
  return Figure(chart.title, svg, "");
}

std::string RenderColumnChart(const ColumnChart& chart) {
  constexpr double kPlotWidth = 900, kLeftAxis = 48, kTopPad = 10, kPlotHeight = 160,
                   kGroupGap = 10, kBottomPad = 40;
  size_t n = 0;
  double vmax = chart.y_max;
  for (const ColumnGroup& g : chart.groups) {
    n += g.columns.size();
    if (chart.y_max <= 0) {
      for (const Column& c : g.columns) vmax = std::max(vmax, c.value);
    }
  }
  if (vmax <= 0) vmax = 1;
  const double gaps = kGroupGap * static_cast<double>(chart.groups.size());
  const double col =
      std::clamp((kPlotWidth - gaps) / std::max<double>(1.0, static_cast<double>(n)), 1.0, 14.0);
  // A group is at least as wide as its label (about 6.5 px per character at 11 px).
  auto group_width = [&](const ColumnGroup& g) {
    return std::max(col * static_cast<double>(g.columns.size()),
                    6.5 * static_cast<double>(g.label.size()) + 4);
  };
  double width = kLeftAxis + gaps + 10;
  for (const ColumnGroup& g : chart.groups) width += group_width(g);
  const double height = kTopPad + kPlotHeight + kBottomPad;
  auto py = [&](double v) {
    return kTopPad + (1.0 - std::clamp(v / vmax, 0.0, 1.0)) * kPlotHeight;
  };
  std::string body;
  for (double t : NiceTicks(0, vmax, 4)) {
    body += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>",
        kLeftAxis, py(t), width - 10, py(t), kLeftAxis - 4, py(t) + 4, Escape(TickLabel(t)));
  }
  body += fmt::format(
      "<text transform=\"translate(12 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
      kTopPad + kPlotHeight / 2, Escape(chart.y_label));
  double x = kLeftAxis + kGroupGap / 2;
  int marks = 0;
  for (const ColumnGroup& g : chart.groups) {
    const double group_start = x;
    const double group_end = x + group_width(g);
    x += (group_width(g) - col * static_cast<double>(g.columns.size())) / 2;
    for (const Column& c : g.columns) {
      const double top = py(c.value);
      body += fmt::format(
          "<rect class=\"mark\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" "
          "fill=\"{}\"><title>{}</title></rect>",
          x, top, col > 3 ? col - 1 : col, kTopPad + kPlotHeight - top + 0.01, c.colour,
          Escape(c.tip));
      x += col;
      ++marks;
    }
    body += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#888\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"middle\">{5}</text>",
        group_start, kTopPad + kPlotHeight + 2, group_end, (group_start + group_end) / 2,
        kTopPad + kPlotHeight + 16, Escape(g.label));
    x = group_end + kGroupGap;
  }
  const std::string svg = fmt::format(
      "<svg class=\"chart\" data-chart=\"{}\" data-marks=\"{}\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" role=\"img\" aria-label=\"{}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">{}</svg>",
      Escape(chart.id), marks, width, height, width, height, Escape(chart.title), body);
  return Figure(chart.title, svg, "");
}

}  // namespace motley::report
