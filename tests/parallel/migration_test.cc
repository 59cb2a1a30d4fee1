// State migration between plans (parallel/migration.h), below the trainer: layouts over a fixed
// world with idle ranks, the move plan (every new slice covered exactly once, kept data never
// sent, least-loaded senders), and Migrate over the `local` communicator with ranks as threads:
// every element of every new holder's value, m and v equals the element of the logical tensor
// it stands for, whatever the old and new stage splits, replicas and TP degrees; the state
// checksum is equal before and after.
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/core.h>
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "comm/local_world.h"
#include "model/parameters.h"
#include "parallel/migration.h"
#include "parallel/world_layout.h"
#include "parallel_test_util.h"

namespace motley::testing {
namespace {

using parallel::MigrationPlan;
using parallel::WorldLayout;

const std::vector<int> kWorld = {0, 1, 2, 3};

WorldLayout LayoutOver(const spec::Plan& plan, const std::vector<int>& world = kWorld) {
  auto layout = WorldLayout::Build(plan, world);
  EXPECT_TRUE(layout.ok()) << layout.status().message();
  return *layout;
}

// Plans on the 4-device world (global batch 12).
spec::Plan Dp4() {
  return MakePlan({Pipeline({Stage(0, 4, true, true, {0})}, 1, 3),
                   Pipeline({Stage(0, 4, true, true, {1})}, 1, 3),
                   Pipeline({Stage(0, 4, true, true, {2})}, 1, 3),
                   Pipeline({Stage(0, 4, true, true, {3})}, 1, 3)},
                  "dp4");
}
spec::Plan Pp3Uneven() {  // device 3 idle
  return MakePlan({Pipeline({Stage(0, 1, true, false, {0}), Stage(1, 2, false, false, {1}),
                             Stage(3, 1, false, true, {2})},
                            4, 3)},
                  "pp3-uneven");
}
spec::Plan Tp2Pp2() {
  return MakePlan(
      {Pipeline({Stage(0, 3, true, false, {0, 1}), Stage(3, 1, false, true, {2, 3})}, 4, 3)},
      "tp2-pp2");
}
spec::Plan MixedTp() {  // replica 0 whole on device 3, replica 1 TP 2 then TP 1
  return MakePlan(
      {Pipeline({Stage(0, 4, true, true, {3})}, 2, 3),
       Pipeline({Stage(0, 2, true, false, {0, 1}), Stage(2, 2, false, true, {2})}, 3, 2)},
      "mixed-tp");
}

// The value of element g (index in the full tensor) of state `kind` (0 value, 1 m, 2 v) of the
// tensor `name`: distinct per tensor, element and state.
float Expected(const std::string& name, int64_t g, int kind) {
  uint32_t h = 2166136261U;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 16777619U;
  return static_cast<float>(h % 1000U) + static_cast<float>(g) * 1e-3F +
         static_cast<float>(kind) * 0.25F;
}

// Index in the full tensor of local element l of a tensor described by `info`.
int64_t FullIndex(const model::ParamInfo& info, int64_t l) {
  if (!info.sharded()) return l;
  int64_t inner = 1;
  for (int i = info.shard_dim + 1; i < info.shape.rank(); ++i) inner *= info.shape[i];
  const int64_t block = info.shape[info.shard_dim] * inner;
  return ((l / block) * info.full_shape[info.shard_dim] + info.shard_offset) * inner + l % block;
}

// One rank's parameter set under `layout` (nullptr when idle), filled with Expected() (or 0).
std::unique_ptr<model::ParameterSet> MakeParams(tensor::Backend& be, const WorldLayout& layout,
                                                int r, bool fill) {
  if (layout.rank(r).idle()) return nullptr;
  auto set = std::make_unique<model::ParameterSet>(model::ParameterSet::Allocate(
      be, model::StageParamInfos(TinyModel(), parallel::StageLayoutOf(layout, r))));
  if (!fill) return set;
  for (model::Parameter& p : *set) {
    const int64_t n = p.value.numel();
    std::vector<float> host[3];
    for (int kind = 0; kind < 3; ++kind) {
      host[kind].resize(static_cast<size_t>(n));
      for (int64_t l = 0; l < n; ++l) {
        host[kind][static_cast<size_t>(l)] = Expected(p.name(), FullIndex(p.info, l), kind);
      }
    }
    be.CopyFromHost(p.value, host[0].data(), p.value.bytes());
    be.CopyFromHost(p.m, host[1].data(), p.m.bytes());
    be.CopyFromHost(p.v, host[2].data(), p.v.bytes());
  }
  return set;
}

// Elements per (dest, tensor) covered by the plan's moves.
std::map<std::pair<int, std::string>, int64_t> Coverage(const MigrationPlan& plan) {
  std::map<std::pair<int, std::string>, int64_t> out;
  for (const auto& m : plan.moves) out[{m.dest, m.name}] += m.shape.numel();
  return out;
}

TEST(MigrationLayoutTest, ALayoutOverAWorldLeavesUnusedDevicesIdle) {
  const WorldLayout layout = LayoutOver(Pp3Uneven());
  ASSERT_EQ(layout.size(), 4);
  EXPECT_EQ(layout.active_size(), 3);
  EXPECT_TRUE(layout.rank(3).idle());
  EXPECT_EQ(layout.rank(3).device, 3);
  EXPECT_FALSE(layout.rank(2).idle());
  EXPECT_EQ(layout.rank(2).stage, 2);
  auto outside = WorldLayout::Build(Pp3Uneven(), {0, 1, 5, 6});
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("device 2 is not one of the 4 devices"),
            std::string::npos)
      << outside.status().message();
}

TEST(MigrationPlanTest, TheSamePlanMovesNothing) {
  auto plan = parallel::PlanMigration(LayoutOver(Tp2Pp2()), LayoutOver(Tp2Pp2()), TinyModel());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_FALSE(plan->moves.empty());
  EXPECT_EQ(plan->NetworkBytes(), 0);
  for (const auto& m : plan->moves) EXPECT_TRUE(m.local()) << m.name;
}

TEST(MigrationPlanTest, EveryNewSliceIsCoveredOnceAndKeptDataIsNeverSent) {
  const std::vector<spec::Plan> plans = {Dp4(), Pp3Uneven(), Tp2Pp2(), MixedTp()};
  for (const spec::Plan& a : plans) {
    for (const spec::Plan& b : plans) {
      const WorldLayout from = LayoutOver(a), to = LayoutOver(b);
      auto plan = parallel::PlanMigration(from, to, TinyModel());
      ASSERT_TRUE(plan.ok()) << plan.status().message();
      const auto covered = Coverage(*plan);
      size_t tensors = 0;
      for (const auto& info : to.ranks()) {
        if (info.idle()) continue;
        for (const model::ParamInfo& p :
             model::StageParamInfos(TinyModel(), parallel::StageLayoutOf(to, info.rank))) {
          ++tensors;
          EXPECT_EQ(covered.at({info.rank, p.name}), p.shape.numel())
              << a.source << " -> " << b.source << ": " << p.name << " on rank " << info.rank;
        }
      }
      EXPECT_EQ(covered.size(), tensors);
      int64_t sent = 0, received = 0;
      for (int r = 0; r < 4; ++r) {
        sent += plan->SentBytes(r);
        received += plan->ReceivedBytes(r);
        if (to.rank(r).idle()) {
          EXPECT_EQ(plan->ReceivedBytes(r), 0);
        }
        if (from.rank(r).idle()) {
          EXPECT_EQ(plan->SentBytes(r), 0);
        }
      }
      EXPECT_EQ(sent, plan->NetworkBytes());
      EXPECT_EQ(received, plan->NetworkBytes());
    }
  }
}

TEST(MigrationPlanTest, DataParallelToPipelineKeepsWhatEachRankAlreadyHolds) {
  // Every rank of dp4 holds the whole model, so the pipeline's ranks need nothing from others.
  auto plan = parallel::PlanMigration(LayoutOver(Dp4()), LayoutOver(Pp3Uneven()), TinyModel());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->NetworkBytes(), 0);
  // The reverse: device 3 (idle) needs the whole model (3 states x 4 bytes x its parameters),
  // spread over the three old holders; rank 0 needs all but its stage's tensors.
  auto back = parallel::PlanMigration(LayoutOver(Pp3Uneven()), LayoutOver(Dp4()), TinyModel());
  ASSERT_TRUE(back.ok());
  int64_t params = 0;
  for (const model::ParamInfo& p :
       model::StageParamInfos(TinyModel(), model::StageLayout::Full(TinyModel()))) {
    params += p.shape.numel();
  }
  EXPECT_EQ(back->ReceivedBytes(3), 12 * params);
  for (int r = 0; r < 3; ++r) EXPECT_GT(back->SentBytes(r), 0) << "rank " << r;
}

