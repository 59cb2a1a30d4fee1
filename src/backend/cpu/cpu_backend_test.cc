// CpuBackend as a whole: memory and copies, the vectorised exp, identical results (bitwise) for
// 1 and 2 threads on every non-BLAS op, and the runtime variables ConfigureCpuRuntime would set.
#include "backend/cpu/cpu_backend.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "backend/cpu/cpu_runtime_env.h"
#include "backend/cpu/cpu_util.h"
#include "backend/cpu/test_util.h"

namespace motley::backend::testing {
namespace {

using tensor::DType;

TEST(CpuBackendTest, MemoryIsAlignedZeroedAndOnItsDevice) {
  CpuBackend be(1, 3);
  EXPECT_EQ(be.device(), (tensor::Device{tensor::DeviceKind::kCpu, 3}));
  for (int64_t n : {1, 17, 1000}) {
    Tensor t = be.Zeros({n}, DType::kF32);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0U);
    EXPECT_EQ(t.device(), be.device());
    for (float x : Floats(t)) EXPECT_EQ(x, 0.0F);
    be.Fill(t, 2.5F);
    for (float x : Floats(t)) EXPECT_EQ(x, 2.5F);
    be.SetZero(t);
    for (float x : Floats(t)) EXPECT_EQ(x, 0.0F);
  }
  Tensor ids = be.Empty({3}, DType::kI32);
  EXPECT_EQ(ids.bytes(), 12U);
}

TEST(CpuBackendTest, CopiesRoundTrip) {
  CpuBackend be(2);
  const auto v = RandomFloats(50000, 1);
  Tensor a = be.Empty({50000}, DType::kF32), b = be.Empty({50000}, DType::kF32);
  be.CopyFromHost(a, v.data(), v.size() * sizeof(float));
  be.Copy(b, a);
  std::vector<float> back(v.size());
  be.CopyToHost(back.data(), b, back.size() * sizeof(float));
  EXPECT_EQ(back, v);
}

TEST(CpuBackendDeathTest, CopySizeMismatchAborts) {
  CpuBackend be;
  Tensor a = be.Empty({4}, DType::kF32);
  float src[3] = {};
  EXPECT_DEATH(be.CopyFromHost(a, src, sizeof(src)), "byte count");
}

TEST(FastExpTest, IsWithinFewUlpOfStdExp) {
  double worst = 0.0;
  for (float x = -87.0F; x < 88.0F; x += 0.00731F) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(static_cast<double>(internal::FastExp(x)) - want) / want);
  }
  EXPECT_LT(worst, 4e-7);  // about 3 ulp of float
  EXPECT_EQ(internal::FastExp(0.0F), 1.0F);
  EXPECT_LT(internal::FastExp(-1000.0F), 2e-38F);
}

// Runs every non-BLAS op on a backend and returns all outputs concatenated.
std::vector<float> RunAllOps(CpuBackend& be) {
  const int64_t B = 2, T = 40, NH = 4, NKV = 2, HS = 16, C = NH * HS, F = 300, V = 1000;
  const int64_t N = B * T;
  std::vector<float> all;
  auto keep = [&](const Tensor& t) {
    const auto f = Floats(t);
    all.insert(all.end(), f.begin(), f.end());
  };
  // embedding
  Tensor tok = I32Tensor({N}, RandomIds(N, 1, static_cast<int32_t>(V)));
  Tensor wte = F32Tensor({V, C}, RandomFloats(V * C, 2));
  Tensor x = be.Empty({N, C}, DType::kF32);
  be.EmbeddingForward(x, tok, wte);
  Tensor dwte = be.Zeros({V, C}, DType::kF32);
  be.EmbeddingBackward(dwte, F32Tensor({N, C}, RandomFloats(N * C, 3)), tok);
  keep(x), keep(dwte);
  // rmsnorm
  Tensor w = F32Tensor({C}, RandomFloats(C, 4)), y = be.Empty({N, C}, DType::kF32);
  Tensor rstd = be.Empty({N}, DType::kF32);
  be.RmsNormForward(y, rstd, x, w, 1e-5F);
  Tensor dx = be.Zeros({N, C}, DType::kF32), dw = be.Zeros({C}, DType::kF32);
  be.RmsNormBackward(dx, dw, F32Tensor({N, C}, RandomFloats(N * C, 5)), x, w, rstd);
  keep(y), keep(rstd), keep(dx), keep(dw);
  // rope + attention
  Tensor q = F32Tensor({B, T, NH, HS}, RandomFloats(N * C, 6));
  Tensor k = F32Tensor({B, T, NKV, HS}, RandomFloats(N * NKV * HS, 7));
  Tensor v = F32Tensor({B, T, NKV, HS}, RandomFloats(N * NKV * HS, 8));
  be.RopeForward(q, q, 3, 10000.0F);
  be.RopeForward(k, k, 3, 10000.0F);
  Tensor dq = be.Zeros(q.shape(), DType::kF32);
  be.RopeBackward(dq, F32Tensor(q.shape(), RandomFloats(N * C, 9)), 3, 10000.0F);
  Tensor out = be.Empty(q.shape(), DType::kF32), att = be.Empty({B, NH, T, T}, DType::kF32);
  be.AttentionForward(out, att, q, k, v);
  Tensor dk = be.Zeros(k.shape(), DType::kF32), dv = be.Zeros(v.shape(), DType::kF32);
  be.AttentionBackward(dq, dk, dv, F32Tensor(q.shape(), RandomFloats(N * C, 10)), q, k, v, att);
  keep(q), keep(k), keep(out), keep(att), keep(dq), keep(dk), keep(dv);
  // swiglu
  Tensor gate = F32Tensor({N, F}, RandomFloats(N * F, 11)),
         up = F32Tensor({N, F}, RandomFloats(N * F, 12));
  Tensor h = be.Empty({N, F}, DType::kF32);
  be.SwiGluForward(h, gate, up);
  Tensor dgate = be.Zeros({N, F}, DType::kF32), dup = be.Zeros({N, F}, DType::kF32);
  be.SwiGluBackward(dgate, dup, F32Tensor({N, F}, RandomFloats(N * F, 13)), gate, up);
  keep(h), keep(dgate), keep(dup);
  // cross-entropy
  auto targets = RandomIds(N, 14, static_cast<int32_t>(V));
  targets[5] = -1;
  Tensor logits = F32Tensor({N, V}, RandomFloats(N * V, 15, -5.0F, 5.0F));
  Tensor losses = be.Empty({N}, DType::kF32), dlogits = be.Zeros({N, V}, DType::kF32);
  be.CrossEntropyForward(losses, logits, I32Tensor({N}, targets));
  be.CrossEntropyBackward(dlogits, logits, I32Tensor({N}, targets), 1.0F / 79.0F);
  keep(losses), keep(dlogits);
  // elementwise, reductions, optimizer
  Tensor sum = be.Empty({N, F}, DType::kF32);
  be.Add(sum, gate, up);
  be.AddInPlace(sum, h);
  be.Scale(sum, 0.7F);
  keep(sum);
  all.push_back(static_cast<float>(be.SumSquares(sum)));
  all.push_back(static_cast<float>(be.Sum(sum)));
  Tensor m = be.Zeros({N, F}, DType::kF32), vv = be.Zeros({N, F}, DType::kF32);
  tensor::AdamWParams p;
  p.weight_decay = 0.1F;
  be.AdamW(gate, dgate, m, vv, p);
  keep(gate), keep(m), keep(vv);
  return all;
}

