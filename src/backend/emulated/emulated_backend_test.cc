// Tests of the emulated backend on a virtual clock (exact): the time charged per op is the cost
// table's formula, a rate change scales it, the capacity is enforced with a clear error, and every
// op's numbers equal the CPU backend's bit for bit.
#include "backend/emulated/emulated_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace motley::backend {
namespace {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

spec::DeviceType MakeType(double flops, double bandwidth, double memory) {
  spec::DeviceType t;
  t.name = "emu-test";
  t.vendor = "cpu";
  t.memory_bytes = memory;
  t.emulated = spec::EmulatedProfile{flops, bandwidth};
  return t;
}

std::unique_ptr<EmulatedBackend> Make(VirtualClock& clock, double flops = 1e9,
                                      double bandwidth = 1e9, double memory = 1e9, int index = 0) {
  auto r = EmulatedBackend::Create(MakeType(flops, bandwidth, memory), &clock, index);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

std::vector<float> Random(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

Tensor Upload(tensor::Backend& be, Shape shape, const std::vector<float>& values) {
  Tensor t = be.Empty(shape, DType::kF32);
  be.CopyFromHost(t, values.data(), values.size() * sizeof(float));
  return t;
}

Tensor UploadI32(tensor::Backend& be, Shape shape, const std::vector<int32_t>& values) {
  Tensor t = be.Empty(shape, DType::kI32);
  be.CopyFromHost(t, values.data(), values.size() * sizeof(int32_t));
  return t;
}

std::vector<float> Download(tensor::Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  be.CopyToHost(v.data(), t, t.bytes());
  return v;
}

TEST(EmulatedBackend, MatmulIsChargedMaxOfComputeAndMemoryTime) {
  const int64_t n = 8, c = 16, oc = 32;
  const double flops = 2.0 * n * c * oc;                 // 8192
  const double bytes = 4.0 * (n * c + oc * c + n * oc);  // 3584
  {
    VirtualClock clock;  // compute-bound: 1 MFLOP/s, 1 MB/s
    auto be = Make(clock, 1e6, 1e6);
    Tensor inp = Upload(*be, Shape{n, c}, Random(n * c, 1));
    Tensor w = Upload(*be, Shape{oc, c}, Random(oc * c, 2));
    Tensor out = be->Empty(Shape{n, oc}, DType::kF32);
    const Seconds before = clock.now();
    be->MatmulForward(out, inp, w);
    EXPECT_DOUBLE_EQ(clock.now() - before, flops / 1e6);
    EXPECT_EQ(be->stats(EmulatedOp::kMatmulForward).calls, 1);
    EXPECT_DOUBLE_EQ(be->stats(EmulatedOp::kMatmulForward).flops, flops);
    EXPECT_DOUBLE_EQ(be->stats(EmulatedOp::kMatmulForward).bytes, bytes);
  }
  {
    VirtualClock clock;  // memory-bound: 1 GFLOP/s, 1 kB/s
    auto be = Make(clock, 1e9, 1e3);
    Tensor inp = Upload(*be, Shape{n, c}, Random(n * c, 1));
    Tensor w = Upload(*be, Shape{oc, c}, Random(oc * c, 2));
    Tensor out = be->Empty(Shape{n, oc}, DType::kF32);
    const Seconds before = clock.now();
    be->MatmulForward(out, inp, w);
    EXPECT_DOUBLE_EQ(clock.now() - before, bytes / 1e3);
  }
}

TEST(EmulatedBackend, AttentionAndMatmulBackwardFollowTheCostTable) {
  VirtualClock clock;
  auto be = Make(clock, 1e6, 1e12);  // compute-bound: time = flops / 1e6
  const int64_t B = 2, T = 8, NH = 4, NKV = 2, HS = 4;
  Tensor q = Upload(*be, Shape{B, T, NH, HS}, Random(B * T * NH * HS, 3));
  Tensor k = Upload(*be, Shape{B, T, NKV, HS}, Random(B * T * NKV * HS, 4));
  Tensor v = Upload(*be, Shape{B, T, NKV, HS}, Random(B * T * NKV * HS, 5));
  Tensor out = be->Empty(Shape{B, T, NH, HS}, DType::kF32);
  Tensor att = be->Empty(Shape{B, NH, T, T}, DType::kF32);
  Seconds before = clock.now();
  be->AttentionForward(out, att, q, k, v);
  EXPECT_DOUBLE_EQ(clock.now() - before, 4.0 * B * NH * T * T * HS / 1e6);

  const int64_t n = 6, c = 10, oc = 12;
  Tensor inp = Upload(*be, Shape{n, c}, Random(n * c, 6));
  Tensor w = Upload(*be, Shape{oc, c}, Random(oc * c, 7));
  Tensor dout = Upload(*be, Shape{n, oc}, Random(n * oc, 8));
  Tensor dinp = be->Zeros(Shape{n, c}, DType::kF32);
  Tensor dw = be->Zeros(Shape{oc, c}, DType::kF32);
  Tensor none;
  before = clock.now();
  be->MatmulBackward(dinp, dw, dout, inp, w);
  EXPECT_DOUBLE_EQ(clock.now() - before, 4.0 * n * c * oc / 1e6);
  before = clock.now();
  be->MatmulBackward(none, dw, dout, inp, w);  // weight gradient only: half the work
  EXPECT_DOUBLE_EQ(clock.now() - before, 2.0 * n * c * oc / 1e6);
}

TEST(EmulatedBackend, ClockEqualsTheSumOfChargedOpTimes) {
  VirtualClock clock;
  auto be = Make(clock, 2e6, 3e6);
  Tensor a = Upload(*be, Shape{100}, Random(100, 9));
  Tensor b = Upload(*be, Shape{100}, Random(100, 10));
  be->AddInPlace(a, b);
  be->Scale(a, 0.5F);
  (void)be->SumSquares(a);
  EXPECT_DOUBLE_EQ(clock.now(), be->total_stats().time);
  // Memory-bound elementwise ops: bytes / bandwidth.
  EXPECT_DOUBLE_EQ(be->stats(EmulatedOp::kElementwise).time,
                   4.0 * 300 / 3e6 + 4.0 * 200 / 3e6 + 4.0 * 100 / 3e6);
}

TEST(EmulatedBackend, RateScalesTheChargedTime) {
  VirtualClock clock;
  auto be = Make(clock, 1e6, 1e12);
  Tensor inp = Upload(*be, Shape{4, 8}, Random(32, 11));
  Tensor w = Upload(*be, Shape{8, 8}, Random(64, 12));
  Tensor out = be->Empty(Shape{4, 8}, DType::kF32);
  const double base = 2.0 * 4 * 8 * 8 / 1e6;
  auto charged = [&] {
    const Seconds before = clock.now();
    be->MatmulForward(out, inp, w);
    return clock.now() - before;
  };
  EXPECT_DOUBLE_EQ(charged(), base);
  be->SetRate(0.5);  // half speed: twice the time
  EXPECT_DOUBLE_EQ(charged(), 2.0 * base);

  be->SetRateSchedule({{10, 2.0}, {5, 0.25}});  // unsorted on purpose
  be->BeginStep(1);
  EXPECT_DOUBLE_EQ(be->rate(), 1.0);
  EXPECT_DOUBLE_EQ(charged(), base);
  be->BeginStep(5);
  EXPECT_DOUBLE_EQ(be->rate(), 0.25);
  EXPECT_DOUBLE_EQ(charged(), 4.0 * base);
  be->BeginStep(9);
  EXPECT_DOUBLE_EQ(charged(), 4.0 * base);
  be->BeginStep(12);
  EXPECT_DOUBLE_EQ(charged(), 0.5 * base);
}

TEST(EmulatedBackend, CapacityIsEnforcedWithAClearError) {
  VirtualClock clock;
  auto be = Make(clock, 1e9, 1e9, /*memory=*/1024.0 * 1024.0, /*index=*/3);
  EXPECT_EQ(be->capacity_bytes(), 1024 * 1024);
  auto big = be->TryEmpty(Shape{512 * 1024}, DType::kF32);  // 2 MiB
  ASSERT_FALSE(big.ok());
  const std::string& msg = big.status().message();
  EXPECT_NE(msg.find("emulated:3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("emu-test"), std::string::npos) << msg;
  EXPECT_NE(msg.find("out of memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2097152 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1048576 bytes"), std::string::npos) << msg;
  EXPECT_EQ(be->live_bytes(), 0);  // TryEmpty allocated nothing
  EXPECT_TRUE(be->memory_status().ok());

  {
    Tensor a = be->Zeros(Shape{128 * 1024}, DType::kF32);  // 512 KiB
    EXPECT_EQ(be->live_bytes(), 512 * 1024);
    auto b = be->TryZeros(Shape{96 * 1024}, DType::kF32);  // 384 KiB: fits
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(be->live_bytes(), 896 * 1024);
    EXPECT_TRUE(be->memory_status().ok());
    // Through the Backend interface: memory is returned, the sticky state records the failure.
    Tensor c = be->Empty(Shape{64 * 1024}, DType::kF32);  // 256 KiB: past the capacity
    ASSERT_TRUE(c.defined());
    EXPECT_EQ(c.device().kind, tensor::DeviceKind::kEmulated);
    ASSERT_FALSE(be->memory_status().ok());
    EXPECT_NE(be->memory_status().message().find("262144 bytes"), std::string::npos)
        << be->memory_status().message();
    EXPECT_EQ(be->peak_bytes(), 1152 * 1024);
  }
  EXPECT_EQ(be->live_bytes(), 0);          // every tensor released credits the account
  EXPECT_FALSE(be->memory_status().ok());  // sticky
}

TEST(EmulatedBackend, CreateRejectsMissingOrBadProfiles) {
  VirtualClock clock;
  spec::DeviceType plain = MakeType(1e9, 1e9, 1e9);
  plain.emulated.reset();
  auto r1 = EmulatedBackend::Create(plain, &clock);
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("emulated"), std::string::npos);
  auto r2 = EmulatedBackend::Create(MakeType(1e9, 0.0, 1e9), &clock);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("memory_bandwidth"), std::string::npos);
  auto r3 = EmulatedBackend::Create(MakeType(1e9, 1e9, 0.0), &clock);
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("memory"), std::string::npos);
}

// Runs every op of the Backend interface on `be` from the same inputs and returns all outputs.
std::vector<std::vector<float>> RunAllOps(tensor::Backend& be) {
  const int64_t B = 2, T = 6, NH = 4, NKV = 2, HS = 4, C = NH * HS, F = 24, V = 20, N = B * T;
  std::vector<std::vector<float>> results;
  auto keep = [&](const Tensor& t) { results.push_back(Download(be, t)); };
  std::vector<int32_t> tok(static_cast<size_t>(N));
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>((i * 7) % V);
  tok[3] = -1;  // an ignored target
  Tensor tokens = UploadI32(be, Shape{N}, tok);
  std::vector<int32_t> emb_tok = tok;
  emb_tok[3] = 5;
  Tensor emb_tokens = UploadI32(be, Shape{N}, emb_tok);

  Tensor wte = Upload(be, Shape{V, C}, Random(V * C, 20));
  Tensor x = be.Empty(Shape{N, C}, DType::kF32);
  be.EmbeddingForward(x, emb_tokens, wte);
  keep(x);
  Tensor dwte = be.Zeros(Shape{V, C}, DType::kF32);
  be.EmbeddingBackward(dwte, x, emb_tokens);
  keep(dwte);

  Tensor g = Upload(be, Shape{C}, Random(C, 21));
  Tensor ln = be.Empty(Shape{N, C}, DType::kF32);
  Tensor rstd = be.Empty(Shape{N}, DType::kF32);
  be.RmsNormForward(ln, rstd, x, g, 1e-5F);
  keep(ln);
  keep(rstd);
  Tensor dx = be.Zeros(Shape{N, C}, DType::kF32);
  Tensor dg = be.Zeros(Shape{C}, DType::kF32);
  Tensor dln = Upload(be, Shape{N, C}, Random(N * C, 22));
  be.RmsNormBackward(dx, dg, dln, x, g, rstd);
  keep(dx);
  keep(dg);

  Tensor wq = Upload(be, Shape{C, C}, Random(C * C, 23));
  Tensor wk = Upload(be, Shape{NKV * HS, C}, Random(NKV * HS * C, 24));
  Tensor q = be.Empty(Shape{B, T, NH, HS}, DType::kF32);
  Tensor k = be.Empty(Shape{B, T, NKV, HS}, DType::kF32);
  Tensor q2 = q.Reshaped(Shape{N, C});
  Tensor k2 = k.Reshaped(Shape{N, NKV * HS});
  be.MatmulForward(q2, ln, wq);
  be.MatmulForward(k2, ln, wk);
  Tensor v = be.Empty(Shape{B, T, NKV, HS}, DType::kF32);
  be.Copy(v, k);
  be.RopeForward(q, q, 0, 10000.0F);
  be.RopeForward(k, k, 3, 10000.0F);
  keep(q);
  keep(k);
  Tensor att_out = be.Empty(Shape{B, T, NH, HS}, DType::kF32);
  Tensor att = be.Empty(Shape{B, NH, T, T}, DType::kF32);
  be.AttentionForward(att_out, att, q, k, v);
  keep(att_out);
  keep(att);
  Tensor dq = be.Zeros(Shape{B, T, NH, HS}, DType::kF32);
  Tensor dk = be.Zeros(Shape{B, T, NKV, HS}, DType::kF32);
  Tensor dv = be.Zeros(Shape{B, T, NKV, HS}, DType::kF32);
  be.AttentionBackward(dq, dk, dv, att_out, q, k, v, att);
  keep(dq);
  keep(dk);
  keep(dv);
  Tensor dq_pre = be.Zeros(Shape{B, T, NH, HS}, DType::kF32);
  be.RopeBackward(dq_pre, dq, 0, 10000.0F);
  keep(dq_pre);
  Tensor dln2 = be.Zeros(Shape{N, C}, DType::kF32);
  Tensor dwq = be.Zeros(Shape{C, C}, DType::kF32);
  be.MatmulBackward(dln2, dwq, dq_pre.Reshaped(Shape{N, C}), ln, wq);
  keep(dln2);
  keep(dwq);

  Tensor wg = Upload(be, Shape{F, C}, Random(F * C, 25));
  Tensor gate = be.Empty(Shape{N, F}, DType::kF32);
  be.MatmulForward(gate, ln, wg);
  Tensor up = Upload(be, Shape{N, F}, Random(N * F, 26));
  Tensor h = be.Empty(Shape{N, F}, DType::kF32);
  be.SwiGluForward(h, gate, up);
  keep(h);
  Tensor dgate = be.Zeros(Shape{N, F}, DType::kF32);
  Tensor dup = be.Zeros(Shape{N, F}, DType::kF32);
  be.SwiGluBackward(dgate, dup, h, gate, up);
  keep(dgate);
  keep(dup);

  Tensor logits = be.Empty(Shape{N, V}, DType::kF32);
  be.MatmulForward(logits, ln, wte);
  Tensor losses = be.Empty(Shape{N}, DType::kF32);
  be.CrossEntropyForward(losses, logits, tokens);
  keep(losses);
  Tensor dlogits = be.Zeros(Shape{N, V}, DType::kF32);
  be.CrossEntropyBackward(dlogits, logits, tokens, 1.0F / static_cast<float>(N));
  keep(dlogits);

  Tensor sum = be.Empty(Shape{N, C}, DType::kF32);
  be.Add(sum, x, ln);
  be.AddInPlace(sum, dx);
  be.Scale(sum, 0.75F);
  keep(sum);
  results.push_back({static_cast<float>(be.Sum(sum)), static_cast<float>(be.SumSquares(sum))});
  Tensor m = be.Zeros(Shape{V, C}, DType::kF32);
  Tensor vv = be.Zeros(Shape{V, C}, DType::kF32);
  be.Fill(vv, 0.01F);
  tensor::AdamWParams p;
  p.weight_decay = 0.1F;
  p.step = 3;
  be.AdamW(wte, dwte, m, vv, p);
  keep(wte);
  keep(m);
  keep(vv);
  be.SetZero(m);
  keep(m);
  return results;
}

TEST(EmulatedBackend, EveryOpEqualsTheCpuBackendBitwise) {
  CpuBackend cpu;
  VirtualClock clock;
  auto emu = Make(clock, 1e9, 1e9);
  const auto want = RunAllOps(cpu);
  const auto got = RunAllOps(*emu);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].size(), got[i].size()) << "output " << i;
    EXPECT_EQ(std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)), 0)
        << "output " << i << " differs";
  }
  EXPECT_GT(clock.now(), 0.0);
  EXPECT_DOUBLE_EQ(clock.now(), emu->total_stats().time);
  for (int op = 0; op < static_cast<int>(EmulatedOp::kCount); ++op) {
    EXPECT_GT(emu->stats(static_cast<EmulatedOp>(op)).calls, 0)
        << EmulatedOpName(static_cast<EmulatedOp>(op)) << " was never charged";
  }
}

}  // namespace
}  // namespace motley::backend
