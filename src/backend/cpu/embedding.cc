// Token embedding on the CPU. Shapes: tokens (N) i32, wte (V, C), out and dout (N, C).
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace motley::backend {

using tensor::Tensor;

// out (N, C) = wte (V, C) [tokens (N)]
void CpuBackend::EmbeddingForward(Tensor& out, const Tensor& tokens, const Tensor& wte) {
  MOTLEY_CHECK(wte.shape().rank() == 2, "EmbeddingForward: wte must be (V, C)");
  const int64_t V = wte.dim(0), C = wte.dim(1), N = tokens.numel();
  MOTLEY_CHECK(out.numel() == N * C, "EmbeddingForward: out must have N*C elements");
  const int32_t* tok = internal::I32(tokens, "EmbeddingForward: tokens must be i32");
  const float* w = internal::F32(wte, "EmbeddingForward: wte");
  float* o = internal::F32(out, "EmbeddingForward: out");
  for (int64_t n = 0; n < N; ++n) MOTLEY_CHECK(tok[n] >= 0 && tok[n] < V, "token id out of range");
  internal::ParallelFor(N * C >= internal::kChunk ? num_threads_ : 1, N, [&](int64_t n, int) {
    std::memcpy(o + n * C, w + tok[n] * C, static_cast<size_t>(C) * sizeof(float));
  });
}

// dwte (V, C) += scatter of dout (N, C). Threads split the channels, so that repeated tokens never
// race and the order of the sums (rows in order) is the same for any thread count.
void CpuBackend::EmbeddingBackward(Tensor& dwte, const Tensor& dout, const Tensor& tokens) {
  MOTLEY_CHECK(dwte.shape().rank() == 2, "EmbeddingBackward: dwte must be (V, C)");
  const int64_t V = dwte.dim(0), C = dwte.dim(1), N = tokens.numel();
  MOTLEY_CHECK(dout.numel() == N * C, "EmbeddingBackward: dout must have N*C elements");
  const int32_t* tok = internal::I32(tokens, "EmbeddingBackward: tokens must be i32");
  const float* g = internal::F32(dout, "EmbeddingBackward: dout");
  float* dw = internal::F32(dwte, "EmbeddingBackward: dwte");
  for (int64_t n = 0; n < N; ++n) MOTLEY_CHECK(tok[n] >= 0 && tok[n] < V, "token id out of range");
  constexpr int64_t kCols = 64;
  const int64_t col_blocks = (C + kCols - 1) / kCols;
  internal::ParallelFor(N * C >= internal::kChunk ? num_threads_ : 1, col_blocks,
                        [&](int64_t cb, int) {
                          const int64_t c0 = cb * kCols, c1 = std::min(C, c0 + kCols);
                          for (int64_t n = 0; n < N; ++n) {
                            float* dst = dw + tok[n] * C;
                            const float* src = g + n * C;
#pragma omp simd
                            for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
                          }
                        });
}

}  // namespace motley::backend
