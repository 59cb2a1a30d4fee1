// Scenario files: events by device id or name, link pair or class; lookups by step; errors that
// name the file, the event index and the field.
#include "straggler/scenario.h"

#include <gtest/gtest.h>

#include "motley_source_dir.h"
#include "spec/run_file.h"
#include "straggler/test_util.h"

namespace motley::straggler {
namespace {

class ScenarioTest : public ::testing::Test {
 protected:
  void SetUp() override { world_ = testing::LoadWorld(); }
  const spec::ClusterSpec& cluster() const { return world_->run.cluster; }
  std::string ErrorOf(const std::string& yaml) const {
    auto s = ParseScenario(yaml, "s.yaml", cluster());
    return s.ok() ? std::string("(parsed)") : s.status().message();
  }
  std::unique_ptr<testing::World> world_;
};

TEST_F(ScenarioTest, ParsesEveryEventKindAndLooksUpRatesByStep) {
  auto s = ParseScenario(R"(
- {step: 10, device: 3, slowdown: 2}
- {step: 20, device: "node-b:1", slowdown: 4}
- {step: 30, device: 3, slowdown: 1}
- {step: 15, link: [6, 2], slowdown: 5}
- {step: 40, link_class: shm, slowdown: 2}
)",
                         "s.yaml", cluster());
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->events.size(), 5u);
  EXPECT_TRUE(s->warnings.empty());
  EXPECT_EQ(s->events[1].device, 5);  // node-b is devices 4..7
  EXPECT_EQ(s->events[3].link_a, 2);
  EXPECT_EQ(s->events[3].link_b, 6);
  EXPECT_DOUBLE_EQ(s->DeviceSpeedAt(3, 9), 1.0);
  EXPECT_DOUBLE_EQ(s->DeviceSpeedAt(3, 10), 0.5);
  EXPECT_DOUBLE_EQ(s->DeviceSpeedAt(3, 29), 0.5);
  EXPECT_DOUBLE_EQ(s->DeviceSpeedAt(3, 30), 1.0);
  EXPECT_DOUBLE_EQ(s->DeviceSpeedAt(5, 100), 0.25);
  EXPECT_DOUBLE_EQ(s->DeviceSpeedAt(0, 100), 1.0);
  EXPECT_DOUBLE_EQ(s->LinkSpeedAt(cluster(), 6, 2, 14), 1.0);
  EXPECT_DOUBLE_EQ(s->LinkSpeedAt(cluster(), 2, 6, 15), 0.2);
  EXPECT_DOUBLE_EQ(s->LinkSpeedAt(cluster(), 0, 1, 39), 1.0);
  EXPECT_DOUBLE_EQ(s->LinkSpeedAt(cluster(), 0, 1, 40), 0.5);  // shm: same node
  EXPECT_DOUBLE_EQ(s->LinkSpeedAt(cluster(), 0, 4, 40), 1.0);  // net: across nodes
  EXPECT_DOUBLE_EQ(s->LinkSpeedAt(cluster(), 2, 6, 40), 0.2);  // net pair, not shm
  EXPECT_TRUE(s->has_link_events());
  const RateSteps d3 = s->DeviceSchedule(3);
  ASSERT_EQ(d3.size(), 2u);
  EXPECT_EQ(d3[0].first, 10);
  EXPECT_EQ(d3[1].first, 30);
  EXPECT_EQ(DeviceName(cluster(), 5), "node-b:1");
}

TEST_F(ScenarioTest, AcceptsAMapWithEventsAndTheTestdataFile) {
  auto s =
      ParseScenario("events:\n  - {step: 2, device: 0, slowdown: 1.25}\n", "m.yaml", cluster());
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->events.size(), 1u);
  EXPECT_DOUBLE_EQ(s->DeviceSpeedAt(0, 2), 0.8);
  EXPECT_FALSE(s->has_link_events());
  auto f = LoadScenario(testing::TestData("slow-device.yaml"), cluster());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_NEAR(f->DeviceSpeedAt(5, 120), 1.0 / 3.0, 1e-9);
  EXPECT_DOUBLE_EQ(f->DeviceSpeedAt(5, 150), 1.0);
}

// The old key `rate` (a fraction of speed) still reads, with a warning naming the new spelling.
TEST_F(ScenarioTest, OldRateKeyReadsWithAWarning) {
  auto s = ParseScenario("- {step: 2, device: 0, rate: 0.25}\n", "old.yaml", cluster());
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_DOUBLE_EQ(s->DeviceSpeedAt(0, 2), 0.25);
  ASSERT_EQ(s->warnings.size(), 1u);
  EXPECT_EQ(s->warnings[0],
            "old.yaml: events[0].rate: 'rate: 0.25' (a fraction of speed) is deprecated; write "
            "'slowdown: 4' (a factor >= 1: 3 is three times slower)");
}

// The shipped example scenario loads against the shipped cluster it is written for.
TEST_F(ScenarioTest, ShippedExampleScenarioLoads) {
  const std::string examples = std::string(MOTLEY_SOURCE_DIR) + "/examples/";
  auto run = spec::LoadRunFile(examples + "runs/emulated-8.yaml");
  ASSERT_TRUE(run.ok()) << run.status().message();
  auto s = LoadScenario(examples + "scenarios/slow-device.yaml", run->cluster);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_DOUBLE_EQ(s->DeviceSpeedAt(5, 19), 1.0);
  EXPECT_NEAR(s->DeviceSpeedAt(5, 20), 1.0 / 3.0, 1e-9);
  EXPECT_DOUBLE_EQ(s->DeviceSpeedAt(5, 60), 1.0);
}

