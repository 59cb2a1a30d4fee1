// Shared helpers of the CPU backend tests: random inputs, conversions between fp32 tensors and
// double vectors, the error metric, and central finite differences. Test-only.
//
// Tolerances (stated once, used by every op test):
// - kF32Tol: fp32 CpuBackend vs the double reference, as max|got - want| / max|want| (relative to
// the
//   largest reference value, so that cancellation in single elements does not dominate).
// - kFdTol with step kFdEps: the double reference backward vs central differences of the double
//   reference forward, same metric. With eps = 1e-6 the truncation error is ~eps^2 and the rounding
//   error ~1e-16 / eps = 1e-10, both far below 1e-6.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reference_ops.h"
#include "tensor/tensor.h"

namespace motley::backend::testing {

using reference::Vec;
using tensor::Shape;
using tensor::Tensor;

inline constexpr double kF32Tol = 1e-5;
inline constexpr double kFdEps = 1e-6;
inline constexpr double kFdTol = 1e-6;

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0F, float hi = 1.0F) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> RandomIds(size_t n, uint32_t seed, int32_t below) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, below - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

inline Vec Widen(const std::vector<float>& v) {
  Vec d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = static_cast<double>(v[i]);
  return d;
}

inline Tensor F32Tensor(Shape shape, const std::vector<float>& v) {
  return tensor::HostTensorFrom(shape, v);
}
inline Tensor I32Tensor(Shape shape, const std::vector<int32_t>& v) {
  return tensor::HostTensorFrom(shape, v);
}
inline std::vector<float> Floats(const Tensor& t) {
  const float* p = t.data<float>();
  return {p, p + t.numel()};
}
inline Vec ToVec(const Tensor& t) {
  return Widen(Floats(t));
}

// max|got - want| / max|want| (or the absolute error when want is all zeros).
inline double RelError(const Vec& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0.0 ? err / scale : err;
}

inline double Dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d/dx of loss() by central differences; loss() must read x (which is perturbed in place).
inline Vec FiniteDiff(const std::function<double()>& loss, Vec& x, double eps = kFdEps) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double plus = loss();
    x[i] = saved - eps;
    const double minus = loss();
    x[i] = saved;
    g[i] = (plus - minus) / (2.0 * eps);
  }
  return g;
}

inline Vec Times(const Vec& a, double s) {
  Vec r = a;
  for (double& x : r) x *= s;
  return r;
}

}  // namespace motley::backend::testing
