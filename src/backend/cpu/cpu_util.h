// Internal helpers of the CPU backend: OpenMP loops that honour a per-rank thread count, a
// vectorisable expf, and shape/dtype checks. Not part of the public interface.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include <omp.h>

#include "core/check.h"
#include "tensor/tensor.h"

namespace motley::backend::internal {

// Runs fn(i, thread) for i in [0, n) on `num_threads` OpenMP threads (static schedule), or inline
// when num_threads == 1. `thread` in [0, num_threads) indexes per-thread scratch.
template <typename Fn>
void ParallelFor(int num_threads, int64_t n, Fn&& fn) {
  if (num_threads <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) fn(i, omp_get_thread_num());
}

// Elements per chunk of elementwise loops: large enough to amortise scheduling, small enough to
// balance two threads on the smallest tensors worth threading.
inline constexpr int64_t kChunk = 16384;

// Runs fn(begin, end) over [0, n) in chunks of kChunk elements.
template <typename Fn>
void ParallelChunks(int num_threads, int64_t n, Fn&& fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  ParallelFor(chunks > 1 ? num_threads : 1, chunks,
              [&](int64_t c, int) { fn(c * kChunk, std::min(n, (c + 1) * kChunk)); });
}

// exp for float with about 2 ulp relative error, on 4 lanes at once (GCC vector extensions, so it
// compiles to SSE2 without branches on any x86-64; GCC 12 does not auto-vectorise a scalar version
// reliably because jump threading turns its clamps into branches). Cephes expf (S. Moshier,
// netlib.org/cephes): Cody-Waite reduction by ln 2 and a degree-5 polynomial. Inputs are clamped to
// [-87.34, 88.38], so exp(-1000) gives about 1.2e-38 instead of 0, harmless for softmax and
// sigmoid.
using V4 = float __attribute__((vector_size(16)));
using V4i = int32_t __attribute__((vector_size(16)));

[[gnu::always_inline]] inline V4 FastExp4(V4 x) {
  const V4 hi = V4{} + 88.37626F, lo = V4{} - 87.33654F;
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;
  const V4 y = x * 1.44269504088896341F + 0.5F;  // x / ln 2 + 1/2, floored below
  V4 n = __builtin_convertvector(__builtin_convertvector(y, V4i), V4);
  n += __builtin_convertvector(n > y, V4);  // floor: a true mask is -1
  x = x - n * 0.693359375F;
  x = x - n * -2.12194440e-4F;
  const V4 z = x * x;
  V4 p = V4{} + 1.9875691500E-4F;
  p = p * x + 1.3981999507E-3F;
  p = p * x + 8.3334519073E-3F;
  p = p * x + 4.1665795894E-2F;
  p = p * x + 1.6666665459E-1F;
  p = p * x + 5.0000001201E-1F;
  p = p * z + x + 1.0F;
  const V4i bits = (__builtin_convertvector(n, V4i) + 127) << 23;
  return p * std::bit_cast<V4>(bits);
}

// Scalar FastExp: lane 0 of FastExp4, so scalar tails give the same values as vector bodies.
inline float FastExp(float x) {
  return FastExp4(V4{x, 0.0F, 0.0F, 0.0F})[0];
}

inline V4 Load4(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store4(float* p, V4 v) {
  std::memcpy(p, &v, sizeof(v));
}

// out[i] = exp(in[i] - shift) for i < n (out may be in, or null to only sum); returns the sum of
// the exps, accumulated in a fixed order (4 lanes, then the tail).
inline float ExpShiftedSum(float* out, const float* in, int64_t n, float shift) {
  V4 acc = V4{};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const V4 e = FastExp4(Load4(in + i) - shift);
    if (out) Store4(out + i, e);
    acc += e;
  }
  float sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; i < n; ++i) {
    const float e = FastExp(in[i] - shift);
    if (out) out[i] = e;
    sum += e;
  }
  return sum;
}

// s[i] = 1 / (1 + exp(-g[i])) for i < n.
inline void SigmoidInto(float* s, const float* g, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) Store4(s + i, 1.0F / (1.0F + FastExp4(-Load4(g + i))));
  for (; i < n; ++i) s[i] = 1.0F / (1.0F + FastExp(-g[i]));
}

// Checks that t is a defined f32 host tensor; `what` names the argument in the failure message.
inline float* F32(const tensor::Tensor& t, const char* what) {
  MOTLEY_CHECK(t.defined(), what);
  MOTLEY_CHECK(t.dtype() == tensor::DType::kF32, what);
  return t.data<float>();
}

inline const int32_t* I32(const tensor::Tensor& t, const char* what) {
  MOTLEY_CHECK(t.defined(), what);
  MOTLEY_CHECK(t.dtype() == tensor::DType::kI32, what);
  return t.data<int32_t>();
}

inline int64_t LastDim(const tensor::Tensor& t) {
  MOTLEY_CHECK(t.shape().rank() >= 1, "tensor of rank 0 where rows are expected");
  return t.dim(t.shape().rank() - 1);
}

// Product of all dims but the last (the N of an (N, C) view of t), well defined when C == 0.
inline int64_t Rows(const tensor::Tensor& t) {
  int64_t n = 1;
  for (int i = 0; i + 1 < t.shape().rank(); ++i) n *= t.dim(i);
  return n;
}

}  // namespace motley::backend::internal
