// Elementwise ops and reductions on the CPU. Reductions sum fixed blocks of kBlock elements in
// double and then the block sums in order, so the result does not depend on the thread count.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace motley::backend {

using tensor::Tensor;

namespace {
constexpr int64_t kBlock = 8192;
constexpr int64_t kPrefetchAhead = 1024;  // floats (4 KiB) ahead of the reduction's read
// (measured on the gpt2-124m grad norm, 163M floats, 2 threads: 29-31 ms with, 42-50 without)
}  // namespace

// out = a + b (equal sizes)
void CpuBackend::Add(Tensor& out, const Tensor& a, const Tensor& b) {
  MOTLEY_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), "Add: sizes differ");
  const float* x = internal::F32(a, "Add: a");
  const float* y = internal::F32(b, "Add: b");
  float* o = internal::F32(out, "Add: out");
  internal::ParallelChunks(num_threads_, a.numel(), [&](int64_t s, int64_t e) {
#pragma omp simd
    for (int64_t i = s; i < e; ++i) o[i] = x[i] + y[i];
  });
}

// a += b
void CpuBackend::AddInPlace(Tensor& a, const Tensor& b) {
  MOTLEY_CHECK(a.numel() == b.numel(), "AddInPlace: sizes differ");
  float* x = internal::F32(a, "AddInPlace: a");
  const float* y = internal::F32(b, "AddInPlace: b");
  internal::ParallelChunks(num_threads_, a.numel(), [&](int64_t s, int64_t e) {
#pragma omp simd
    for (int64_t i = s; i < e; ++i) x[i] += y[i];
  });
}

// a *= s
void CpuBackend::Scale(Tensor& a, float s) {
  float* x = internal::F32(a, "Scale: a");
  internal::ParallelChunks(num_threads_, a.numel(), [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) x[i] *= s;
  });
}

namespace {
// Sum of x[i] (or x[i]^2) over [b, e) in double, with 8 independent accumulators (the single
// accumulator of a plain reduction is bound by the latency of the add).
template <bool kSquare>
double BlockSum(const float* x, int64_t b, int64_t e) {
  double acc[8] = {};
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    // A single read stream per thread: the hardware prefetcher stops at 4 KiB page boundaries.
    if ((i & 15) == 0) __builtin_prefetch(x + i + kPrefetchAhead);
#pragma omp simd
    for (int64_t j = 0; j < 8; ++j) {
      const auto xi = static_cast<double>(x[i + j]);
      acc[j] += kSquare ? xi * xi : xi;
    }
  }
  double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < e; ++i) {
    const auto xi = static_cast<double>(x[i]);
    s += kSquare ? xi * xi : xi;
  }
  return s;
}
}  // namespace

template <bool kSquare>
double CpuBackend::Reduce(const Tensor& a) {
  const float* x = internal::F32(a, "Sum/SumSquares: a");
  const int64_t n = a.numel(), blocks = (n + kBlock - 1) / kBlock;
  partials_.assign(static_cast<size_t>(blocks), 0.0);
  double* part = partials_.data();
  internal::ParallelFor(blocks > 1 ? num_threads_ : 1, blocks, [&](int64_t blk, int) {
    part[blk] = BlockSum<kSquare>(x, blk * kBlock, std::min(n, (blk + 1) * kBlock));
  });
  double total = 0.0;
  for (int64_t blk = 0; blk < blocks; ++blk) total += part[blk];
  return total;
}

double CpuBackend::SumSquares(const Tensor& a) {
  return Reduce<true>(a);
}

double CpuBackend::Sum(const Tensor& a) {
  return Reduce<false>(a);
}

}  // namespace motley::backend
