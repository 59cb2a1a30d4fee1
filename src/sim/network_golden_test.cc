// Golden numbers of the shared network model (issue 11, milestone 2), for both of its readers:
// the simulator's flow engine replaying transfers in time, and the predictor's closed form of a
// whole step against the simulator's replay of it. Every expected value is computed by hand
// from the link classes and byte counts in the comments.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "perf/compute_model.h"
#include "perf/predictor.h"
#include "perf/settings.h"
#include "sim/flow_engine.h"
#include "sim/simulator.h"
#include "spec/plan_topology.h"

namespace motley::sim {
namespace {

// Nodes of `devices` devices joined by `net` (10 us, 10 GB/s); `nics` is the nodes' nics field.
spec::ClusterSpec Cluster(int nodes, int devices, const std::string& nics) {
  std::string yaml = R"(
device_types:
  - {name: g, vendor: cuda, peak_flops: 100 TFLOPS, memory: 80 GiB, memory_bandwidth: 2 TB/s}
link_classes:
  - {name: fast, latency: 1 us, bandwidth: 1 TB/s}
  - {name: net, latency: 10 us, bandwidth: 10 GB/s}
nodes:
)";
  for (int n = 0; n < nodes; ++n) {
    yaml += "  - {name: n" + std::to_string(n) +
            ", device_type: g, device_count: " + std::to_string(devices) +
            ", intra_link: fast, nics: " + nics + "}\n";
  }
  yaml += "islands:\n  - {name: rack, nodes: [";
  for (int n = 0; n < nodes; ++n) yaml += (n > 0 ? ", n" : "n") + std::to_string(n);
  yaml += "], link: net}\n";
  Result<spec::ClusterSpec> c = spec::ParseClusterSpec(yaml, "golden");
  MOTLEY_CHECK(c.ok(), c.status().message());
  return *c;
}

// Runs the engine to the end; the arrival time of each tag.
std::vector<Seconds> Drain(FlowEngine& engine, size_t tags) {
  std::vector<Seconds> at(tags, -1);
  std::vector<FlowEngine::Arrival> arrivals;
  while (engine.NextTime() < 1e300) {
    arrivals.clear();
    engine.Advance(engine.NextTime(), &arrivals);
    for (const FlowEngine::Arrival& a : arrivals) at[static_cast<size_t>(a.tag)] = a.time_s;
  }
  return at;
}

// Two nodes of two devices, one 10 GB/s card each.
TEST(NetworkGoldenTest, FlowsShareACardMaxMinFair) {
  const spec::ClusterSpec cluster = Cluster(2, 2, "[net]");
  const perf::Network network(cluster, true);
  {
    // Devices 0 -> 2 and 1 -> 3, 1 GB each, cross node n0's egress and n1's ingress together:
    // 5 GB/s each, both arrive at 10 us + 0.2 s.
    FlowEngine engine(network);
    engine.Send(0, network.Path(0, 2), 1e9, -1, 0);
    engine.Send(0, network.Path(1, 3), 1e9, -1, 1);
    const std::vector<Seconds> at = Drain(engine, 2);
    EXPECT_NEAR(at[0], 1e-5 + 0.2, 1e-12);
    EXPECT_NEAR(at[1], 1e-5 + 0.2, 1e-12);
  }
  {
    // 1 GB and 0.5 GB: both at 5 GB/s until the small one is done (0.1 s), then the large one
    // alone at 10 GB/s for its last 0.5 GB (0.05 s).
    FlowEngine engine(network);
    engine.Send(0, network.Path(0, 2), 1e9, -1, 0);
    engine.Send(0, network.Path(1, 3), 0.5e9, -1, 1);
    const std::vector<Seconds> at = Drain(engine, 2);
    EXPECT_NEAR(at[1], 1e-5 + 0.1, 1e-12);
    EXPECT_NEAR(at[0], 1e-5 + 0.15, 1e-12);
  }
  {
    // Opposite directions use different resources (n0 egress + n1 ingress, n1 egress + n0
    // ingress): no sharing. Two transfers on one queue follow each other.
    FlowEngine engine(network);
    engine.Send(0, network.Path(0, 2), 1e9, -1, 0);
    engine.Send(0, network.Path(2, 0), 1e9, -1, 1);
    engine.Send(0, network.Path(1, 3), 1e9, 7, 2);
    engine.Send(0, network.Path(1, 3), 1e9, 7, 3);
    const std::vector<Seconds> at = Drain(engine, 4);
    EXPECT_NEAR(at[1], 1e-5 + 0.1, 1e-12);  // alone on its resources
    EXPECT_NEAR(at[0], 1e-5 + 0.2, 1e-12);  // shares n0's egress with tag 2 all along
    EXPECT_NEAR(at[2], 1e-5 + 0.2, 1e-12);
    EXPECT_NEAR(at[3], 2e-5 + 0.3, 1e-12);  // then alone: 0.1 s after its own latency
  }
  {
    // With sharing off (emulated clusters) every flow runs at its link's speed.
    const perf::Network unshared(cluster, false);
    FlowEngine engine(unshared);
    engine.Send(0, unshared.Path(0, 2), 1e9, -1, 0);
    engine.Send(0, unshared.Path(1, 3), 1e9, -1, 1);
    const std::vector<Seconds> at = Drain(engine, 2);
    EXPECT_NEAR(at[0], 1e-5 + 0.1, 1e-12);
    EXPECT_NEAR(at[1], 1e-5 + 0.1, 1e-12);
  }
}

// An island fabric's aggregate capacity is shared by every transfer between its nodes.
TEST(NetworkGoldenTest, AnIslandFabricCapacityIsSharedByItsNodes) {
  std::string yaml = R"(
device_types:
  - {name: g, vendor: cuda, peak_flops: 100 TFLOPS, memory: 80 GiB, memory_bandwidth: 2 TB/s}
link_classes:
  - {name: net, latency: 10 us, bandwidth: 10 GB/s}
nodes:
  - {name: n, repeat: 4, device_type: g, device_count: 1, nics: [net]}
islands:
  - {name: rack, nodes: [n], link: net, capacity: 10 GB/s}
)";
  Result<spec::ClusterSpec> c = spec::ParseClusterSpec(yaml, "fabric");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const perf::Network network(*c, true);
  // 0 -> 1 and 2 -> 3 share no card but the fabric: 5 GB/s each.
  FlowEngine engine(network);
  engine.Send(0, network.Path(0, 1), 1e9, -1, 0);
  engine.Send(0, network.Path(2, 3), 1e9, -1, 1);
  const std::vector<Seconds> at = Drain(engine, 2);
  EXPECT_NEAR(at[0], 1e-5 + 0.2, 1e-12);
  EXPECT_NEAR(at[1], 1e-5 + 0.2, 1e-12);
}

