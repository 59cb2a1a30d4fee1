// Tests of the SVG charts: round ticks, one mark per finite point or bar or column, escaping of
// labels, and breaks in polylines.
#include "report/svg_chart.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace motley::report {
namespace {

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(SvgChartTest, NiceTicksAreRoundAndCoverTheRange) {
  EXPECT_EQ(NiceTicks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  const std::vector<double> fractions = NiceTicks(0.3, 0.92, 3);
  ASSERT_EQ(fractions.size(), 3U);
  EXPECT_NEAR(fractions[0], 0.4, 1e-12);
  EXPECT_NEAR(fractions[2], 0.8, 1e-12);
  const std::vector<double> t = NiceTicks(1, 1000, 4);
  ASSERT_FALSE(t.empty());
  EXPECT_GE(t.front(), 1);
  EXPECT_LE(t.back(), 1000);
  EXPECT_EQ(NiceTicks(5, 5, 4), (std::vector<double>{5}));  // degenerate: one tick
  EXPECT_EQ(TickLabel(0), "0");
  EXPECT_EQ(TickLabel(25000), "25k");
  EXPECT_EQ(TickLabel(2500000), "2.5M");
  EXPECT_EQ(TickLabel(0.25), "0.25");
}

TEST(SvgChartTest, LineChartDrawsOneMarkPerFinitePoint) {
  LineChart c;
  c.id = "loss-step";
  c.title = "Loss <train>";
  Series a;
  a.label = "a & b";
  a.colour = "#000";
  a.x = {1, 2, 3, 4};
  a.y = {4, 3, std::numeric_limits<double>::quiet_NaN(), 1};
  a.breaks = {3};
  Series b = a;
  b.label = "val";
  b.square_marks = true;
  b.y = {1, 1, 1, 1};
  c.series = {a, b};
  c.markers = {{2.5, "resumed"}};
  const std::string svg = RenderLineChart(c);
  EXPECT_EQ(Count(svg, "<circle class=\"mark\""), 3);  // the NaN point draws nothing
  EXPECT_EQ(Count(svg, "<rect class=\"mark\""), 4);
  EXPECT_NE(svg.find("data-chart=\"loss-step\" data-marks=\"7\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("a &amp; b"), std::string::npos);
  EXPECT_NE(svg.find("Loss &lt;train&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("<train>"), std::string::npos);
  // Series a restarts at index 3 (two polylines), b at index 3 too.
  EXPECT_EQ(Count(svg, "<polyline"), 4);
  EXPECT_EQ(Count(svg, "class=\"marker\""), 1);
}

TEST(SvgChartTest, BarAndColumnChartsDrawOneMarkPerElement) {
  BarChart bars;
  bars.id = "baselines";
  bars.bars = {{"chosen", 3, "#111", "", ""}, {"uniform", 1, "#222", "", "1.0"}};
  const std::string b = RenderBarChart(bars);
  EXPECT_EQ(Count(b, "class=\"mark\""), 2);
  EXPECT_NE(b.find(">1.0<"), std::string::npos);
  ColumnChart cols;
  cols.id = "utilisation";
  cols.y_max = 100;
  for (int g = 0; g < 3; ++g) {
    ColumnGroup group;
    group.label = "type" + std::to_string(g);
    for (int i = 0; i < 700; ++i) group.columns.push_back({50.0, "#333", "d"});
    cols.groups.push_back(group);
  }
  const std::string c = RenderColumnChart(cols);
  EXPECT_EQ(Count(c, "class=\"mark\""), 2100);
  EXPECT_NE(c.find(">type2<"), std::string::npos);
}

}  // namespace
}  // namespace motley::report
