// Zero1Layer against the replicated optimizer (the oracle): g members with different local
// gradients; after each step every member's values equal those of AdamW on the summed gradient
// over whole tensors, the norm shares add up to the summed gradient's squared norm, and
// GatherMoments returns the oracle's moments. Adoption after a gather continues exactly.
#include "parallel/zero1.h"

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "comm/local_world.h"

namespace motley::parallel {
namespace {

using tensor::Shape;

std::vector<model::ParamInfo> Infos() {
  std::vector<model::ParamInfo> infos(3);
  infos[0].name = "a.weight";
  infos[0].shape = Shape{7, 3};
  infos[0].weight_decay = true;
  infos[1].name = "b.weight";  // replicated across TP ranks (counts in the norm from TP rank 0)
  infos[1].shape = Shape{5};
  infos[2].name = "c.weight";
  infos[2].shape = Shape{4, 2};
  infos[2].weight_decay = true;
  infos[2].shard_dim = 0;  // a TP shard: always counts in the norm
  infos[2].shard_offset = 0;
  infos[2].full_shape = Shape{8, 2};
  return infos;
}

std::vector<float> Random(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0F, 1.0F);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> Host(tensor::Backend& b, const tensor::Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  b.CopyToHost(v.data(), t, t.bytes());
  return v;
}

tensor::AdamWParams Adam(int64_t step) {
  tensor::AdamWParams a;
  a.lr = 1e-2F;
  a.step = step;
  a.grad_scale = 0.5F;
  return a;
}
constexpr float kDecay = 0.1F;

// Gradients of member `r` at `step`.
std::vector<float> Grad(size_t param, int r, int64_t step, int64_t n) {
  return Random(n, 1000 * param + 100 * static_cast<uint64_t>(r) + static_cast<uint64_t>(step));
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-6 + 1e-6 * std::fabs(static_cast<double>(want[i]))) << what << "[" << i << "]";
  }
}

void RunGroup(int g) {
  constexpr int64_t kSteps = 4;
  backend::CpuBackend be(1);
  // The oracle: one set, gradients summed over the members, AdamW on whole tensors.
  model::ParameterSet oracle = model::ParameterSet::Allocate(be, Infos());
  oracle.Initialize(be, 3);
  std::vector<std::vector<std::vector<float>>> oracle_values(kSteps);  // [step][param]
  std::vector<double> oracle_norm(kSteps);
  for (int64_t step = 1; step <= kSteps; ++step) {
    double sq = 0.0;
    for (size_t i = 0; i < oracle.size(); ++i) {
      model::Parameter& p = oracle[i];
      std::vector<float> sum(static_cast<size_t>(p.value.numel()), 0.0F);
      for (int r = 0; r < g; ++r) {
        const std::vector<float> gr = Grad(i, r, step, p.value.numel());
        for (size_t e = 0; e < sum.size(); ++e) sum[e] += gr[e];
      }
      for (float x : sum) sq += static_cast<double>(x) * static_cast<double>(x);
      be.CopyFromHost(p.grad, sum.data(), p.grad.bytes());
      tensor::AdamWParams a = Adam(step);
      a.weight_decay = p.info.weight_decay ? kDecay : 0.0F;
      be.AdamW(p.value, p.grad, p.m, p.v, a);
      oracle_values[static_cast<size_t>(step - 1)].push_back(Host(be, p.value));
    }
    oracle_norm[static_cast<size_t>(step - 1)] = sq;
  }

  auto world = comm::LocalWorld::Create(g);
  std::vector<std::vector<double>> shares(static_cast<size_t>(g),
                                          std::vector<double>(kSteps, 0.0));
  std::vector<std::vector<std::vector<float>>> values(static_cast<size_t>(g));
  std::vector<std::vector<std::vector<float>>> moments(static_cast<size_t>(g));
  std::vector<std::string> errors(static_cast<size_t>(g));
  std::vector<int64_t> chunk(static_cast<size_t>(g));
  std::vector<std::thread> threads;
  for (int r = 0; r < g; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& s) { errors[static_cast<size_t>(r)] = s.message(); };
      auto comm = world->Connect(r);
      if (!comm.ok()) return fail(comm.status());
      backend::CpuBackend mine(1);
      model::ParameterSet set = model::ParameterSet::Allocate(mine, Infos());
      set.Initialize(mine, 3);
      // One DP group = one TP rank (0 here): replicated tensors count in the norm.
      auto z = Zero1Layer::Create(mine, set, {0, 1, 2}, **comm, /*replicated=*/true);
      if (!z.ok()) return fail(z.status());
      chunk[static_cast<size_t>(r)] = (*z)->chunk_count();
      for (int64_t step = 1; step <= kSteps; ++step) {
        for (size_t i = 0; i < set.size(); ++i) {
          const std::vector<float> gr = Grad(i, r, step, set[i].grad.numel());
          mine.CopyFromHost(set[i].grad, gr.data(), set[i].grad.bytes());
        }
        Status s = (*z)->ReduceGradients();
        if (!s.ok()) return fail(s);
        shares[static_cast<size_t>(r)][static_cast<size_t>(step - 1)] = (*z)->SquaredNormShare();
        s = (*z)->Step(Adam(step), kDecay);
        if (!s.ok()) return fail(s);
        if (set[0].m.defined()) return fail(Err("moments not released after a step"));
        if (step == 2) {  // gather in the middle: the next step adopts again
          s = (*z)->GatherMoments();
          if (!s.ok()) return fail(s);
        }
      }
      Status s = (*z)->GatherMoments();
      if (!s.ok()) return fail(s);
      for (size_t i = 0; i < set.size(); ++i) {
        values[static_cast<size_t>(r)].push_back(Host(mine, set[i].value));
        moments[static_cast<size_t>(r)].push_back(Host(mine, set[i].m));
        moments[static_cast<size_t>(r)].push_back(Host(mine, set[i].v));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < g; ++r) ASSERT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;

  int64_t total = 0;
  for (int r = 0; r < g; ++r) total += chunk[static_cast<size_t>(r)];
  EXPECT_EQ(total, 21 + 5 + 8);
  for (int r = 0; r < g; ++r) {
    EXPECT_LE(chunk[static_cast<size_t>(r)], (34 + g - 1) / g);  // each keeps ~1/g of the moments
  }
  for (int64_t step = 1; step <= kSteps; ++step) {
    double sum = 0.0;
    for (int r = 0; r < g; ++r) sum += shares[static_cast<size_t>(r)][static_cast<size_t>(step - 1)];
    EXPECT_NEAR(sum, oracle_norm[static_cast<size_t>(step - 1)],
                1e-5 * oracle_norm[static_cast<size_t>(step - 1)])
        << "step " << step;
  }
  for (int r = 0; r < g; ++r) {
    for (size_t i = 0; i < oracle.size(); ++i) {
      ExpectNear(values[static_cast<size_t>(r)][i], oracle_values[kSteps - 1][i], "value");
      ExpectNear(moments[static_cast<size_t>(r)][2 * i], Host(be, oracle[i].m), "m");
      ExpectNear(moments[static_cast<size_t>(r)][2 * i + 1], Host(be, oracle[i].v), "v");
    }
  }
}

TEST(Zero1Test, TwoMembersMatchReplicatedAdamW) { RunGroup(2); }
TEST(Zero1Test, ThreeMembersUnevenChunksMatchReplicatedAdamW) { RunGroup(3); }
TEST(Zero1Test, MoreMembersThanSomeTensorsMatchReplicatedAdamW) { RunGroup(5); }

}  // namespace
}  // namespace motley::parallel
