// Plan: JSON round trip (version 2, per-stage recompute; version 1 still read; version 3 with
// interleaved pipelines), ValidatePlan's rules (one test per rule, exact messages), UniformPlan.
#include "spec/plan.h"

#include <gtest/gtest.h>

#include "spec/plan_test_util.h"

namespace motley::spec {
namespace {

ClusterSpec Cluster() {  // node f: devices 0-1 (fast); node s: devices 2-5 (slow)
  Result<ClusterSpec> c = ParseClusterSpec(R"(
device_types:
  - {name: fast, vendor: cpu, peak_flops: 2 GFLOPS, memory: 1 GiB, memory_bandwidth: 1 GB/s}
  - {name: slow, vendor: cpu, peak_flops: 1 GFLOPS, memory: 1 GiB, memory_bandwidth: 1 GB/s}
link_classes: [{name: shm, latency: 1 us, bandwidth: 1 GB/s}]
nodes:
  - {name: f, device_type: fast, device_count: 2, intra_link: shm}
  - {name: s, device_type: slow, device_count: 4, intra_link: shm}
inter_island_link: shm
)",
                                           "c.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

ModelSpec Model() {  // 4 blocks, 4 heads, 2 kv heads
  ModelSpec m = *ModelPreset("tiny");
  m.num_blocks = 4;
  return m;
}

TrainSpec Train(int64_t global_batch) {
  TrainSpec t;
  t.global_batch = global_batch;
  return t;
}

using test_util::Stage;

// Pipeline 0: devices 0 | 1 (2 stages); pipeline 1: devices {2,3} (TP 2) | 4 | 5 (3 stages).
Plan GoodPlan() {
  Plan p;
  p.source = "plan.json";
  PipelinePlan a;
  a.micro_batches = 4;
  a.micro_batch_size = 2;
  a.stages = {Stage(0, 3, true, false, {0}), Stage(3, 1, false, true, {1})};
  PipelinePlan b;
  b.micro_batches = 4;
  b.micro_batch_size = 1;
  b.stages = {Stage(0, 1, true, false, {2, 3}), Stage(1, 2, false, false, {4}),
              Stage(3, 1, false, true, {5})};
  p.pipelines = {a, b};
  p.SetRecompute(Recompute::kSelective);
  p.pipelines[1].stages[2].recompute = Recompute::kFull;
  p.optimizer_sharding = OptimizerSharding::kZero1;
  p.comment = "test";
  return p;
}

std::string Validate(const Plan& p, int64_t global_batch = 12) {
  return ValidatePlan(p, Cluster(), Model(), Train(global_batch)).message();
}

TEST(PlanTest, GoodPlanValidatesAndRoundTripsThroughJson) {
  const Plan p = GoodPlan();
  EXPECT_EQ(Validate(p), "");
  EXPECT_EQ(p.num_devices(), 6);
  const std::string json = PlanToJson(p);
  EXPECT_NE(json.find("\"format\": \"motley-plan\""), std::string::npos);
  Result<Plan> back = ParsePlan(json, "again.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->source, "again.json");
  EXPECT_NE(json.find("\"version\": 2"), std::string::npos);
  EXPECT_EQ(back->pipelines[0].stages[0].recompute, Recompute::kSelective);
  EXPECT_EQ(back->pipelines[1].stages[1].recompute, Recompute::kSelective);
  EXPECT_EQ(back->pipelines[1].stages[2].recompute, Recompute::kFull);
  EXPECT_EQ(HeaviestRecompute(*back), Recompute::kFull);
  EXPECT_EQ(RecomputeSummary(*back), "per stage");
  EXPECT_EQ(back->optimizer_sharding, OptimizerSharding::kZero1);
  EXPECT_EQ(back->schedule, PipelineSchedule::k1F1B);
  EXPECT_EQ(back->comment, "test");
  ASSERT_EQ(back->pipelines.size(), 2u);
  EXPECT_EQ(back->pipelines[1].stages[0].devices, (std::vector<int>{2, 3}));
  EXPECT_EQ(back->pipelines[1].stages[0].tp_degree, 2);
  EXPECT_EQ(back->pipelines[0].micro_batch_size, 2);
  EXPECT_EQ(PlanToJson(*back), json);
}

// Version 1 files (plan-level recompute) are still read: the value applies to every stage; what
// they are written back as is version 2.
TEST(PlanTest, VersionOneRecomputeAppliesToEveryStage) {
  const std::string v1 = R"({"format": "motley-plan", "version": 1, "recompute": "full",
    "pipelines": [{"micro_batches": 2, "micro_batch_size": 1, "stages": [
      {"first_block": 0, "num_blocks": 2, "has_embedding": true, "devices": [0]},
      {"first_block": 2, "num_blocks": 2, "has_head": true, "devices": [1]}]}]})";
  Result<Plan> p = ParsePlan(v1, "old.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->pipelines[0].stages.size(), 2u);
  for (const StagePlan& s : p->pipelines[0].stages) EXPECT_EQ(s.recompute, Recompute::kFull);
  EXPECT_EQ(RecomputeSummary(*p), "full");
  const std::string v2 = PlanToJson(*p);
  EXPECT_NE(v2.find("\"version\": 2"), std::string::npos);
  Result<Plan> again = ParsePlan(v2, "new.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->pipelines[0].stages[1].recompute, Recompute::kFull);
  // Without `recompute` a version 1 plan recomputes nothing.
  Result<Plan> none = ParsePlan(R"({"format": "motley-plan", "version": 1, "pipelines": [
    {"micro_batches": 1, "micro_batch_size": 1, "stages": [
      {"first_block": 0, "num_blocks": 4, "has_embedding": true, "has_head": true,
       "devices": [0]}]}]})",
                                "none.json");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->pipelines[0].stages[0].recompute, Recompute::kNone);
}

