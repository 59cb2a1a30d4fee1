// RMSNorm on the CPU (Zhang & Sennrich 2019, as in HF Llama). Shapes: inp, out, dinp, dout (N, C),
// weight and dweight (C), rstd (N).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace motley::backend {

using tensor::Tensor;

// out (N, C) = inp * rstd * weight; rstd (N) = 1 / sqrt(mean(inp^2) + eps)
void CpuBackend::RmsNormForward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                float eps) {
  const int64_t C = weight.numel();
  MOTLEY_CHECK(C > 0 && internal::LastDim(inp) == C, "RmsNormForward: inp's last dim must be C");
  const int64_t N = inp.numel() / C;
  MOTLEY_CHECK(out.numel() == N * C && rstd.numel() == N, "RmsNormForward: out or rstd size");
  const float* x = internal::F32(inp, "RmsNormForward: inp");
  const float* w = internal::F32(weight, "RmsNormForward: weight");
  float* o = internal::F32(out, "RmsNormForward: out");
  float* r = internal::F32(rstd, "RmsNormForward: rstd");
  const float inv_c = 1.0F / static_cast<float>(C);
  internal::ParallelFor(N * C >= internal::kChunk ? num_threads_ : 1, N, [&](int64_t n, int) {
    const float* xr = x + n * C;
    float ss = 0.0F;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += xr[c] * xr[c];
    const float rs = 1.0F / std::sqrt(ss * inv_c + eps);
    r[n] = rs;
    float* orow = o + n * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) orow[c] = xr[c] * rs * w[c];
  });
}

// dinp (N, C) += rstd * weight * dout - inp * rstd^3 / C * sum(dout * weight * inp)
// dweight (C) += sum over rows of dout * inp * rstd (threads split the channels: same sums for any
// thread count).
void CpuBackend::RmsNormBackward(Tensor& dinp, Tensor& dweight, const Tensor& dout,
                                 const Tensor& inp, const Tensor& weight, const Tensor& rstd) {
  const int64_t C = weight.numel();
  MOTLEY_CHECK(C > 0 && internal::LastDim(inp) == C, "RmsNormBackward: inp's last dim must be C");
  const int64_t N = inp.numel() / C;
  MOTLEY_CHECK(dout.numel() == N * C && rstd.numel() == N, "RmsNormBackward: dout or rstd size");
  const float* x = internal::F32(inp, "RmsNormBackward: inp");
  const float* w = internal::F32(weight, "RmsNormBackward: weight");
  const float* g = internal::F32(dout, "RmsNormBackward: dout");
  const float* r = internal::F32(rstd, "RmsNormBackward: rstd");
  const int nt = N * C >= internal::kChunk ? num_threads_ : 1;
  const float inv_c = 1.0F / static_cast<float>(C);
  if (dinp.defined()) {
    MOTLEY_CHECK(dinp.numel() == N * C, "RmsNormBackward: dinp size");
    float* dx = internal::F32(dinp, "RmsNormBackward: dinp");
    internal::ParallelFor(nt, N, [&](int64_t n, int) {
      const float* xr = x + n * C;
      const float* gr = g + n * C;
      float dot = 0.0F;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < C; ++c) dot += gr[c] * w[c] * xr[c];
      const float rs = r[n];
      const float k = rs * rs * rs * dot * inv_c;
      float* dxr = dx + n * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dxr[c] += rs * w[c] * gr[c] - xr[c] * k;
    });
  }
  if (dweight.defined()) {
    MOTLEY_CHECK(dweight.numel() == C, "RmsNormBackward: dweight size");
    float* dw = internal::F32(dweight, "RmsNormBackward: dweight");
    constexpr int64_t kCols = 64;
    internal::ParallelFor(nt, (C + kCols - 1) / kCols, [&](int64_t cb, int) {
      const int64_t c0 = cb * kCols, c1 = std::min(C, c0 + kCols);
      float acc[kCols] = {};
      for (int64_t n = 0; n < N; ++n) {
        const float* xr = x + n * C;
        const float* gr = g + n * C;
        const float rs = r[n];
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) acc[c - c0] += gr[c] * xr[c] * rs;
      }
      for (int64_t c = c0; c < c1; ++c) dw[c] += acc[c - c0];
    });
  }
}

}  // namespace motley::backend
