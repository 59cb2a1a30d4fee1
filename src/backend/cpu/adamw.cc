// AdamW on the CPU (Loshchilov & Hutter 2019: decoupled weight decay; Kingma & Ba 2015: bias
// correction). Shapes: param, grad, m, v all equal. Bias corrections are computed in double.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace motley::backend {

using tensor::Tensor;

// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; param -= lr (mh / (sqrt(vh) + eps) + wd param)
void CpuBackend::AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                       const tensor::AdamWParams& p) {
  const int64_t n = param.numel();
  MOTLEY_CHECK(grad.numel() == n && m.numel() == n && v.numel() == n, "AdamW: sizes differ");
  MOTLEY_CHECK(p.step >= 1, "AdamW: step is 1-based");
  float* w = internal::F32(param, "AdamW: param");
  const float* g = internal::F32(grad, "AdamW: grad");
  float* mp = internal::F32(m, "AdamW: m");
  float* vp = internal::F32(v, "AdamW: v");
  const auto t = static_cast<double>(p.step);
  const auto mcorr = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta1), t)));
  const auto vcorr = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta2), t)));
  const float b1 = p.beta1, b2 = p.beta2, lr = p.lr, eps = p.eps, wd = p.weight_decay;
  internal::ParallelChunks(num_threads_, n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const float mi = b1 * mp[i] + (1.0F - b1) * g[i];
      const float vi = b2 * vp[i] + (1.0F - b2) * g[i] * g[i];
      mp[i] = mi;
      vp[i] = vi;
      w[i] -= lr * (mi * mcorr / (std::sqrt(vi * vcorr) + eps) + wd * w[i]);
    }
  });
}

}  // namespace motley::backend