struct Step {
  Seconds predicted = 0;
  Seconds simulated = 0;
};

// One step of `plan` on `cluster` (tiny model, one sequence of 64 tokens per replica), predicted
// and simulated with NIC sharing on.
Step RunStep(const spec::ClusterSpec& cluster, const spec::Plan& plan) {
  auto model = spec::ModelPreset("tiny");
  MOTLEY_CHECK(model.ok(), "tiny");
  spec::TrainSpec train;
  train.global_batch = 2;
  train.seq_len = 64;
  const perf::PerfSettings settings = perf::DefaultSettings(cluster);
  MOTLEY_CHECK(settings.nic_contention && !settings.ring_collectives, "a real cluster");
  const perf::RooflineComputeModel compute(cluster, *model, settings);
  const perf::Predictor predictor(cluster, *model, train, compute, settings);
  MOTLEY_CHECK(spec::ValidatePlan(plan, cluster, *model, train).ok(), "a valid plan");
  Step step;
  step.predicted = predictor.Predict(plan).iteration_s;
  auto r = Simulator(predictor).Run(plan);
  MOTLEY_CHECK(r.ok(), r.status().message());
  step.simulated = r->iteration_s;
  return step;
}

// Two data-parallel replicas of one TP-2 stage each, on devices `a` and `b`.
spec::Plan TwoReplicas(const std::vector<int>& a, const std::vector<int>& b) {
  spec::Plan plan;
  for (const std::vector<int>& devices : {a, b}) {
    spec::PipelinePlan pipe;
    pipe.micro_batch_size = 1;
    pipe.micro_batches = 1;
    spec::StagePlan st;
    st.devices = devices;
    st.tp_degree = 2;
    st.first_block = 0;
    st.num_blocks = spec::ModelPreset("tiny")->num_blocks;
    st.has_embedding = true;
    st.has_head = true;
    pipe.stages.push_back(st);
    plan.pipelines.push_back(pipe);
  }
  return plan;
}