TEST(PlanTest, RecomputeKeysBelongToTheirVersion) {
  const std::string stage =
      R"({"first_block": 0, "num_blocks": 4, "has_embedding": true, "has_head": true,
          "devices": [0], "recompute": "selective"})";
  auto text = [&](int version, const std::string& top, const std::string& st) {
    return "{\"format\": \"motley-plan\", \"version\": " + std::to_string(version) + top +
           ", \"pipelines\": [{\"micro_batches\": 1, \"micro_batch_size\": 1, \"stages\": [" + st +
           "]}]}";
  };
  Result<Plan> ok = ParsePlan(text(2, "", stage), "p.json");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->pipelines[0].stages[0].recompute, Recompute::kSelective);
  EXPECT_EQ(ParsePlan(text(2, ", \"recompute\": \"full\"", stage), "p.json").status().message(),
            "p.json: recompute: versions 2 and 3 set recompute per stage "
            "(pipelines[].stages[].recompute); a plan-level value is version 1 only");
  EXPECT_EQ(ParsePlan(text(1, "", stage), "p.json")
                .status()
                .message()
                .rfind("p.json: pipelines[0].stages[0].recompute: unknown key", 0),
            0u);
  std::string bad = stage;
  bad.replace(bad.find("selective"), 9, "partial");
  EXPECT_EQ(ParsePlan(text(2, "", bad), "p.json").status().message(),
            "p.json: pipelines[0].stages[0].recompute: unknown value 'partial' (known: none, "
            "selective, full)");
  EXPECT_EQ(ParsePlan(text(4, "", stage), "p.json").status().message(),
            "p.json: version: unsupported version 4 (this build reads 1 to 3)");
}

