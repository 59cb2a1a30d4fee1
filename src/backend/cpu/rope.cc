// Rotary position embedding on the CPU, Hugging Face Llama layout: channel i is paired with
// i + HS/2 (rotate_half), frequency i is theta^(-2i/HS), position of token t is pos_offset + t.
// Shapes: inp, out, dinp, dout (B, T, H, HS), H = NH for queries and NKV for keys.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace motley::backend {

using tensor::Tensor;

// cos/sin (T, HS/2), angles computed in double and rounded once to float.
void CpuBackend::EnsureRopeTable(int64_t T, int64_t HS, int64_t pos_offset, float theta) {
  if (T == rope_T_ && HS == rope_HS_ && pos_offset == rope_pos_ && theta == rope_theta_) return;
  const int64_t half = HS / 2;
  rope_cos_.resize(static_cast<size_t>(T * half));
  rope_sin_.resize(static_cast<size_t>(T * half));
  for (int64_t i = 0; i < half; ++i) {
    const double freq = std::pow(static_cast<double>(theta),
                                 -2.0 * static_cast<double>(i) / static_cast<double>(HS));
    for (int64_t t = 0; t < T; ++t) {
      const double angle = static_cast<double>(pos_offset + t) * freq;
      rope_cos_[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(angle));
      rope_sin_[static_cast<size_t>(t * half + i)] = static_cast<float>(std::sin(angle));
    }
  }
  rope_T_ = T;
  rope_HS_ = HS;
  rope_pos_ = pos_offset;
  rope_theta_ = theta;
}

namespace {
struct RopeDims {
  int64_t B, T, H, HS;
};
RopeDims CheckRope(const Tensor& a, const Tensor& b, const char* what) {
  MOTLEY_CHECK(a.shape().rank() == 4, what);
  MOTLEY_CHECK(a.shape() == b.shape(), what);
  RopeDims d{a.dim(0), a.dim(1), a.dim(2), a.dim(3)};
  MOTLEY_CHECK(d.HS % 2 == 0, "RoPE: head size must be even");
  return d;
}
}  // namespace

// out (B, T, H, HS) = rope(inp); out may alias inp.
void CpuBackend::RopeForward(Tensor& out, const Tensor& inp, int64_t pos_offset, float theta) {
  const RopeDims d = CheckRope(out, inp, "RopeForward: out and inp must be (B, T, H, HS)");
  EnsureRopeTable(d.T, d.HS, pos_offset, theta);
  const float* x = internal::F32(inp, "RopeForward: inp");
  float* o = internal::F32(out, "RopeForward: out");
  const int64_t half = d.HS / 2;
  const float* cs = rope_cos_.data();
  const float* sn = rope_sin_.data();
  internal::ParallelFor(inp.numel() >= internal::kChunk ? num_threads_ : 1, d.B * d.T,
                        [&](int64_t bt, int) {
                          const int64_t t = bt % d.T;
                          const float* c = cs + t * half;
                          const float* s = sn + t * half;
                          for (int64_t h = 0; h < d.H; ++h) {
                            const float* xr = x + (bt * d.H + h) * d.HS;
                            float* orow = o + (bt * d.H + h) * d.HS;
#pragma omp simd
                            for (int64_t i = 0; i < half; ++i) {
                              const float x1 = xr[i], x2 = xr[i + half];
                              orow[i] = x1 * c[i] - x2 * s[i];
                              orow[i + half] = x2 * c[i] + x1 * s[i];
                            }
                          }
                        });
}

// dinp (B, T, H, HS) += rope^-1(dout): the transpose of the rotation, i.e. rotation by -angle.
void CpuBackend::RopeBackward(Tensor& dinp, const Tensor& dout, int64_t pos_offset, float theta) {
  const RopeDims d = CheckRope(dinp, dout, "RopeBackward: dinp and dout must be (B, T, H, HS)");
  EnsureRopeTable(d.T, d.HS, pos_offset, theta);
  const float* g = internal::F32(dout, "RopeBackward: dout");
  float* dx = internal::F32(dinp, "RopeBackward: dinp");
  const int64_t half = d.HS / 2;
  const float* cs = rope_cos_.data();
  const float* sn = rope_sin_.data();
  internal::ParallelFor(dout.numel() >= internal::kChunk ? num_threads_ : 1, d.B * d.T,
                        [&](int64_t bt, int) {
                          const int64_t t = bt % d.T;
                          const float* c = cs + t * half;
                          const float* s = sn + t * half;
                          for (int64_t h = 0; h < d.H; ++h) {
                            const float* gr = g + (bt * d.H + h) * d.HS;
                            float* dxr = dx + (bt * d.H + h) * d.HS;
#pragma omp simd
                            for (int64_t i = 0; i < half; ++i) {
                              const float g1 = gr[i], g2 = gr[i + half];
                              dxr[i] += g1 * c[i] + g2 * s[i];
                              dxr[i + half] += g2 * c[i] - g1 * s[i];
                            }
                          }
                        });
}

}  // namespace motley::backend