TEST(CpuBackendTest, OneAndTwoThreadsGiveIdenticalResults) {
  CpuBackend one(1), two(2);
  const auto a = RunAllOps(one);
  const auto b = RunAllOps(two);
  ASSERT_EQ(a.size(), b.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0U);
}

TEST(CpuBackendTest, RanksAsThreadsOfOneProcessEachUseTheirOwnTeam) {
  // Two ranks (std::threads) with 2 OpenMP threads each, at the same time, as the local
  // communicator runs them; each must get exactly the single-rank results.
  // BLAS runs single-threaded inside each rank (OpenBLAS's count is process-wide,
  // docs/architecture.md §6).
  const int saved_blas = BlasThreads();
  SetBlasThreads(1);
  auto run = [](CpuBackend& be) {
    auto all = RunAllOps(be);
    const auto x = F32Tensor({64, 96}, RandomFloats(64 * 96, 21));
    const auto w = F32Tensor({80, 96}, RandomFloats(80 * 96, 22));
    Tensor out = be.Empty({64, 80}, DType::kF32), dx = be.Zeros({64, 96}, DType::kF32);
    Tensor dw = be.Zeros({80, 96}, DType::kF32);
    be.MatmulForward(out, x, w);
    be.MatmulBackward(dx, dw, out, x, w);
    for (const Tensor* t : {&out, &dx, &dw}) {
      const auto f = Floats(*t);
      all.insert(all.end(), f.begin(), f.end());
    }
    return all;
  };
  CpuBackend reference_backend(1);
  const auto want = run(reference_backend);
  std::vector<float> got[2];
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r] = std::thread([&got, &run, r] {
      CpuBackend be(2, r);
      got[r] = run(be);
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& g : got) EXPECT_TRUE(g == want);
  SetBlasThreads(saved_blas);
}

// The wanted runtime variables: OpenBLAS's worker spin is shortened unless the user chose a value,
// and a value already in the environment is never overridden.
TEST(CpuBackendTest, WantedRuntimeEnvRespectsTheUsersValues) {
  const char* old = std::getenv("OPENBLAS_THREAD_TIMEOUT");
  const std::string saved = old != nullptr ? old : "";
  unsetenv("OPENBLAS_THREAD_TIMEOUT");
  EXPECT_EQ(WantedCpuRuntimeEnv().openblas_thread_timeout, "18");
  EXPECT_FALSE(WantedCpuRuntimeEnv().empty());
  setenv("OPENBLAS_THREAD_TIMEOUT", "25", 1);
  EXPECT_EQ(WantedCpuRuntimeEnv().openblas_thread_timeout, "");
  if (old != nullptr) {
    setenv("OPENBLAS_THREAD_TIMEOUT", saved.c_str(), 1);
  } else {
    unsetenv("OPENBLAS_THREAD_TIMEOUT");
  }
}

}  // namespace
}  // namespace motley::backend::testing
