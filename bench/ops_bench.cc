// CpuBackend op throughput at gpt2-124m-like sizes (B=4, T=64, C=768, NH=12, HS=64, F=2048,
// V=50304, N=B*T), each on 1 and 2 threads (the benchmark argument; matmuls set OpenBLAS's
// process-wide thread count to the same number). Matmuls and attention report GFLOP/s (useful
// FLOPs: causal attention counts only the lower triangle); memory-bound ops report GB/s of logical
// traffic (each tensor read or written once, read-modify-write counted twice). The SgemmPeak rows
// give the denominator for ratios (e.g. op GFLOP/s / sgemm peak, or a whole step's achieved
// FLOP/s).
//
// Run: build-*/bench/motley_ops_bench [--benchmark_filter=...] [--benchmark_min_time=0.2]
#include <cblas.h>

#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_runtime_env.h"

namespace motley::backend {
namespace {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

constexpr int64_t kB = 4, kT = 64, kC = 768, kNH = 12, kHS = 64, kF = 2048, kV = 50304;
constexpr int64_t kN = kB * kT;

Tensor Random(CpuBackend& be, Shape shape, float lo = -1.0F, float hi = 1.0F) {
  Tensor t = be.Empty(shape, DType::kF32);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

Tensor Ids(CpuBackend& be, int64_t n, int32_t below) {
  Tensor t = be.Empty({n}, DType::kI32);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> dist(0, below - 1);
  for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = dist(rng);
  return t;
}

int Threads(const benchmark::State& state) {
  return static_cast<int>(state.range(0));
}

void SetRate(benchmark::State& state, const char* name, double per_iteration) {
  state.counters[name] =
      benchmark::Counter(per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// --- sgemm peak: raw cblas_sgemm, C (M, N) = A (M, K) B (K, N)
// ------------------------------------
void BM_SgemmPeak(benchmark::State& state) {
  SetBlasThreads(Threads(state));
  const int M = static_cast<int>(state.range(1)), N = static_cast<int>(state.range(2)),
            K = static_cast<int>(state.range(3));
  CpuBackend be;
  Tensor a = Random(be, {M, K}), b = Random(be, {K, N}), c = be.Empty({M, N}, DType::kF32);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0F, a.data<float>(), K,
                b.data<float>(), N, 0.0F, c.data<float>(), N);
    benchmark::ClobberMemory();
  }
  SetRate(state, "GFLOP/s", 2.0 * M * N * K);
}
BENCHMARK(BM_SgemmPeak)
    ->ArgNames({"threads", "M", "N", "K"})
    ->Args({1, 1024, 1024, 1024})
    ->Args({2, 1024, 1024, 1024})
    ->Args({1, 768, 768, 3072})
    ->Args({2, 768, 768, 3072})
    ->UseRealTime();

// --- matmul at the model's shapes: (N, C) x (OC, C)^T
// ----------------------------------------------
void MatmulArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "C", "OC"});
  for (int t : {1, 2}) {
    b->Args({t, kC, 3 * kC});  // fused qkv
    b->Args({t, kC, kC});      // attention output
    b->Args({t, kC, kF});      // gate / up
    b->Args({t, kF, kC});      // down
    b->Args({t, kC, kV});      // LM head
  }
  b->UseRealTime();
}

void BM_MatmulForward(benchmark::State& state) {
  SetBlasThreads(Threads(state));
  const int64_t C = state.range(1), OC = state.range(2);
  CpuBackend be(Threads(state));
  Tensor x = Random(be, {kN, C}), w = Random(be, {OC, C}), out = be.Empty({kN, OC}, DType::kF32);
  for (auto _ : state) be.MatmulForward(out, x, w);
  SetRate(state, "GFLOP/s", 2.0 * kN * C * OC);
}
BENCHMARK(BM_MatmulForward)->Apply(MatmulArgs);