// The runtime's capability is part of the one rule: a run is all emulated or all real devices.
TEST(PlanTest, PlanMixingEmulatedAndRealDevicesIsRefused) {
  ClusterSpec c = Cluster();
  c.device_types[1].emulated = EmulatedProfile{1e9, 1e9};
  ASSERT_TRUE(c.Finalize("c.yaml").ok());
  const Plan p = GoodPlan();  // pipeline 0 on 'fast' (real), pipeline 1 on 'slow' (emulated)
  EXPECT_EQ(ValidatePlan(p, c, Model(), Train(12)).message(),
            "plan.json: pipelines[1].stages[0].devices: device 2 (type 'slow') is emulated but "
            "device 0 (type 'fast', pipelines[0].stages[0]) is not emulated; a run is either all "
            "emulated or all real devices");
  Plan slow_only = p;
  slow_only.pipelines = {p.pipelines[1]};
  slow_only.pipelines[0].micro_batches = 12;
  EXPECT_EQ(ValidatePlan(slow_only, c, Model(), Train(12)).message(), "");
}

TEST(PlanTest, DeviceUsedTwiceNamesBothPlaces) {
  Plan p = GoodPlan();
  p.pipelines[1].stages[2].devices = {1};
  EXPECT_EQ(Validate(p),
            "plan.json: pipelines[1].stages[2].devices: device 1 is already used by "
            "pipelines[0].stages[1]");
}

TEST(PlanTest, DeviceMustExist) {
  Plan p = GoodPlan();
  p.pipelines[0].stages[1].devices = {6};
  EXPECT_EQ(Validate(p), "plan.json: pipelines[0].stages[1].devices: device 6 does not exist "
                         "(the cluster has devices 0..5)");
}

TEST(PlanTest, BlocksCoveredOnceInOrder) {
  Plan p = GoodPlan();
  p.pipelines[1].stages[1].first_block = 2;  // gap
  EXPECT_EQ(Validate(p), "plan.json: pipelines[1].stages[1].first_block: expected 1 (where the "
                         "previous stage ends), got 2");
  p = GoodPlan();
  p.pipelines[0].stages[1].num_blocks = 0;  // blocks end at 3 of 4
  EXPECT_EQ(Validate(p), "plan.json: pipelines[0].stages: blocks end at 3, the model has 4 blocks");
  p = GoodPlan();
  p.pipelines[0].stages[1].num_blocks = 2;
  EXPECT_EQ(Validate(p), "plan.json: pipelines[0].stages[1].num_blocks: blocks [3, 5) exceed the "
                         "model's 4 blocks");
}

TEST(PlanTest, EmbeddingFirstHeadLast) {
  Plan p = GoodPlan();
  p.pipelines[0].stages[0].has_embedding = false;
  EXPECT_EQ(Validate(p), "plan.json: pipelines[0].stages[0].has_embedding: the first stage must "
                         "hold the embedding");
  p = GoodPlan();
  p.pipelines[1].stages[1].has_head = true;
  EXPECT_EQ(Validate(p), "plan.json: pipelines[1].stages[1].has_head: only the last stage holds "
                         "the head");
}

TEST(PlanTest, TensorParallelRules) {
  Plan p = GoodPlan();
  p.pipelines[1].stages[0].tp_degree = 1;
  EXPECT_EQ(Validate(p), "plan.json: pipelines[1].stages[0].tp_degree: 1 differs from the number "
                         "of devices 2");
  p = GoodPlan();  // TP 3 does not divide 4 heads
  p.pipelines[1].stages = {Stage(0, 3, true, false, {2, 3, 4}), Stage(3, 1, false, true, {5})};
  EXPECT_EQ(Validate(p), "plan.json: pipelines[1].stages[0].tp_degree: 3 does not divide model "
                         "num_heads 4");
  p = GoodPlan();  // TP 4 does not divide 2 kv heads
  p.pipelines = {GoodPlan().pipelines[0]};
  p.pipelines[0].micro_batches = 6;
  p.pipelines[0].stages[1].devices = {2, 3, 4, 5};
  p.pipelines[0].stages[1].tp_degree = 4;
  EXPECT_EQ(Validate(p), "plan.json: pipelines[0].stages[1].tp_degree: 4 does not divide model "
                         "num_kv_heads 2");
  p = GoodPlan();  // across nodes
  p.pipelines[0].stages[1].devices = {1, 2};
  p.pipelines[0].stages[1].tp_degree = 2;
  p.pipelines[1].stages[0].devices = {3};
  p.pipelines[1].stages[0].tp_degree = 1;
  EXPECT_EQ(Validate(p), "plan.json: pipelines[0].stages[1].devices: device 2 is on node 's' but "
                         "device 1 is on node 'f' (a TP group must stay inside one node)");
}

