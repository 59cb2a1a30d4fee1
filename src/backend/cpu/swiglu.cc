// SwiGLU gate on the CPU (Shazeer 2020): out = silu(gate) * up. Shapes: all (N, F).
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace motley::backend {

using tensor::Tensor;

namespace {
constexpr int64_t kBlock = 256;  // sigmoids computed per block, kept on the stack (1 KB)
}  // namespace

// out (N, F) = gate * sigmoid(gate) * up
void CpuBackend::SwiGluForward(Tensor& out, const Tensor& gate, const Tensor& up) {
  MOTLEY_CHECK(gate.numel() == up.numel() && out.numel() == gate.numel(),
               "SwiGluForward: out, gate and up must have equal sizes");
  const float* g = internal::F32(gate, "SwiGluForward: gate");
  const float* u = internal::F32(up, "SwiGluForward: up");
  float* o = internal::F32(out, "SwiGluForward: out");
  internal::ParallelChunks(num_threads_, gate.numel(), [&](int64_t b, int64_t e) {
    float s[kBlock];
    for (int64_t i0 = b; i0 < e; i0 += kBlock) {
      const int64_t m = std::min(kBlock, e - i0);
      internal::SigmoidInto(s, g + i0, m);
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) o[i0 + j] = g[i0 + j] * s[j] * u[i0 + j];
    }
  });
}

// dgate += dout * up * s * (1 + gate * (1 - s)), dup += dout * gate * s, s = sigmoid(gate)
void CpuBackend::SwiGluBackward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate,
                                const Tensor& up) {
  const int64_t n = gate.numel();
  MOTLEY_CHECK(up.numel() == n && dout.numel() == n && dgate.numel() == n && dup.numel() == n,
               "SwiGluBackward: all tensors must have equal sizes");
  const float* g = internal::F32(gate, "SwiGluBackward: gate");
  const float* u = internal::F32(up, "SwiGluBackward: up");
  const float* go = internal::F32(dout, "SwiGluBackward: dout");
  float* dg = internal::F32(dgate, "SwiGluBackward: dgate");
  float* du = internal::F32(dup, "SwiGluBackward: dup");
  internal::ParallelChunks(num_threads_, n, [&](int64_t b, int64_t e) {
    float s[kBlock];
    for (int64_t i0 = b; i0 < e; i0 += kBlock) {
      const int64_t m = std::min(kBlock, e - i0);
      internal::SigmoidInto(s, g + i0, m);
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) {
        const int64_t i = i0 + j;
        dg[i] += go[i] * u[i] * s[j] * (1.0F + g[i] * (1.0F - s[j]));
        du[i] += go[i] * g[i] * s[j];
      }
    }
  });
}

}  // namespace motley::backend