void BM_MatmulBackward(benchmark::State& state) {
  SetBlasThreads(Threads(state));
  const int64_t C = state.range(1), OC = state.range(2);
  CpuBackend be(Threads(state));
  Tensor x = Random(be, {kN, C}), w = Random(be, {OC, C}), g = Random(be, {kN, OC});
  Tensor dx = be.Zeros({kN, C}, DType::kF32), dw = be.Zeros({OC, C}, DType::kF32);
  for (auto _ : state) be.MatmulBackward(dx, dw, g, x, w);
  SetRate(state, "GFLOP/s", 4.0 * kN * C * OC);
}
BENCHMARK(BM_MatmulBackward)->Apply(MatmulArgs);

// --- attention: useful FLOPs of the causal lower triangle
// -------------------------------------------
double AttentionFlops(int64_t B, int64_t T) {
  // scores and probs x V: 2 matmul-likes of 2*HS flops per (query, key) pair, T(T+1)/2 pairs.
  return 4.0 * static_cast<double>(B * kNH * kHS) * static_cast<double>(T * (T + 1) / 2);
}

void AttentionArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "B", "T"});
  for (int t : {1, 2}) {
    b->Args({t, kB, kT});
    b->Args({t, 1, 1024});
  }
  b->UseRealTime();
}

void BM_AttentionForward(benchmark::State& state) {
  const int64_t B = state.range(1), T = state.range(2);
  CpuBackend be(Threads(state));
  Tensor q = Random(be, {B, T, kNH, kHS}), k = Random(be, {B, T, kNH, kHS});
  Tensor v = Random(be, {B, T, kNH, kHS});
  Tensor out = be.Empty(q.shape(), DType::kF32), att = be.Empty({B, kNH, T, T}, DType::kF32);
  for (auto _ : state) be.AttentionForward(out, att, q, k, v);
  SetRate(state, "GFLOP/s", AttentionFlops(B, T));
}
BENCHMARK(BM_AttentionForward)->Apply(AttentionArgs);

void BM_AttentionBackward(benchmark::State& state) {
  const int64_t B = state.range(1), T = state.range(2);
  CpuBackend be(Threads(state));
  Tensor q = Random(be, {B, T, kNH, kHS}), k = Random(be, {B, T, kNH, kHS});
  Tensor v = Random(be, {B, T, kNH, kHS}), g = Random(be, {B, T, kNH, kHS});
  Tensor out = be.Empty(q.shape(), DType::kF32), att = be.Empty({B, kNH, T, T}, DType::kF32);
  be.AttentionForward(out, att, q, k, v);
  Tensor dq = be.Zeros(q.shape(), DType::kF32), dk = be.Zeros(k.shape(), DType::kF32);
  Tensor dv = be.Zeros(v.shape(), DType::kF32);
  for (auto _ : state) be.AttentionBackward(dq, dk, dv, g, q, k, v, att);
  SetRate(state, "GFLOP/s", 2.0 * AttentionFlops(B, T));  // dP, dV, dQ, dK: twice the forward
}
BENCHMARK(BM_AttentionBackward)->Apply(AttentionArgs);

// --- memory-bound ops: GB/s of logical traffic
// ------------------------------------------------------
constexpr double kFloat = 4.0;  // bytes per float