// A node holds one device type, so "one node" implies "one type"; an empty group is its own error.
TEST(PlanTest, StageNeedsDevices) {
  Plan p = GoodPlan();
  p.pipelines[0].stages[0].devices = {};
  p.pipelines[0].stages[0].tp_degree = 0;
  EXPECT_EQ(Validate(p), "plan.json: pipelines[0].stages[0].devices: a stage needs at least one "
                         "device");
}

TEST(PlanTest, MicroBatchesAndGlobalBatch) {
  Plan p = GoodPlan();
  p.pipelines[1].micro_batches = 2;
  EXPECT_EQ(Validate(p, 10), "plan.json: pipelines[1].micro_batches: 2 is fewer than the 3 stages");
  p = GoodPlan();
  EXPECT_EQ(Validate(p, 16), "plan.json: pipelines: micro_batches * micro_batch_size sum to 12 "
                             "over all pipelines, but train.global_batch is 16");
  p.pipelines.clear();
  EXPECT_EQ(Validate(p), "plan.json: pipelines: at least one pipeline needed");
}

// Pipeline 0 of GoodPlan interleaved: device groups 0 | 1, two chunks each (virtual stages
// 0 1 | 2 3 hold blocks 0 | 1 | 2 | 3), 4 micro-batches; pipeline 1 as in GoodPlan.
Plan InterleavedPlan() {
  Plan p = GoodPlan();
  PipelinePlan& a = p.pipelines[0];
  a.chunks = 2;
  a.stages = {Stage(0, 1, true, false, {0}), Stage(1, 1, false, false, {1}),
              Stage(2, 1, false, false, {0}), Stage(3, 1, false, true, {1})};
  return p;
}

