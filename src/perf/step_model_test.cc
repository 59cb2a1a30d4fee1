// Tests of the step-model building blocks: ring collectives on the virtual clock (uniform ring,
// a slow hop, skewed entries, queued links), the chain broadcast, the pipeline walk against the
// 1F1B formula without communication and its steady-state extrapolation, the pipeline lower bound
// the planner prunes with (never above the walk), and the emulated compute model's TP shape.
#include "perf/step_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "perf/emulated_compute_model.h"
#include "perf/predictor.h"

namespace motley::perf {
namespace {

// A ring of `steps` steps in which every member sends `b` bytes per step.
RingSteps Fixed(int steps, Bytes b) {
  return RingSteps{steps, [b](int, int) { return b; }, b, b};
}

TEST(StepModelTest, RingAllReduceOnAUniformRingTakesTwoNMinusOneSteps) {
  const std::vector<Hop> hops(4, Hop{1e-6, 1e9});
  const std::vector<Seconds> exits = RingCollectiveExits({0, 0, 0, 0}, hops, Fixed(6, 1000), 64);
  for (Seconds t : exits) EXPECT_NEAR(t, 6 * (1e-6 + 1e-6), 1e-15);
}

TEST(StepModelTest, SlowHopSerializesAndLateEntryDelaysEveryone) {
  std::vector<Hop> hops(4, Hop{1e-6, 1e12});
  hops[1] = Hop{50e-6, 1e12};  // member 1 -> 2 is slow: its sends queue on that link
  const std::vector<Seconds> exits = RingCollectiveExits({0, 0, 0, 0}, hops, Fixed(6, 8), 64);
  EXPECT_GE(exits[2], 6 * 50e-6);
  std::vector<Seconds> entries = {0, 0, 0, 1e-3};
  const std::vector<Seconds> late =
      RingCollectiveExits(entries, std::vector<Hop>(4, Hop{1e-6, 1e12}), Fixed(6, 8), 64);
  for (Seconds t : late) EXPECT_GT(t, 1e-3);
  // A link still busy from an earlier operation delays the first step.
  std::vector<Seconds> busy = {5e-3, -1e300, -1e300, -1e300};
  const std::vector<Seconds> queued = RingCollectiveExits(
      {0, 0, 0, 0}, std::vector<Hop>(4, Hop{1e-6, 1e12}), Fixed(6, 8), 64, &busy);
  EXPECT_GT(queued[1], 5e-3);
  EXPECT_GT(busy[0], 5e-3);
  // Above the exact limit: everyone leaves at max(entry) + steps * slowest hop.
  const std::vector<Seconds> bound = RingCollectiveExits({0, 2e-6, 0, 0}, hops, Fixed(6, 8), 2);
  for (Seconds t : bound) EXPECT_NEAR(t, 2e-6 + 6 * hops[1].Time(8), 1e-15);
}

TEST(StepModelTest, ChainBroadcastForwardsAlongTheChain) {
  const std::vector<Hop> hops(3, Hop{1e-6, 1e12});
  const std::vector<Seconds> exits = ChainBroadcastExits({0, 0, 5e-6}, hops, 8);
  EXPECT_DOUBLE_EQ(exits[0], 0);
  EXPECT_NEAR(exits[1], hops[0].Time(8), 1e-18);
  EXPECT_NEAR(exits[2], 5e-6, 1e-15);  // already later than the arrival
}

TEST(StepModelTest, RingStepsKnowTheirLargestAndSmallestChunk) {
  sched::Collective all_reduce;
  all_reduce.kind = sched::StepOpKind::kLayerAllReduce;
  all_reduce.members = {0, 1, 2, 3};
  all_reduce.elements = 10;  // chunks of 3, 3, 2, 2
  sched::Collective scatter = all_reduce;
  scatter.kind = sched::StepOpKind::kLayerReduceScatter;
  scatter.chunks = {5, 7, 6, 7};
  sched::Collective gather = scatter;
  gather.kind = sched::StepOpKind::kLayerAllGather;
  for (const sched::Collective& col : {all_reduce, scatter, gather}) {
    const RingSteps ring = RingStepsOf(col, 2.0);
    for (int s = 0; s < ring.steps; ++s) {  // every step sends every chunk once
      Bytes lo = 1e300, hi = 0;
      for (int q = 0; q < 4; ++q) {
        lo = std::min(lo, ring.chunk_bytes(s, q));
        hi = std::max(hi, ring.chunk_bytes(s, q));
      }
      EXPECT_EQ(lo, ring.smallest_chunk) << static_cast<int>(col.kind) << " step " << s;
      EXPECT_EQ(hi, ring.largest_chunk) << static_cast<int>(col.kind) << " step " << s;
    }
  }
  EXPECT_EQ(RingStepsOf(all_reduce, 2.0).largest_chunk, 6.0);
  EXPECT_EQ(RingStepsOf(scatter, 2.0).smallest_chunk, 10.0);
}

TEST(StepModelTest, AllReduceChunksFollowEvenCounts) {
  const RingChunkBytes c = AllReduceChunks(2, 8.0, 4);  // chunks of 1, 1, 0, 0 doubles
  Bytes total = 0;
  for (int r = 0; r < 4; ++r) total += c(0, r);
  EXPECT_DOUBLE_EQ(total, 16.0);
}

TEST(StepModelTest, PipelineWalkMatchesTheFormula) {
  const std::vector<Seconds> f(4, 1.0), b(4, 2.0), ready(4, 0.0), c(3, 0.0);
  for (int64_t m : {1, 4, 8, 40}) {
    const std::vector<Seconds> ends = PipelinePhaseEnds(f, b, ready, c, c, m, spec::PipelineSchedule::k1F1B);
    EXPECT_NEAR(ends[0], static_cast<double>(m + 3) * 3.0, 1e-9) << m;
    const std::vector<Seconds> g = PipelinePhaseEnds(f, b, ready, c, c, m, spec::PipelineSchedule::kGPipe);
    EXPECT_NEAR(g[0], static_cast<double>(m + 3) * 3.0, 1e-9) << m;
  }
  // Uneven stages and links: the ends grow with m, and in the steady state every micro-batch costs
  // at least the bottleneck stage's f + b (6.5).
  const std::vector<Seconds> f2 = {1.0, 2.5, 0.5}, b2 = {2.0, 4.0, 1.5}, r2 = {0, 0.1, 0.2};
  const std::vector<Seconds> cf = {0.3, 0.7}, cb = {0.4, 0.2};
  std::vector<Seconds> first_stage_end;
  for (int64_t m = 1; m <= 60; ++m) {
    const auto e = PipelinePhaseEnds(f2, b2, r2, cf, cb, m, spec::PipelineSchedule::k1F1B);
    if (!first_stage_end.empty()) {
      EXPECT_GT(e[0], first_stage_end.back()) << m;
    }
    first_stage_end.push_back(e[0]);
  }
  EXPECT_GE(first_stage_end[59] - first_stage_end[29], 30 * 6.5 - 1e-9);
  // The walk's transfers: one per micro-batch, boundary and direction, each occupying its link
  // for the link's time, one after another on each link.
  constexpr int64_t kM = 10;
  std::vector<TransferBusy> spans(2U * 2U * kM, {-1.0, -1.0});
  PipelinePhaseEnds(f2, b2, r2, cf, cb, kM, spec::PipelineSchedule::k1F1B, spans);
  for (int boundary = 0; boundary < 2; ++boundary) {
    for (int dir = 0; dir < 2; ++dir) {
      const std::vector<Seconds>& link = dir == 0 ? cf : cb;
      Seconds last = -1.0;
      for (int64_t k = 0; k < kM; ++k) {
        const TransferBusy& t = spans[TransferIndex(boundary, dir, k, kM)];
        EXPECT_NEAR(t.second - t.first, link[static_cast<size_t>(boundary)], 1e-12);
        EXPECT_GE(t.first, last - 1e-12);  // every entry written, one after another
        last = t.second;
      }
    }
  }
}

TEST(StepModelTest, PipelineLowerBoundHoldsAndIsTight) {
  // Equal stages, no links: the walk's (m + p - 1)(f + b) is the bound.
  const std::vector<Seconds> f(4, 1.0), b(4, 2.0), ready(4, 0.0), c(3, 0.0);
  for (int64_t m : {1, 4, 40}) {
    const auto ends = PipelinePhaseEnds(f, b, ready, c, c, m, spec::PipelineSchedule::k1F1B);
    EXPECT_NEAR(PipelinePhaseLowerBound(f, b, m), *std::max_element(ends.begin(), ends.end()),
                1e-9);
  }
  // Random stages, links and ready times, both schedules, walked and extrapolated m: never above.
  std::mt19937 rng(7);
  auto uni = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 300; ++trial) {
    const size_t p = 1 + rng() % 6;
    std::vector<Seconds> fw(p), bw(p), rd(p), lf(p - 1), lb(p - 1);
    for (size_t i = 0; i < p; ++i) {
      fw[i] = uni(0.1, 3.0);
      bw[i] = uni(0.1, 6.0);
      rd[i] = uni(0.0, 1.0);
    }
    for (size_t i = 0; i + 1 < p; ++i) {
      lf[i] = uni(0.0, 2.0);
      lb[i] = uni(0.0, 2.0);
    }
    const int64_t m = 1 + static_cast<int64_t>(rng() % 40);
    // Floors at or below the links: a random fraction of each.
    std::vector<Seconds> ff(lf), fb(lb);
    for (Seconds& x : ff) x *= uni(0.0, 1.0);
    for (Seconds& x : fb) x *= uni(0.0, 1.0);
    for (auto schedule : {spec::PipelineSchedule::k1F1B, spec::PipelineSchedule::kGPipe}) {
      const auto ends = PipelinePhaseEnds(fw, bw, rd, lf, lb, m, schedule);
      const Seconds end = *std::max_element(ends.begin(), ends.end());
      EXPECT_LE(PipelinePhaseLowerBound(fw, bw, m), end * (1 + 1e-12))
          << "trial " << trial << " p " << p << " m " << m;
      EXPECT_LE(PipelinePhaseLowerBound(fw, bw, m, ff, fb), end * (1 + 1e-12))
          << "trial " << trial << " p " << p << " m " << m;
      EXPECT_LE(PipelinePhaseLowerBound(fw, bw, m, lf, lb), end * (1 + 1e-12))
          << "trial " << trial << " p " << p << " m " << m;
    }
    // One micro-batch from ready 0 is a chain: every forward and activation transfer down the
    // pipeline, then every backward and gradient transfer back up. The bound with the links as
    // floors is exact there.
    const auto chain = PipelinePhaseEnds(fw, bw, std::vector<Seconds>(p, 0.0), lf, lb, 1,
                                         spec::PipelineSchedule::k1F1B);
    EXPECT_NEAR(PipelinePhaseLowerBound(fw, bw, 1, lf, lb),
                *std::max_element(chain.begin(), chain.end()), 1e-9)
        << "trial " << trial << " p " << p;
  }
}

// Interleaved 1F1B without communication: with v chunks of equal cost per device group (each
// chunk's forward f and backward b), Narayanan et al. (SC'21 §2.2) give a bubble of
// (p - 1)(f + b), v times smaller than 1F1B's over the same per-device work, so the phase
// ends at (m v + p - 1)(f + b) for m a multiple of p. v = 1 is the 1F1B formula.
TEST(StepModelTest, InterleavedWalkMatchesTheNarayananBubble) {
  for (int p : {2, 3, 4}) {
    for (int v : {1, 2, 3}) {
      for (int64_t m : {int64_t{p}, int64_t{2 * p}, int64_t{5 * p}}) {
        const auto V = static_cast<size_t>(p * v);
        const std::vector<Seconds> f(V, 1.0), b(V, 2.0), c(V - 1, 0.0);
        const std::vector<Seconds> ready(static_cast<size_t>(p), 0.0);
        const auto ends =
            PipelinePhaseEnds(f, b, ready, c, c, m, spec::PipelineSchedule::k1F1B, {}, v);
        ASSERT_EQ(ends.size(), static_cast<size_t>(p));
        // (m v + p - 1) chunk slots of 3 s: a group's micro-batch (3 v s) times the slots.
        EXPECT_NEAR(*std::max_element(ends.begin(), ends.end()),
                    static_cast<double>(m * v + p - 1) * 3.0, 1e-9)
            << "p " << p << " v " << v << " m " << m;
        EXPECT_NEAR(*std::max_element(ends.begin(), ends.end()),
                    EqualStagePhaseSlots(p, m, v) * 3.0 * v, 1e-9)
            << "p " << p << " v " << v << " m " << m;
      }
    }
  }
}

// Under interleaving every chunk's transfers queue on their directed pair of groups: the walk
// posts each transfer from one group to another after the one before has arrived (with p = 2,
// activations of even boundaries and gradients of odd ones share the link 0 -> 1).
TEST(StepModelTest, InterleavedTransfersQueueOnTheirGroupPair) {
  const int p = 2;
  const int v = 2;
  const std::vector<Seconds> f(4, 1.0), b(4, 2.0), links(3, 0.7), ready(2, 0.0);
  constexpr int64_t kM = 4;
  // 4 micro-batches x 3 boundaries x 2 directions.
  std::vector<TransferBusy> spans(24U, {-1.0, -1.0});
  const auto ends =
      PipelinePhaseEnds(f, b, ready, links, links, kM, spec::PipelineSchedule::k1F1B, spans, v);
  ASSERT_EQ(ends.size(), 2U);
  EXPECT_GT(*std::max_element(ends.begin(), ends.end()), (4 * v + p - 1) * 3.0);
  // Per directed pair of groups, the transfers in the order they took the link.
  std::map<std::pair<int, int>, std::vector<TransferBusy>> on_link;
  for (int boundary = 0; boundary < 3; ++boundary) {
    for (int dir = 0; dir < 2; ++dir) {
      const int from = (dir == 0 ? boundary : boundary + 1) % p;
      const int to = (dir == 0 ? boundary + 1 : boundary) % p;
      Seconds last = -1.0;
      for (int64_t k = 0; k < kM; ++k) {
        const TransferBusy& t = spans[TransferIndex(boundary, dir, k, kM)];
        EXPECT_NEAR(t.second - t.first, 0.7, 1e-12);
        // In micro-batch order, each (boundary, direction) is sorted and disjoint, as the
        // boundary solve's overlap measure needs.
        EXPECT_GE(t.first, last - 1e-12);
        last = t.second;
        on_link[{from, to}].push_back(t);
      }
    }
  }
  for (auto& [pair, list] : on_link) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) EXPECT_GE(list[i].first, list[i - 1].second - 1e-12);
  }
}