void BM_RmsNormForward(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor x = Random(be, {kN, kC}), w = Random(be, {kC}), out = be.Empty({kN, kC}, DType::kF32);
  Tensor rstd = be.Empty({kN}, DType::kF32);
  for (auto _ : state) be.RmsNormForward(out, rstd, x, w, 1e-5F);
  SetRate(state, "GB/s", kFloat * (2.0 * kN * kC + kN + kC));
}
BENCHMARK(BM_RmsNormForward)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_RmsNormBackward(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor x = Random(be, {kN, kC}), w = Random(be, {kC}), g = Random(be, {kN, kC});
  Tensor out = be.Empty({kN, kC}, DType::kF32), rstd = be.Empty({kN}, DType::kF32);
  be.RmsNormForward(out, rstd, x, w, 1e-5F);
  Tensor dx = be.Zeros({kN, kC}, DType::kF32), dw = be.Zeros({kC}, DType::kF32);
  for (auto _ : state) be.RmsNormBackward(dx, dw, g, x, w, rstd);
  SetRate(state, "GB/s", kFloat * (4.0 * kN * kC + kN + 3.0 * kC));  // x, g, dx twice
}
BENCHMARK(BM_RmsNormBackward)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_RopeForward(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor q = Random(be, {kB, kT, kNH, kHS});
  for (auto _ : state) be.RopeForward(q, q, 0, 10000.0F);
  SetRate(state, "GB/s", kFloat * 2.0 * static_cast<double>(q.numel()));
}
BENCHMARK(BM_RopeForward)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_RopeBackward(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor g = Random(be, {kB, kT, kNH, kHS}), dq = be.Zeros(g.shape(), DType::kF32);
  for (auto _ : state) be.RopeBackward(dq, g, 0, 10000.0F);
  SetRate(state, "GB/s", kFloat * 3.0 * static_cast<double>(g.numel()));
}
BENCHMARK(BM_RopeBackward)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_SwiGluForward(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor gate = Random(be, {kN, kF}), up = Random(be, {kN, kF}),
         out = be.Empty({kN, kF}, DType::kF32);
  for (auto _ : state) be.SwiGluForward(out, gate, up);
  SetRate(state, "GB/s", kFloat * 3.0 * kN * kF);
}
BENCHMARK(BM_SwiGluForward)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_SwiGluBackward(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor gate = Random(be, {kN, kF}), up = Random(be, {kN, kF}), g = Random(be, {kN, kF});
  Tensor dgate = be.Zeros({kN, kF}, DType::kF32), dup = be.Zeros({kN, kF}, DType::kF32);
  for (auto _ : state) be.SwiGluBackward(dgate, dup, g, gate, up);
  SetRate(state, "GB/s", kFloat * 7.0 * kN * kF);
}
BENCHMARK(BM_SwiGluBackward)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_CrossEntropyForward(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor logits = Random(be, {kN, kV}, -5.0F, 5.0F), tg = Ids(be, kN, static_cast<int32_t>(kV));
  Tensor losses = be.Empty({kN}, DType::kF32);
  for (auto _ : state) be.CrossEntropyForward(losses, logits, tg);
  SetRate(state, "GB/s", kFloat * kN * kV);
}
BENCHMARK(BM_CrossEntropyForward)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_CrossEntropyBackward(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor logits = Random(be, {kN, kV}, -5.0F, 5.0F), tg = Ids(be, kN, static_cast<int32_t>(kV));
  Tensor dl = be.Zeros({kN, kV}, DType::kF32);
  for (auto _ : state) be.CrossEntropyBackward(dl, logits, tg, 1.0F / kN);
  SetRate(state, "GB/s", kFloat * 3.0 * kN * kV);
}
BENCHMARK(BM_CrossEntropyBackward)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_EmbeddingForward(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor wte = Random(be, {kV, kC}), tok = Ids(be, kN, static_cast<int32_t>(kV));
  Tensor out = be.Empty({kN, kC}, DType::kF32);
  for (auto _ : state) be.EmbeddingForward(out, tok, wte);
  SetRate(state, "GB/s", kFloat * 2.0 * kN * kC);
}
BENCHMARK(BM_EmbeddingForward)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_EmbeddingBackward(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor dwte = be.Zeros({kV, kC}, DType::kF32), tok = Ids(be, kN, static_cast<int32_t>(kV));
  Tensor g = Random(be, {kN, kC});
  for (auto _ : state) be.EmbeddingBackward(dwte, g, tok);
  SetRate(state, "GB/s", kFloat * 3.0 * kN * kC);
}
BENCHMARK(BM_EmbeddingBackward)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// Residual add and gradient sums at (N, C); AdamW and the norm reductions at a 768x3072 matrix.
void BM_AddInPlace(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor a = Random(be, {kN, kC}), b = Random(be, {kN, kC});
  for (auto _ : state) be.AddInPlace(a, b);
  SetRate(state, "GB/s", kFloat * 3.0 * kN * kC);
}
BENCHMARK(BM_AddInPlace)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_Add(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor a = Random(be, {kN, kC}), b = Random(be, {kN, kC}), out = be.Empty({kN, kC}, DType::kF32);
  for (auto _ : state) be.Add(out, a, b);
  SetRate(state, "GB/s", kFloat * 3.0 * kN * kC);
}
BENCHMARK(BM_Add)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_SumSquares(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor a = Random(be, {kC, 4 * kC});
  for (auto _ : state) benchmark::DoNotOptimize(be.SumSquares(a));
  SetRate(state, "GB/s", kFloat * static_cast<double>(a.numel()));
}
BENCHMARK(BM_SumSquares)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_Scale(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor a = Random(be, {kC, 4 * kC});
  for (auto _ : state) be.Scale(a, 0.999F);
  SetRate(state, "GB/s", kFloat * 2.0 * static_cast<double>(a.numel()));
}
BENCHMARK(BM_Scale)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_AdamW(benchmark::State& state) {
  CpuBackend be(Threads(state));
  Tensor w = Random(be, {kC, 4 * kC}), g = Random(be, {kC, 4 * kC});
  Tensor m = be.Zeros(w.shape(), DType::kF32), v = be.Zeros(w.shape(), DType::kF32);
  tensor::AdamWParams p;
  p.weight_decay = 0.1F;
  for (auto _ : state) be.AdamW(w, g, m, v, p);
  SetRate(state, "GB/s", kFloat * 7.0 * static_cast<double>(w.numel()));
}
BENCHMARK(BM_AdamW)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// --- one Llama block (NKV = NH) and the LM head + loss, forward and backward --------------------
// Every op a training step runs per block, with gradients zeroed as a step would. GFLOP/s counts
// the matmul and attention FLOPs only, so GFLOP/s / SgemmPeak is the share of sgemm peak the whole
// sequence reaches (the non-matmul ops only cost time). A 12-block step is 12 BlockStep + HeadStep
// (+ the embedding, which is negligible).
void BM_BlockStep(benchmark::State& state) {
  SetBlasThreads(Threads(state));
  CpuBackend be(Threads(state));
  const Shape nc{kN, kC}, nf{kN, kF}, heads{kB, kT, kNH, kHS};
  Tensor x = Random(be, nc), w1 = Random(be, {kC}, 0.5F, 1.5F), w2 = Random(be, {kC}, 0.5F, 1.5F);
  Tensor wq = Random(be, {kC, kC}, -0.03F, 0.03F), wk = Random(be, {kC, kC}, -0.03F, 0.03F);
  Tensor wv = Random(be, {kC, kC}, -0.03F, 0.03F), wo = Random(be, {kC, kC}, -0.03F, 0.03F);
  Tensor wg = Random(be, {kF, kC}, -0.03F, 0.03F), wu = Random(be, {kF, kC}, -0.03F, 0.03F);
  Tensor wd = Random(be, {kC, kF}, -0.03F, 0.03F), dy = Random(be, nc);
  auto empty = [&](const Shape& s) { return be.Empty(s, DType::kF32); };
  Tensor h1 = empty(nc), r1 = empty({kN}), q = empty(heads), k = empty(heads), v = empty(heads);
  Tensor a = empty(heads), att = empty({kB, kNH, kT, kT}), o = empty(nc), x2 = empty(nc);
  Tensor h2 = empty(nc), r2 = empty({kN}), gate = empty(nf), up = empty(nf), sw = empty(nf);
  Tensor dn = empty(nc), y = empty(nc);
  Tensor dsw = empty(nf), dgate = empty(nf), dup = empty(nf), dh2 = empty(nc), dx2 = empty(nc);
  Tensor da = empty(heads), dq = empty(heads), dk = empty(heads), dv = empty(heads);
  Tensor dqr = empty(heads), dkr = empty(heads), dh1 = empty(nc), dx = empty(nc);
  std::vector<Tensor> grads;
  for (const Tensor& w : {w1, w2, wq, wk, wv, wo, wg, wu, wd})
    grads.push_back(be.Zeros(w.shape(), DType::kF32));
  Tensor qf = q.Reshaped(nc), kf = k.Reshaped(nc), vf = v.Reshaped(nc), af = a.Reshaped(nc);
  Tensor daf = da.Reshaped(nc), dqf = dqr.Reshaped(nc), dkf = dkr.Reshaped(nc),
         dvf = dv.Reshaped(nc);
  for (auto _ : state) {
    // forward
    be.RmsNormForward(h1, r1, x, w1, 1e-5F);
    be.MatmulForward(qf, h1, wq);
    be.MatmulForward(kf, h1, wk);
    be.MatmulForward(vf, h1, wv);
    be.RopeForward(q, q, 0, 10000.0F);
    be.RopeForward(k, k, 0, 10000.0F);
    be.AttentionForward(a, att, q, k, v);
    be.MatmulForward(o, af, wo);
    be.Add(x2, x, o);
    be.RmsNormForward(h2, r2, x2, w2, 1e-5F);
    be.MatmulForward(gate, h2, wg);
    be.MatmulForward(up, h2, wu);
    be.SwiGluForward(sw, gate, up);
    be.MatmulForward(dn, sw, wd);
    be.Add(y, x2, dn);
    // backward: activation gradients are zeroed, parameter gradients accumulate
    for (Tensor* t : {&dsw, &dgate, &dup, &dh2, &da, &dq, &dk, &dv, &dqr, &dkr, &dh1})
      be.SetZero(*t);
    be.Copy(dx2, dy);
    be.MatmulBackward(dsw, grads[8], dy, sw, wd);
    be.SwiGluBackward(dgate, dup, dsw, gate, up);
    be.MatmulBackward(dh2, grads[6], dgate, h2, wg);
    be.MatmulBackward(dh2, grads[7], dup, h2, wu);
    be.RmsNormBackward(dx2, grads[1], dh2, x2, w2, r2);
    be.MatmulBackward(daf, grads[5], dx2, af, wo);
    be.AttentionBackward(dq, dk, dv, da, q, k, v, att);
    be.RopeBackward(dqr, dq, 0, 10000.0F);
    be.RopeBackward(dkr, dk, 0, 10000.0F);
    be.MatmulBackward(dh1, grads[2], dqf, h1, wq);
    be.MatmulBackward(dh1, grads[3], dkf, h1, wk);
    be.MatmulBackward(dh1, grads[4], dvf, h1, wv);
    be.Copy(dx, dx2);
    be.RmsNormBackward(dx, grads[0], dh1, x, w1, r1);
  }
  const double matmul = 6.0 * kN * (4.0 * kC * kC + 3.0 * kC * kF);
  SetRate(state, "GFLOP/s", matmul + 3.0 * AttentionFlops(kB, kT));
}
BENCHMARK(BM_BlockStep)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

