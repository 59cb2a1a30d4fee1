// The straggler record of the metrics JSONL and the progress texts.
#include "straggler/report.h"

#include <gtest/gtest.h>

#include "straggler/test_util.h"

namespace motley::straggler {
namespace {

TEST(ReportTest, RecordCarriesRatesChangesAndTheDecision) {
  auto w = testing::LoadWorld();
  RateMonitor m(w->run.cluster);
  std::vector<DeviceSample> ds;
  for (int d = 0; d < 8; ++d) ds.push_back(DeviceSample{d, d == 5 ? 0.6 : 0.2, 0.2, false});
  const spec::LinkClass& net = w->run.cluster.LinkBetween(2, 4);
  const LinkSample slow{2, 4, 1e6, 1, 2.0 * net.TransferTime(1e6)};
  std::vector<RateChangeRecord> changes;
  for (int64_t step = 2; step <= 6; step += 2) changes = m.Report(step, ds, {slow});
  ASSERT_EQ(changes.size(), 2u);
  ReplanDecision d;
  d.started_step = 6;
  d.decided_step = 7;
  d.adopted = true;
  d.candidate = "without device 5";
  d.current_iteration_s = 3.9;
  d.new_iteration_s = 2.0;
  d.gain_s = 380.0;
  d.migration_s = 0.003;
  d.moved_bytes = 1.5e6;
  d.devices_out = {5};
  const nlohmann::ordered_json j = StragglerRecord(m, changes, false, d);
  EXPECT_DOUBLE_EQ(j["device_rates"][5].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(j["device_rates"][0].get<double>(), 1.0);
  EXPECT_EQ(j["smoothed_rates"].size(), 8u);
  ASSERT_EQ(j["slow_links"].size(), 1u);
  EXPECT_EQ(j["slow_links"][0]["a"].get<int>(), 2);
  EXPECT_NEAR(j["slow_links"][0]["rate"].get<double>(), 2.0, 1e-9);
  ASSERT_EQ(j["changes"].size(), 2u);
  EXPECT_EQ(j["changes"][0]["device"].get<int>(), 5);
  EXPECT_EQ(j["changes"][1]["link"][1].get<int>(), 4);
  EXPECT_TRUE(j["decision"]["adopted"].get<bool>());
  EXPECT_EQ(j["decision"]["devices_out"][0].get<int>(), 5);
  EXPECT_FALSE(StragglerRecord(m, {}, true, std::nullopt).contains("decision"));
  EXPECT_EQ(ChangesText(changes),
            "straggler: device 5 slowdown 1.00 -> 3.00; link 2-4 slowdown 1.00 -> 2.00");
  EXPECT_EQ(ChangesText({}), "");
  const std::string text = DecisionText(d, 200);
  EXPECT_NE(text.find("adopted 'without device 5'"), std::string::npos) << text;
  EXPECT_NE(text.find("3.9 -> 2 s/step"), std::string::npos) << text;
  EXPECT_NE(text.find("out of the plan: 5"), std::string::npos) << text;
  d.adopted = false;
  EXPECT_NE(DecisionText(d, 200).find("kept the running plan"), std::string::npos);
}

}  // namespace
}  // namespace motley::straggler