// Nodes of 4 devices. Each layer's two data-parallel groups (its TP colours) cross the nodes at
// once. With the node's two cards pooled, a replica on devices {0, 1} (contiguous) or {0, 2}
// (strided) puts the same bytes through each node's cards: equal step times. With card 0
// serving devices 0 and 1 and card 1 devices 2 and 3, the contiguous placement sends both
// colours through card 0 and the strided one uses both cards: per layer, each colour's 2-member
// ring moves the layer's S bytes per hop, alone at 10 GB/s (2 x 10 us + S / 10 GB/s) or shared
// at 5 GB/s (2 x 10 us + S / 5 GB/s), so the contiguous step is slower by exactly
// sum over layers of S / 10 GB/s, S = one TP rank's parameters of the layer x 2 bytes (bf16),
// plus the same for the world's loss-norm all-reduce (2 doubles: its hierarchy runs two rings
// across the nodes at once, from devices 0 and 1 or 0 and 2, each moving 2 x 16 / 4 = 8 bytes).
TEST(NetworkGoldenTest, PlacementsWithEqualBytesPerCardTakeEqualTimes) {
  const spec::Plan contiguous = TwoReplicas({0, 1}, {4, 5});
  const spec::Plan strided = TwoReplicas({0, 2}, {4, 6});
  const spec::ClusterSpec pooled = Cluster(2, 4, "[net, net]");
  const Step c = RunStep(pooled, contiguous);
  const Step s = RunStep(pooled, strided);
  EXPECT_NEAR(c.predicted, s.predicted, 1e-12 * s.predicted);
  EXPECT_NEAR(c.simulated, s.simulated, 1e-12 * s.simulated);
  EXPECT_NEAR(c.predicted, c.simulated, 1e-9 * c.simulated);

  const spec::ClusterSpec assigned =
      Cluster(2, 4, "[{link: net, devices: [0, 1]}, {link: net, devices: [2, 3]}]");
  const Step one_card = RunStep(assigned, contiguous);
  const Step two_cards = RunStep(assigned, strided);
  auto model = spec::ModelPreset("tiny");
  ASSERT_TRUE(model.ok());
  double bytes = 0;
  for (int64_t layer = 0; layer < spec::NumGradientLayers(model->num_blocks); ++layer) {
    bytes += 2.0 * static_cast<double>(spec::LayerParamsPerTpRank(*model, layer, 2).total());
  }
  const Seconds extra = (bytes + 8.0) / 10e9;
  EXPECT_NEAR(two_cards.predicted, s.predicted, 1e-12 * s.predicted);
  EXPECT_NEAR(one_card.predicted - two_cards.predicted, extra, 1e-9 * one_card.predicted);
  EXPECT_NEAR(one_card.simulated - two_cards.simulated, extra, 1e-9 * one_card.simulated);
  EXPECT_NEAR(one_card.predicted, one_card.simulated, 1e-9 * one_card.simulated);
}

}  // namespace
}  // namespace motley::sim
