// Cross-backend op test in the style of ggml's test-backend-ops: every tensor::Backend op, forward
// and backward, runs on a backend under test and is compared with the CPU backend's
// double-precision reference (backend/cpu/reference_ops.h, itself checked against finite
// differences by the CPU backend's tests). Adding an op means adding one case to kCases.
//
// One source, two executables (tests/backend/CMakeLists.txt):
// - motley_backend_ops_cpu_test (label unit): the CpuBackend with 2 threads;
// - motley_backend_ops_cuda_test (label gpu): CudaBackend in fp32 and in bf16. Without a GPU, or
//   in a build without CUDA, every case reports SKIPPED with the reason (never passed).
//
// Each case: inputs are seeded uniform [-1, 1) values (odd sizes, sizes above one thread block on
// the GPU); outputs are first filled with garbage (they must be overwritten) and gradients start
// from random values (they must be accumulated: reference and backend add to the same start).
// Metric: max|got - want| / max|want| (backend/cpu/test_util.h's RelError), printed per field.
// Tolerances:
// - fp32, cpu: 1e-5 (kF32Tol, as the CPU backend's own tests);
// - fp32, cuda: 3e-5: expf/logf/rsqrtf are within 2 ulp on the GPU (CUDA C Programming Guide,
//   "Mathematical functions") and float atomics (embedding and RMSNorm weight gradients) change the
//   summation order;
// - bf16, cuda: ops built on matmuls (matmul, attention) 3e-2: each operand is rounded to bf16's 8
//   significant bits (relative error 2^-9 each), so products carry ~4e-3 relative error, and
//   errors in sums of K terms are measured against the largest output; other ops run in fp32 in
//   bf16 mode and keep the fp32 tolerance.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reference_ops.h"
#include "backend/cpu/test_util.h"
#if MOTLEY_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace motley::backend::testing {
namespace {

using tensor::Backend;
using tensor::DType;
using tensor::Shape;
using tensor::Tensor;
using Ids = reference::Ids;

// --- backends under test -------------------------------------------------------------------------

struct BackendUnderTest {
  std::string name;
  double tol = kF32Tol;         // ops without matmuls
  double matmul_tol = kF32Tol;  // ops built on matmuls
  // The backend, or nullptr with `skip` set to the reason.
  std::function<std::unique_ptr<Backend>(std::string* skip)> make;
};

std::vector<BackendUnderTest> MakeBackends() {
#if MOTLEY_BACKEND_OPS_CUDA
  auto cuda = [](bool bf16) {
    return [bf16](std::string* skip) -> std::unique_ptr<Backend> {
#if MOTLEY_HAVE_CUDA
      if (CudaDeviceCount() == 0) {
        *skip = "no CUDA device visible (no GPU or no driver)";
        return nullptr;
      }
      CudaBackendOptions o;
      o.precision = bf16 ? CudaPrecision::kBf16 : CudaPrecision::kFp32;
      auto be = CudaBackend::Create(o);
      if (!be.ok()) {
        *skip = be.status().message();
        return nullptr;
      }
      return std::unique_ptr<Backend>(std::move(*be));
#else
      (void)bf16;
      *skip = "built without CUDA (nvcc or the CUDA toolkit not found)";
      return nullptr;
#endif
    };
  };
  return {{"cuda_fp32", 3e-5, 3e-5, cuda(false)}, {"cuda_bf16", 3e-5, 3e-2, cuda(true)}};
#else
  return {{"cpu", kF32Tol, kF32Tol,
           [](std::string*) { return std::unique_ptr<Backend>(new CpuBackend(2)); }}};
#endif
}

const std::vector<BackendUnderTest>& Backends() {
  static const std::vector<BackendUnderTest> backends = MakeBackends();
  return backends;
}

// --- helpers -----------------------------------------------------------------------------------

Tensor Upload(Backend& be, Shape shape, const std::vector<float>& v) {
  Tensor t = be.Empty(shape, DType::kF32);
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  be.CopyFromHost(t, v.data(), t.bytes());
  return t;
}
Tensor UploadIds(Backend& be, Shape shape, const Ids& v) {
  Tensor t = be.Empty(shape, DType::kI32);
  be.CopyFromHost(t, v.data(), t.bytes());
  return t;
}
Tensor Garbage(Backend& be, Shape shape) {
  Tensor t = be.Empty(shape, DType::kF32);
  be.Fill(t, 1234.5F);
  return t;
}
Vec Download(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  be.CopyToHost(v.data(), t, t.bytes());
  return Widen(v);
}
std::vector<float> Rand(int64_t n, uint32_t seed) {
  return RandomFloats(static_cast<size_t>(n), seed);
}

struct Ctx {
  Backend& be;
  std::string backend;
  double tol;
  double matmul_tol;
  // Compares one output field and prints it (ggml prints every case).
  void Check(const char* op, const char* field, const Tensor& got, const Vec& want,
             bool matmul = false) {
    const double t = matmul ? matmul_tol : tol;
    const double err = RelError(Download(be, got), want);
    std::printf("[%s] %-22s %-8s rel err %.3g (tol %.0e) %s\n", backend.c_str(), op, field, err, t,
                err <= t ? "OK" : "FAIL");
    EXPECT_LE(err, t) << backend << " " << op << " " << field;
  }
};

// --- the cases -------------------------------------------------------------------------------

void MatmulCase(Ctx& c, int64_t N, int64_t C, int64_t OC) {
  const auto x = Rand(N * C, 1), w = Rand(OC * C, 2), g = Rand(N * OC, 3);
  const auto dx0 = Rand(N * C, 4), dw0 = Rand(OC * C, 5);
  Tensor tx = Upload(c.be, {N, C}, x), tw = Upload(c.be, {OC, C}, w);
  Tensor out = Garbage(c.be, {N, OC});
  c.be.MatmulForward(out, tx, tw);
  Vec ref;
  reference::MatmulForward(ref, Widen(x), Widen(w), N, C, OC);
  c.Check("matmul", "out", out, ref, true);
  Tensor dx = Upload(c.be, {N, C}, dx0), dw = Upload(c.be, {OC, C}, dw0);
  Tensor tg = Upload(c.be, {N, OC}, g);
  c.be.MatmulBackward(dx, dw, tg, tx, tw);
  Vec rdx = Widen(dx0), rdw = Widen(dw0);
  reference::MatmulBackward(&rdx, &rdw, Widen(g), Widen(x), Widen(w), N, C, OC);
  c.Check("matmul", "dinp", dx, rdx, true);
  c.Check("matmul", "dweight", dw, rdw, true);
  Tensor none;  // a skipped gradient leaves the other one right
  Tensor dx2 = Upload(c.be, {N, C}, dx0);
  c.be.MatmulBackward(dx2, none, tg, tx, tw);
  c.Check("matmul(skip dweight)", "dinp", dx2, rdx, true);
}

void EmbeddingCase(Ctx& c) {
  const int64_t V = 11, C = 300, N = 40;  // repeated tokens: the scatter must add them all
  const Ids tokens = RandomIds(N, 21, static_cast<int32_t>(V));
  const auto wte = Rand(V * C, 22), g = Rand(N * C, 23), d0 = Rand(V * C, 24);
  Tensor tt = UploadIds(c.be, {N}, tokens), tw = Upload(c.be, {V, C}, wte);
  Tensor out = Garbage(c.be, {N, C});
  c.be.EmbeddingForward(out, tt, tw);
  Vec ref;
  reference::EmbeddingForward(ref, tokens, Widen(wte), V, C);
  c.Check("embedding", "out", out, ref);
  Tensor dw = Upload(c.be, {V, C}, d0);
  c.be.EmbeddingBackward(dw, Upload(c.be, {N, C}, g), tt);
  Vec rdw = Widen(d0);
  reference::EmbeddingBackward(rdw, Widen(g), tokens, V, C);
  c.Check("embedding", "dwte", dw, rdw);
}

void RmsNormCase(Ctx& c, int64_t N, int64_t C) {
  const auto x = Rand(N * C, 31), w = Rand(C, 32), g = Rand(N * C, 33);
  const auto dx0 = Rand(N * C, 34), dw0 = Rand(C, 35);
  const float eps = 1e-5F;
  Tensor tx = Upload(c.be, {N, C}, x), tw = Upload(c.be, {C}, w);
  Tensor out = Garbage(c.be, {N, C}), rstd = Garbage(c.be, {N});
  c.be.RmsNormForward(out, rstd, tx, tw, eps);
  Vec ref, rref;
  reference::RmsNormForward(ref, rref, Widen(x), Widen(w), N, C, static_cast<double>(eps));
  c.Check("rmsnorm", "out", out, ref);
  c.Check("rmsnorm", "rstd", rstd, rref);
  Tensor dx = Upload(c.be, {N, C}, dx0), dw = Upload(c.be, {C}, dw0);
  c.be.RmsNormBackward(dx, dw, Upload(c.be, {N, C}, g), tx, tw, rstd);
  Vec rdx = Widen(dx0), rdw = Widen(dw0);
  reference::RmsNormBackward(rdx, rdw, Widen(g), Widen(x), Widen(w), rref, N, C);
  c.Check("rmsnorm", "dinp", dx, rdx);
  c.Check("rmsnorm", "dweight", dw, rdw);
}

void RopeCase(Ctx& c, bool in_place) {
  const reference::RopeDims d{2, 37, 3, 16};
  const int64_t n = d.B * d.T * d.H * d.HS, pos = 5;
  const float theta = 10000.0F;
  const Shape s{d.B, d.T, d.H, d.HS};
  const auto x = Rand(n, 41), g = Rand(n, 42), d0 = Rand(n, 43);
  Tensor tx = Upload(c.be, s, x);
  Tensor out = in_place ? tx : Garbage(c.be, s);
  c.be.RopeForward(out, tx, pos, theta);
  Vec ref;
  reference::RopeForward(ref, Widen(x), d, pos, static_cast<double>(theta));
  c.Check(in_place ? "rope(in place)" : "rope", "out", out, ref);
  Tensor dx = Upload(c.be, s, d0);
  c.be.RopeBackward(dx, Upload(c.be, s, g), pos, theta);
  Vec rdx = Widen(d0);
  reference::RopeBackward(rdx, Widen(g), d, pos, static_cast<double>(theta));
  c.Check(in_place ? "rope(in place)" : "rope", "dinp", dx, rdx);
}

void AttentionCase(Ctx& c, const reference::AttentionDims& d, const char* name) {
  const int64_t nq = d.B * d.T * d.NH * d.HS, nk = d.B * d.T * d.NKV * d.HS;
  const Shape sq{d.B, d.T, d.NH, d.HS}, sk{d.B, d.T, d.NKV, d.HS};
  const auto q = Rand(nq, 51), k = Rand(nk, 52), v = Rand(nk, 53), g = Rand(nq, 54);
  const auto dq0 = Rand(nq, 55), dk0 = Rand(nk, 56), dv0 = Rand(nk, 57);
  Tensor tq = Upload(c.be, sq, q), tk = Upload(c.be, sk, k), tv = Upload(c.be, sk, v);
  Tensor out = Garbage(c.be, sq), att = Garbage(c.be, {d.B, d.NH, d.T, d.T});
  c.be.AttentionForward(out, att, tq, tk, tv);
  Vec ref, ratt;
  reference::AttentionForward(ref, ratt, Widen(q), Widen(k), Widen(v), d);
  c.Check(name, "out", out, ref, true);
  c.Check(name, "att", att, ratt, true);
  Tensor dq = Upload(c.be, sq, dq0), dk = Upload(c.be, sk, dk0), dv = Upload(c.be, sk, dv0);
  c.be.AttentionBackward(dq, dk, dv, Upload(c.be, sq, g), tq, tk, tv, att);
  Vec rdq = Widen(dq0), rdk = Widen(dk0), rdv = Widen(dv0);
  reference::AttentionBackward(rdq, rdk, rdv, Widen(g), Widen(q), Widen(k), Widen(v), ratt, d);
  c.Check(name, "dq", dq, rdq, true);
  c.Check(name, "dk", dk, rdk, true);
  c.Check(name, "dv", dv, rdv, true);
}

void SwiGluCase(Ctx& c) {
  const int64_t N = 7, F = 301;
  const auto gate = Rand(N * F, 61), up = Rand(N * F, 62), g = Rand(N * F, 63);
  const auto dg0 = Rand(N * F, 64), du0 = Rand(N * F, 65);
  Tensor tg = Upload(c.be, {N, F}, gate), tu = Upload(c.be, {N, F}, up);
  Tensor out = Garbage(c.be, {N, F});
  c.be.SwiGluForward(out, tg, tu);
  Vec ref;
  reference::SwiGluForward(ref, Widen(gate), Widen(up));
  c.Check("swiglu", "out", out, ref);
  Tensor dg = Upload(c.be, {N, F}, dg0), du = Upload(c.be, {N, F}, du0);
  c.be.SwiGluBackward(dg, du, Upload(c.be, {N, F}, g), tg, tu);
  Vec rdg = Widen(dg0), rdu = Widen(du0);
  reference::SwiGluBackward(rdg, rdu, Widen(g), Widen(gate), Widen(up));
  c.Check("swiglu", "dgate", dg, rdg);
  c.Check("swiglu", "dup", du, rdu);
}

void CrossEntropyCase(Ctx& c, int64_t N, int64_t V) {
  auto logits = RandomFloats(static_cast<size_t>(N * V), 71, -4.0F, 4.0F);
  Ids targets = RandomIds(N, 72, static_cast<int32_t>(V));
  targets[1] = -1;  // ignored row: loss 0, no gradient
  const auto d0 = Rand(N * V, 73);
  const float scale = 0.125F;
  Tensor tl = Upload(c.be, {N, V}, logits), tt = UploadIds(c.be, {N}, targets);
  Tensor losses = Garbage(c.be, {N});
  c.be.CrossEntropyForward(losses, tl, tt);
  Vec ref;
  reference::CrossEntropyForward(ref, Widen(logits), targets, N, V);
  c.Check("cross_entropy", "losses", losses, ref);
  Tensor dl = Upload(c.be, {N, V}, d0);
  c.be.CrossEntropyBackward(dl, tl, tt, scale);
  Vec rdl = Widen(d0);
  reference::CrossEntropyBackward(rdl, Widen(logits), targets, N, V, static_cast<double>(scale));
  c.Check("cross_entropy", "dlogits", dl, rdl);
}

void ElementwiseCase(Ctx& c) {
  const int64_t n = 70001;  // more than one grid-stride pass of a small grid, odd
  const auto a = Rand(n, 81), b = Rand(n, 82);
  Tensor ta = Upload(c.be, {n}, a), tb = Upload(c.be, {n}, b);
  Tensor out = Garbage(c.be, {n});
  c.be.Add(out, ta, tb);
  Vec ref;
  reference::Add(ref, Widen(a), Widen(b));
  c.Check("add", "out", out, ref);
  c.be.AddInPlace(ta, tb);
  c.Check("add_in_place", "a", ta, ref);
  c.be.Scale(ta, -0.75F);
  reference::Scale(ref, -0.75);
  c.Check("scale", "a", ta, ref);
  const Tensor tb_only = Upload(c.be, {n}, b);
  const double sum = c.be.Sum(tb_only), sq = c.be.SumSquares(tb_only);
  const double rsum = reference::Sum(Widen(b)), rsq = reference::SumSquares(Widen(b));
  std::printf("[%s] sum %.9g (ref %.9g), sum_squares %.9g (ref %.9g)\n", c.backend.c_str(), sum,
              rsum, sq, rsq);
  // Sums are accumulated in double: only the fp32 inputs' own rounding is left.
  EXPECT_NEAR(sum, rsum, 1e-9 * rsq);
  EXPECT_NEAR(sq, rsq, 1e-9 * rsq);
  EXPECT_EQ(c.be.Sum(tb_only), sum) << "Sum must be repeatable";
}

void AdamWCase(Ctx& c) {
  const int64_t n = 4099;
  auto w = Rand(n, 91), g = Rand(n, 92);
  Vec rw = Widen(w), rm(static_cast<size_t>(n), 0.0), rv(static_cast<size_t>(n), 0.0);
  Tensor tw = Upload(c.be, {n}, w), tg = Upload(c.be, {n}, g);
  Tensor tm = c.be.Zeros({n}, DType::kF32), tv = c.be.Zeros({n}, DType::kF32);
  tensor::AdamWParams p;
  p.lr = 1e-2F;
  p.weight_decay = 0.1F;
  p.grad_scale = 0.5F;
  for (int64_t step = 1; step <= 3; ++step) {
    p.step = step;
    c.be.AdamW(tw, tg, tm, tv, p);
    reference::AdamW(rw, Widen(g), rm, rv, p);
  }
  c.Check("adamw", "param", tw, rw);
  c.Check("adamw", "m", tm, rm);
  c.Check("adamw", "v", tv, rv);
  c.Check("adamw", "grad", tg, Widen(g));  // unchanged
}

void MemoryCase(Ctx& c) {
  const int64_t n = 1001;
  const auto a = Rand(n, 101);
  Tensor t = Upload(c.be, {n}, a);
  Tensor copy = Garbage(c.be, {n});
  c.be.Copy(copy, t);
  c.Check("copy", "f32", copy, Widen(a));
  Ids ids = RandomIds(n, 102, 1000);
  Tensor ti = UploadIds(c.be, {n}, ids), ci = c.be.Empty({n}, DType::kI32);
  c.be.Copy(ci, ti);
  Ids back(static_cast<size_t>(n));
  c.be.CopyToHost(back.data(), ci, ci.bytes());
  EXPECT_EQ(back, ids) << "i32 copy";
  c.be.Fill(t, 2.5F);
  c.Check("fill", "t", t, Vec(static_cast<size_t>(n), 2.5));
  c.be.SetZero(t);
  c.Check("set_zero", "t", t, Vec(static_cast<size_t>(n), 0.0));
  Tensor z = c.be.Zeros({3, 5}, DType::kF32);
  c.Check("zeros", "t", z, Vec(15, 0.0));
  c.be.Synchronize();
}

struct OpCase {
  const char* name;
  std::function<void(Ctx&)> run;
};

const std::vector<OpCase>& Cases() {
  static const std::vector<OpCase> cases = {
      {"Matmul", [](Ctx& c) { MatmulCase(c, 7, 19, 13); }},
      {"MatmulLarge", [](Ctx& c) { MatmulCase(c, 64, 96, 80); }},
      {"Embedding", [](Ctx& c) { EmbeddingCase(c); }},
      {"RmsNorm", [](Ctx& c) { RmsNormCase(c, 5, 48); }},
      {"RmsNormWide", [](Ctx& c) { RmsNormCase(c, 300, 1000); }},
      {"Rope", [](Ctx& c) { RopeCase(c, false); }},
      {"RopeInPlace", [](Ctx& c) { RopeCase(c, true); }},
      {"AttentionGqa",
       [](Ctx& c) {
         AttentionCase(c, {2, 7, 4, 2, 8}, "attention(gqa)");
       }},
      {"AttentionMha",
       [](Ctx& c) {
         AttentionCase(c, {1, 9, 3, 3, 16}, "attention(mha)");
       }},
      {"AttentionMqaLong",
       [](Ctx& c) {
         AttentionCase(c, {1, 300, 2, 1, 16}, "attention(mqa)");
       }},
      {"SwiGlu", [](Ctx& c) { SwiGluCase(c); }},
      {"CrossEntropy", [](Ctx& c) { CrossEntropyCase(c, 5, 37); }},
      {"CrossEntropyWideVocab", [](Ctx& c) { CrossEntropyCase(c, 4, 5003); }},
      {"Elementwise", [](Ctx& c) { ElementwiseCase(c); }},
      {"AdamW", [](Ctx& c) { AdamWCase(c); }},
      {"Memory", [](Ctx& c) { MemoryCase(c); }},
  };
  return cases;
}

class BackendOpsTest : public ::testing::TestWithParam<std::tuple<size_t, size_t>> {};

TEST_P(BackendOpsTest, MatchesReference) {
  const OpCase& op = Cases()[std::get<0>(GetParam())];
  const BackendUnderTest& b = Backends()[std::get<1>(GetParam())];
  std::string skip;
  std::unique_ptr<Backend> be = b.make(&skip);
  if (be == nullptr) GTEST_SKIP() << b.name << ": " << skip;
  Ctx ctx{*be, b.name, b.tol, b.matmul_tol};
  op.run(ctx);
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<size_t, size_t>>& info) {
  return std::string(Cases()[std::get<0>(info.param)].name) + "_" +
         Backends()[std::get<1>(info.param)].name;
}

INSTANTIATE_TEST_SUITE_P(AllOps, BackendOpsTest,
                         ::testing::Combine(::testing::Range<size_t>(0, Cases().size()),
                                            ::testing::Range<size_t>(0, Backends().size())),
                         CaseName);

}  // namespace
}  // namespace motley::backend::testing