TEST_F(ScenarioTest, ErrorsNameTheFileTheEventAndTheField) {
  EXPECT_EQ(ErrorOf("- {step: 1, device: 0, rate: -1}"),
            "s.yaml: events[0].rate: must be in [0.001, 1] (at most 1000x slower than nominal; 1 "
            "is healthy), got -1");
  EXPECT_EQ(ErrorOf("- {step: 1, device: 0, slowdown: 1}\n- {step: 0, device: 0, slowdown: 1}"),
            "s.yaml: events[1].step: must be >= 1, got 0");
  // Ranges (spec/limits.h): at most 1000x slower, never faster than nominal (issue 17).
  EXPECT_EQ(ErrorOf("- {step: 1, device: 0, rate: 1e-300}"),
            "s.yaml: events[0].rate: must be in [0.001, 1] (at most 1000x slower than nominal; 1 "
            "is healthy), got 1e-300");
  EXPECT_EQ(ErrorOf("- {step: 1, link: [0, 1], rate: 2}"),
            "s.yaml: events[0].rate: must be in [0.001, 1] (at most 1000x slower than nominal; 1 "
            "is healthy), got 2");
  EXPECT_EQ(ErrorOf("- {step: 1099511627777, device: 0, rate: 0.5}"),
            "s.yaml: events[0].step: must be at most 1099511627776, got 1099511627777");
  EXPECT_EQ(ErrorOf("- {step: 1, device: 0, rate: 0.5}\n- {step: 1, device: 0, rate: 0.5}\n"
                    "---\n- {step: 2, device: 0, rate: 1}"),
            "s.yaml:3: a second YAML document ('---') or text after the document; a motley file "
            "holds one document");
  EXPECT_EQ(ErrorOf("- {step: 1, device: 8, slowdown: 1}"),
            "s.yaml: events[0].device: device 8 does not exist (the cluster has 8)");
  EXPECT_EQ(ErrorOf("- {step: 1, device: node-c:0, slowdown: 1}"),
            "s.yaml: events[0].device: unknown node 'node-c' in device 'node-c:0'");
  EXPECT_EQ(ErrorOf("- {step: 1, device: node-a:4, slowdown: 1}"),
            "s.yaml: events[0].device: node 'node-a' has 4 devices, no local index 4");
  EXPECT_EQ(ErrorOf("- {step: 1, device: node-a, slowdown: 1}"),
            "s.yaml: events[0].device: node 'node-a' has 4 devices: write NODE:LOCAL_INDEX");
  EXPECT_EQ(ErrorOf("- {step: 1, link: [1, 1], slowdown: 1}"),
            "s.yaml: events[0].link: both ends are device 1");
  EXPECT_EQ(ErrorOf("- {step: 1, link: [1], slowdown: 1}"),
            "s.yaml: events[0].link: expected a list of two devices, e.g. [0, 5]");
  EXPECT_EQ(ErrorOf("- {step: 1, link: [1, 99], slowdown: 1}"),
            "s.yaml: events[0].link[1]: device 99 does not exist (the cluster has 8)");
  EXPECT_EQ(ErrorOf("- {step: 1, link_class: ib, slowdown: 1}"),
            "s.yaml: events[0].link_class: unknown link class 'ib' (known: shm, net)");
  EXPECT_EQ(ErrorOf("- {step: 1, device: 0, link: [0, 1], slowdown: 1}"),
            "s.yaml: events[0]: an event names exactly one of 'device', 'link' or 'link_class'");
  EXPECT_NE(ErrorOf("- {step: 1, device: 0, rat: 1}").find("s.yaml: events[0].rat: unknown key"),
            std::string::npos)
      << ErrorOf("- {step: 1, device: 0, rat: 1}");
  EXPECT_EQ(ErrorOf("- {step: 1, device: 0}"),
            "s.yaml: events[0].slowdown: missing required field");
  EXPECT_EQ(ErrorOf("- {step: 1, device: 0, slowdown: 0.5}"),
            "s.yaml: events[0].slowdown: must be a factor in [1, 1000] (1 = healthy, 3 = three "
            "times slower), got 0.5");
  EXPECT_EQ(ErrorOf("- {step: 1, device: 0, slowdown: 1e300}"),
            "s.yaml: events[0].slowdown: must be a factor in [1, 1000] (1 = healthy, 3 = three "
            "times slower), got 1e+300");
  EXPECT_EQ(ErrorOf("- {step: 1, device: 0, slowdown: 2, rate: 0.5}"),
            "s.yaml: events[0]: give 'slowdown' or the old 'rate', not both");
  EXPECT_EQ(ErrorOf("step: 1"), "s.yaml: step: unknown key (known: events)");
  EXPECT_NE(ErrorOf("- [unclosed").find("s.yaml:"), std::string::npos);
  auto missing = LoadScenario("/nonexistent/scenario.yaml", cluster());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/scenario.yaml"), std::string::npos);
}

}  // namespace
}  // namespace motley::straggler