void BM_HeadStep(benchmark::State& state) {
  SetBlasThreads(Threads(state));
  CpuBackend be(Threads(state));
  Tensor x = Random(be, {kN, kC}), w = Random(be, {kC}, 0.5F, 1.5F);
  Tensor wlm = Random(be, {kV, kC}, -0.03F, 0.03F), tg = Ids(be, kN, static_cast<int32_t>(kV));
  Tensor h = be.Empty({kN, kC}, DType::kF32), r = be.Empty({kN}, DType::kF32);
  Tensor logits = be.Empty({kN, kV}, DType::kF32), losses = be.Empty({kN}, DType::kF32);
  Tensor dlogits = be.Empty({kN, kV}, DType::kF32), dh = be.Empty({kN, kC}, DType::kF32);
  Tensor dx = be.Empty({kN, kC}, DType::kF32);
  Tensor dwlm = be.Zeros(wlm.shape(), DType::kF32), dw = be.Zeros(w.shape(), DType::kF32);
  for (auto _ : state) {
    be.RmsNormForward(h, r, x, w, 1e-5F);
    be.MatmulForward(logits, h, wlm);
    be.CrossEntropyForward(losses, logits, tg);
    benchmark::DoNotOptimize(be.Sum(losses));
    be.SetZero(dlogits);
    be.SetZero(dh);
    be.SetZero(dx);
    be.CrossEntropyBackward(dlogits, logits, tg, 1.0F / kN);
    be.MatmulBackward(dh, dwlm, dlogits, h, wlm);
    be.RmsNormBackward(dx, dw, dh, x, w, r);
  }
  SetRate(state, "GFLOP/s", 6.0 * kN * kC * kV);
}
BENCHMARK(BM_HeadStep)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

}  // namespace
}  // namespace motley::backend

int main(int argc, char** argv) {
  motley::backend::ConfigureCpuRuntime(argv);  // as the train-step bench: see cpu_runtime_env.h
  benchmark::AddCustomContext("openblas_core", motley::backend::BlasCoreName());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