TEST(MigrationPlanTest, ANewTpDegreeTakesItsSlicesFromTheOldShards) {
  // tp2-pp2 -> dp4: device 0 (old TP rank 0 of blocks 0-2) takes the other half of each sharded
  // tensor of blocks 0-2 from rank 1, as a slice along the tensor's TP dimension.
  auto plan = parallel::PlanMigration(LayoutOver(Tp2Pp2()), LayoutOver(Dp4()), TinyModel());
  ASSERT_TRUE(plan.ok());
  bool found = false;
  for (const auto& m : plan->moves) {
    if (m.dest != 0 || m.name != "model.layers.1.self_attn.q_proj.weight") continue;
    ASSERT_EQ(m.dim, 0);
    if (m.source == 0) {
      EXPECT_EQ(m.begin, 0);
      EXPECT_EQ(m.end, 16);
    } else {
      EXPECT_EQ(m.source, 1);
      EXPECT_EQ(m.begin, 16);
      EXPECT_EQ(m.end, 32);
      EXPECT_EQ(m.shape, tensor::Shape({16, 32}));
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST(MigrationPlanTest, DifferentWorldsAreAnError) {
  auto plan = parallel::PlanMigration(LayoutOver(Tp2Pp2()), LayoutOver(Pp3Uneven(), {0, 1, 2}),
                                      TinyModel());
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("different worlds"), std::string::npos);
}

// Runs Migrate from `a` to `b` on 4 threads and checks every new element; also the checksums.
void ExpectExactMigration(const spec::Plan& a, const spec::Plan& b) {
  const WorldLayout from = LayoutOver(a), to = LayoutOver(b);
  auto plan = parallel::PlanMigration(from, to, TinyModel());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto world = comm::LocalWorld::Create(4);
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<parallel::MigrationStats> stats(4);
  std::vector<std::vector<parallel::StateChecksum>> before(4), after(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const std::string& what) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(fmt::format("rank {}: {}", r, what));
      };
      backend::CpuBackend be(1);
      auto comm = world->Connect(r);
      if (!comm.ok()) return fail(comm.status().message());
      auto old_params = MakeParams(be, from, r, /*fill=*/true);
      auto new_params = MakeParams(be, to, r, /*fill=*/false);
      auto sum_before = parallel::ChecksumState(from, r, **comm, be, old_params.get());
      const parallel::StateSnapshot snapshot = parallel::SnapshotState(be, old_params.get());
      auto s = parallel::Migrate(*plan, r, 7, **comm, be, snapshot, new_params.get());
      if (!s.ok()) return fail(s.status().message());
      stats[static_cast<size_t>(r)] = *s;
      auto sum_after = parallel::ChecksumState(to, r, **comm, be, new_params.get());
      if (!sum_before.ok() || !sum_after.ok()) return fail("checksum failed");
      before[static_cast<size_t>(r)] = *sum_before;
      after[static_cast<size_t>(r)] = *sum_after;
      if (new_params == nullptr) return;
      for (const model::Parameter& p : *new_params) {
        const tensor::Tensor* states[3] = {&p.value, &p.m, &p.v};
        for (int kind = 0; kind < 3; ++kind) {
          std::vector<float> host(static_cast<size_t>(p.value.numel()));
          be.CopyToHost(host.data(), *states[kind], p.value.bytes());
          for (size_t l = 0; l < host.size(); ++l) {
            const float want = Expected(p.name(), FullIndex(p.info, static_cast<int64_t>(l)), kind);
            if (host[l] != want) {
              return fail(fmt::format("{} state {} element {}: {} instead of {}", p.name(), kind, l,
                                      host[l], want));
            }
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& f : failures) {
    ADD_FAILURE() << a.source << " -> " << b.source << ": " << f;
  }
  int64_t sent = 0;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(stats[static_cast<size_t>(r)].sent_bytes, plan->SentBytes(r));
    EXPECT_EQ(stats[static_cast<size_t>(r)].received_bytes, plan->ReceivedBytes(r));
    sent += stats[static_cast<size_t>(r)].sent_bytes;
  }
  EXPECT_EQ(sent, plan->NetworkBytes());
  // Every replica before and after has the same hash, element count and (nearly) sums.
  ASSERT_FALSE(before[0].empty());
  for (int r = 0; r < 4; ++r) {
    for (const auto& c : before[static_cast<size_t>(r)]) EXPECT_EQ(c.hash, before[0][0].hash);
    for (const auto& c : after[static_cast<size_t>(r)]) {
      EXPECT_EQ(c.hash, before[0][0].hash) << a.source << " -> " << b.source;
      EXPECT_EQ(c.elements, before[0][0].elements);
      EXPECT_NEAR(c.value_sum, before[0][0].value_sum, 1e-9 * std::abs(before[0][0].value_sum));
      EXPECT_NEAR(c.v_sum, before[0][0].v_sum, 1e-9 * std::abs(before[0][0].v_sum));
    }
  }
}

TEST(MigrateTest, MovesExactStateBetweenVeryDifferentPlans) {
  const std::vector<spec::Plan> plans = {Dp4(), Pp3Uneven(), Tp2Pp2(), MixedTp()};
  for (const spec::Plan& a : plans) {
    for (const spec::Plan& b : plans) {
      if (&a == &b) continue;
      ExpectExactMigration(a, b);
    }
  }
}

TEST(MigrateTest, TheChecksumSeesAMovedElement) {
  // Two sets with the same multiset of values but two elements swapped hash differently.
  const WorldLayout layout = LayoutOver(Dp4());
  auto world = comm::LocalWorld::Create(4);
  std::vector<uint64_t> hashes(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      backend::CpuBackend be(1);
      auto comm = world->Connect(r);
      ASSERT_TRUE(comm.ok());
      auto params = MakeParams(be, layout, r, true);
      auto a = parallel::ChecksumState(layout, r, **comm, be, params.get());
      model::Parameter& p = (*params)[0];
      std::vector<float> host(static_cast<size_t>(p.value.numel()));
      be.CopyToHost(host.data(), p.value, p.value.bytes());
      std::swap(host[0], host[1]);
      be.CopyFromHost(p.value, host.data(), p.value.bytes());
      auto b = parallel::ChecksumState(layout, r, **comm, be, params.get());
      ASSERT_TRUE(a.ok() && b.ok());
      if (r == 0) {
        hashes[0] = (*a)[0].hash;
        hashes[1] = (*b)[0].hash;
        EXPECT_DOUBLE_EQ((*a)[0].value_sum, (*b)[0].value_sum);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NE(hashes[0], hashes[1]);
}

}  // namespace
}  // namespace motley::testing