TEST(PlanTest, InterleavedPipelineRoundTripsAsVersionThree) {
  const Plan p = InterleavedPlan();
  EXPECT_EQ(p.pipelines[0].num_stages(), 2);
  EXPECT_EQ(p.pipelines[0].num_virtual_stages(), 4);
  EXPECT_EQ(p.num_devices(), 6);  // each device group once
  const std::string json = PlanToJson(p);
  EXPECT_NE(json.find("\"version\": 3"), std::string::npos);
  EXPECT_NE(json.find("\"chunks\": 2"), std::string::npos);
  Result<Plan> back = ParsePlan(json, "i.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->pipelines[0].chunks, 2);
  EXPECT_EQ(back->pipelines[1].chunks, 1);
  EXPECT_EQ(PlanToJson(*back), json);
  // A plan without interleaving is still written as version 2, which older readers read.
  EXPECT_NE(PlanToJson(GoodPlan()).find("\"version\": 2"), std::string::npos);
  EXPECT_EQ(PlanToJson(GoodPlan()).find("chunks"), std::string::npos);
  // `chunks` is a version 3 key, and a positive count.
  std::string v2 = json;
  v2.replace(v2.find("\"version\": 3"), 12, "\"version\": 2");
  EXPECT_EQ(ParsePlan(v2, "i.json")
                .status()
                .message()
                .rfind("i.json: pipelines[0].chunks: unknown key", 0),
            0u);
  std::string zero = json;
  zero.replace(zero.find("\"chunks\": 2"), 11, "\"chunks\": 0");
  EXPECT_EQ(ParsePlan(zero, "i.json").status().message(),
            "i.json: pipelines[0].chunks: must be a positive count, got 0");
}

// A well-formed interleaved plan passes every rule (every command runs it); each structural rule
// names its field.
TEST(PlanTest, InterleavingRules) {
  EXPECT_EQ(Validate(InterleavedPlan()), "");
  Plan gpipe = InterleavedPlan();
  gpipe.schedule = PipelineSchedule::kGPipe;
  EXPECT_EQ(Validate(gpipe),
            "plan.json: pipelines[0].chunks: 2 model chunks per device group need schedule 1f1b "
            "(interleaved 1F1B), the plan's is gpipe");
  Plan uneven = InterleavedPlan();
  uneven.pipelines[0].chunks = 3;
  EXPECT_EQ(Validate(uneven),
            "plan.json: pipelines[0].stages: 4 virtual stages are not a whole number of device "
            "groups of 3 chunks each");
  Plan one_group = InterleavedPlan();
  one_group.pipelines[0].chunks = 4;
  EXPECT_EQ(Validate(one_group),
            "plan.json: pipelines[0].chunks: interleaving needs at least 2 device groups, got 1 "
            "(4 virtual stages / 4 chunks)");
  Plan wrong_group = InterleavedPlan();
  wrong_group.pipelines[0].stages[3].devices = {4};
  EXPECT_EQ(Validate(wrong_group),
            "plan.json: pipelines[0].stages[3].devices: virtual stage 3 runs on device group 1 "
            "(chunks 2), whose devices are [1] at tp_degree 1; got [4] at tp_degree 1");
  // Micro-batches: a multiple of the 2 device groups, or fewer than 4 (5 is neither); the
  // batch is kept whole by moving samples to pipeline 1.
  Plan odd = InterleavedPlan();
  odd.pipelines[0].micro_batches = 5;
  odd.pipelines[0].micro_batch_size = 1;
  odd.pipelines[1].micro_batches = 7;
  EXPECT_EQ(Validate(odd),
            "plan.json: pipelines[0].micro_batches: interleaved 1F1B over 2 device groups runs "
            "a multiple of 2 micro-batches, or fewer than 4; got 5");
  // The micro-batch floor counts device groups, not virtual stages: 3 micro-batches over 2
  // groups pass.
  Plan three = odd;
  three.pipelines[0].micro_batches = 3;
  three.pipelines[1].micro_batches = 9;
  EXPECT_EQ(Validate(three), "");
}

TEST(PlanTest, UniformPlanIsMegatronOrdered) {
  ClusterSpec c = Cluster();
  c.device_types[0] = c.device_types[1];  // homogeneous types are not required, but keep simple
  c.device_types[0].name = "fast";
  ASSERT_TRUE(c.Finalize().ok());
  UniformPlanOptions o;
  o.dp = 2;
  o.pp = 3;
  o.tp = 1;
  o.micro_batch_size = 2;
  Result<Plan> p = UniformPlan(c, Model(), Train(12), o);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->pipelines.size(), 2u);
  const PipelinePlan& second = p->pipelines[1];
  EXPECT_EQ(second.micro_batches, 3);
  ASSERT_EQ(second.stages.size(), 3u);
  EXPECT_EQ(second.stages[0].devices, std::vector<int>{1});  // tp, then dp, then pp
  EXPECT_EQ(second.stages[1].devices, std::vector<int>{3});
  EXPECT_EQ(second.stages[2].devices, std::vector<int>{5});
  EXPECT_EQ(second.stages[0].num_blocks, 2);  // 4 blocks over 3 stages: 2, 1, 1
  EXPECT_EQ(second.stages[2].first_block, 3);

  o = {};
  o.tp = 4;  // devices 0..3 cross nodes f and s
  Result<Plan> bad = UniformPlan(c, Model(), Train(4), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("crosses nodes"), std::string::npos);
  o = {};
  o.dp = 5;
  EXPECT_NE(UniformPlan(c, Model(), Train(12), o).status().message().find("not divisible"),
            std::string::npos);
  o.dp = 7;
  EXPECT_NE(UniformPlan(c, Model(), Train(14), o).status().message().find("exceeds"),
            std::string::npos);
}

TEST(PlanTest, EvenSplitGivesRemainderToEarlyStages) {
  EXPECT_EQ(EvenSplit(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(EvenSplit(80, 8), std::vector<int64_t>(8, 10));
  EXPECT_EQ(EvenSplit(2, 3), (std::vector<int64_t>{1, 1, 0}));
}

}  // namespace
}  // namespace motley::spec