TEST(EmulatedComputeModelTest, TensorParallelShardsTheBlockNotTheHead) {
  spec::ClusterSpec cluster;
  spec::DeviceType t;
  t.name = "emu";
  t.peak_fp32_flops = 1e10;
  t.memory_bandwidth = 1e10;
  t.emulated = spec::EmulatedProfile{1e10, 5e9};
  cluster.device_types.push_back(t);
  spec::ModelSpec m;
  m.num_blocks = 2;
  m.hidden = 64;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.ffn_hidden = 128;
  m.vocab_size = 256;
  const EmulatedComputeModel model(cluster, m);
  const PassTimes one = model.Block(0, 1, 2, 16);
  const PassTimes two = model.Block(0, 2, 2, 16);
  EXPECT_LT(two.forward_s, one.forward_s);
  EXPECT_LT(two.backward_s, one.backward_s);
  EXPECT_GT(one.backward_s, one.forward_s);
  EXPECT_DOUBLE_EQ(model.Head(0, 1, 2, 16).forward_s, model.Head(0, 2, 2, 16).forward_s);
  EXPECT_GT(model.StageCopies(0, 1, 2, 16, true, true).backward_s,
            model.StageCopies(0, 1, 2, 16, true, false).backward_s);
  // AdamW is memory bound here: 28 bytes per parameter at 5 GB/s.
  EXPECT_NEAR(model.OptimizerStep(0, 1e6), 28e6 / 5e9, 1e-12);
}

}  // namespace
}  // namespace motley::perf
