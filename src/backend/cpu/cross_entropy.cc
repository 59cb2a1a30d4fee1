// Softmax cross-entropy on the CPU, parallel over rows. Shapes: logits, dlogits (N, V); targets (N)
// i32, a target < 0 marks an ignored row (loss 0, no gradient); losses (N).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace motley::backend {

using tensor::Tensor;

namespace {
float RowMax(const float* x, int64_t V) {
  float mx = x[0];
#pragma omp simd reduction(max : mx)
  for (int64_t j = 1; j < V; ++j) mx = std::max(mx, x[j]);
  return mx;
}
}  // namespace

// losses (N) = log(sum_j exp(logits[j])) - logits[target]
void CpuBackend::CrossEntropyForward(Tensor& losses, const Tensor& logits, const Tensor& targets) {
  const int64_t V = internal::LastDim(logits);
  MOTLEY_CHECK(V > 0, "CrossEntropyForward: empty vocabulary");
  const int64_t N = logits.numel() / V;
  MOTLEY_CHECK(targets.numel() == N && losses.numel() == N,
               "CrossEntropyForward: targets and losses must have N elements");
  const float* x = internal::F32(logits, "CrossEntropyForward: logits");
  const int32_t* tg = internal::I32(targets, "CrossEntropyForward: targets must be i32");
  float* loss = internal::F32(losses, "CrossEntropyForward: losses");
  for (int64_t n = 0; n < N; ++n) MOTLEY_CHECK(tg[n] < V, "CrossEntropyForward: target >= V");
  internal::ParallelFor(N * V >= internal::kChunk ? num_threads_ : 1, N, [&](int64_t n, int) {
    if (tg[n] < 0) {
      loss[n] = 0.0F;
      return;
    }
    const float* xr = x + n * V;
    const float mx = RowMax(xr, V);
    const float sum = internal::ExpShiftedSum(nullptr, xr, V, mx);
    loss[n] = std::log(sum) + mx - xr[tg[n]];
  });
}

// dlogits (N, V) += (softmax(logits) - onehot(target)) * loss_scale on rows with a valid target
void CpuBackend::CrossEntropyBackward(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                      float loss_scale) {
  const int64_t V = internal::LastDim(logits);
  MOTLEY_CHECK(V > 0, "CrossEntropyBackward: empty vocabulary");
  const int64_t N = logits.numel() / V;
  MOTLEY_CHECK(targets.numel() == N && dlogits.numel() == N * V,
               "CrossEntropyBackward: targets (N) and dlogits (N, V)");
  const float* x = internal::F32(logits, "CrossEntropyBackward: logits");
  const int32_t* tg = internal::I32(targets, "CrossEntropyBackward: targets must be i32");
  float* dx = internal::F32(dlogits, "CrossEntropyBackward: dlogits");
  for (int64_t n = 0; n < N; ++n) MOTLEY_CHECK(tg[n] < V, "CrossEntropyBackward: target >= V");
  const int nt = N * V >= internal::kChunk ? num_threads_ : 1;
  float* scratch = Scratch(static_cast<size_t>(nt * V));
  internal::ParallelFor(nt, N, [&](int64_t n, int tid) {
    if (tg[n] < 0) return;
    const float* xr = x + n * V;
    float* e = scratch + tid * V;
    const float mx = RowMax(xr, V);
    const float sum = internal::ExpShiftedSum(e, xr, V, mx);
    const float k = loss_scale / sum;
    float* dr = dx + n * V;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) dr[j] += e[j] * k;
    dr[tg[n]] -= loss_scale;
  });
}

}  // namespace motley::backend
