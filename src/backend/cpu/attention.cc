// Causal self-attention with grouped-query heads on the CPU. Forward is parallel over (B, NH);
// backward over (B, NKV) (each task owns the dk, dv rows of its key/value head, so no two threads
// write the same element and the sums run in the same order for any thread count). Backward uses
// the probabilities saved by the forward. The inner products run on explicit 4-lane vectors
// (cpu_util.h) with register accumulators: scores against a transposed, zero-padded K (HS, Tp), and
// weighted sums of rows kept in registers 32 channels at a time.
// Shapes: q, out, dq, dout (B, T, NH, HS); k, v, dk, dv (B, T, NKV, HS); att (B, NH, T, T).
// Query head h uses key/value head h / (NH / NKV). Scale 1/sqrt(HS).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace motley::backend {

using internal::Load4;
using internal::Store4;
using internal::V4;
using tensor::Tensor;

namespace {

struct AttDims {
  int64_t B, T, NH, NKV, HS;
  int64_t group() const { return NH / NKV; }
};

AttDims CheckAttention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& att,
                       const char* op) {
  MOTLEY_CHECK(q.shape().rank() == 4 && k.shape().rank() == 4, op);
  AttDims d{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  MOTLEY_CHECK(k.dim(0) == d.B && k.dim(1) == d.T && k.dim(3) == d.HS, op);
  MOTLEY_CHECK(v.shape() == k.shape(), op);
  MOTLEY_CHECK(d.NKV > 0 && d.NH % d.NKV == 0, "attention: NH must be a multiple of NKV");
  MOTLEY_CHECK(att.numel() == d.B * d.NH * d.T * d.T, "attention: att must be (B, NH, T, T)");
  return d;
}

// Score columns per block: 16 floats = 4 vector accumulators.
constexpr int64_t kBlk = 16;

int64_t Padded(int64_t T) {
  return (T + kBlk - 1) / kBlk * kBlk;
}

// dst (HS, Tp) = transpose of the rows src[t * stride + i], t < T, i < HS; zero for t >= T.
void Transpose(float* dst, const float* src, int64_t T, int64_t Tp, int64_t HS, int64_t stride) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < HS; ++i) dst[i * Tp + t] = src[t * stride + i];
  for (int64_t i = 0; i < HS; ++i)
    for (int64_t t = T; t < Tp; ++t) dst[i * Tp + t] = 0.0F;
}

// out[j] = scale * sum_i a[i] * bt[i * Tp + j] for j < len (bt is (HS, Tp), zero-padded).
void RowTimesTransposed(float* out, const float* a, const float* bt, int64_t HS, int64_t Tp,
                        int64_t len, float scale) {
  for (int64_t j0 = 0; j0 < len; j0 += kBlk) {
    V4 c0{}, c1{}, c2{}, c3{};
    const float* bp = bt + j0;
    for (int64_t i = 0; i < HS; ++i, bp += Tp) {
      const float ai = a[i];
      c0 += ai * Load4(bp);
      c1 += ai * Load4(bp + 4);
      c2 += ai * Load4(bp + 8);
      c3 += ai * Load4(bp + 12);
    }
    float tmp[kBlk];
    Store4(tmp, c0 * scale);
    Store4(tmp + 4, c1 * scale);
    Store4(tmp + 8, c2 * scale);
    Store4(tmp + 12, c3 * scale);
    const int64_t m = std::min(kBlk, len - j0);
    for (int64_t j = 0; j < m; ++j) out[j0 + j] = tmp[j];
  }
}

// out[i] (+)= sum_{j < count} coef[j * coef_stride] * rows[j * row_stride + i] for i < HS;
// overwrites out when `accumulate` is false. Channels are kept in registers 32 at a time.
void WeightedRowSum(float* out, const float* coef, int64_t coef_stride, const float* rows,
                    int64_t row_stride, int64_t count, int64_t HS, bool accumulate) {
  int64_t i0 = 0;
  for (; i0 + 32 <= HS; i0 += 32) {
    V4 a[8] = {};
    const float* r = rows + i0;
    for (int64_t j = 0; j < count; ++j, r += row_stride) {
      const float c = coef[j * coef_stride];
      for (int64_t u = 0; u < 8; ++u) a[u] += c * Load4(r + 4 * u);
    }
    for (int64_t u = 0; u < 8; ++u)
      Store4(out + i0 + 4 * u, accumulate ? Load4(out + i0 + 4 * u) + a[u] : a[u]);
  }
  for (; i0 + 4 <= HS; i0 += 4) {
    V4 a{};
    const float* r = rows + i0;
    for (int64_t j = 0; j < count; ++j, r += row_stride) a += coef[j * coef_stride] * Load4(r);
    Store4(out + i0, accumulate ? Load4(out + i0) + a : a);
  }
  for (; i0 < HS; ++i0) {
    float a = 0.0F;
    for (int64_t j = 0; j < count; ++j) a += coef[j * coef_stride] * rows[j * row_stride + i0];
    out[i0] = accumulate ? out[i0] + a : a;
  }
}

}  // namespace

void CpuBackend::AttentionForward(Tensor& out, Tensor& att, const Tensor& q, const Tensor& k,
                                  const Tensor& v) {
  const AttDims d =
      CheckAttention(q, k, v, att, "AttentionForward: q (B,T,NH,HS), k v (B,T,NKV,HS)");
  MOTLEY_CHECK(out.shape() == q.shape(), "AttentionForward: out must be shaped like q");
  const float* qp = internal::F32(q, "AttentionForward: q");
  const float* kp = internal::F32(k, "AttentionForward: k");
  const float* vp = internal::F32(v, "AttentionForward: v");
  float* op = internal::F32(out, "AttentionForward: out");
  float* ap = internal::F32(att, "AttentionForward: att");
  const int64_t T = d.T, HS = d.HS, NH = d.NH, NKV = d.NKV, Tp = Padded(T);
  const float scale = 1.0F / std::sqrt(static_cast<float>(HS));
  const int nt = num_threads_;
  float* scratch = Scratch(static_cast<size_t>(nt * HS * Tp));
  internal::ParallelFor(nt, d.B * NH, [&](int64_t bh, int tid) {
    const int64_t b = bh / NH, h = bh % NH, kvh = h / d.group();
    float* kt = scratch + tid * HS * Tp;
    Transpose(kt, kp + (b * T * NKV + kvh) * HS, T, Tp, HS, NKV * HS);
    const float* vrows = vp + (b * T * NKV + kvh) * HS;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t len = t + 1;
      float* arow = ap + (bh * T + t) * T;
      RowTimesTransposed(arow, qp + ((b * T + t) * NH + h) * HS, kt, HS, Tp, len, scale);
      float mx = arow[0];
#pragma omp simd reduction(max : mx)
      for (int64_t j = 1; j < len; ++j) mx = std::max(mx, arow[j]);
      const float inv = 1.0F / internal::ExpShiftedSum(arow, arow, len, mx);
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) arow[j] *= inv;
      for (int64_t j = len; j < T; ++j) arow[j] = 0.0F;
      WeightedRowSum(op + ((b * T + t) * NH + h) * HS, arow, 1, vrows, NKV * HS, len, HS, false);
    }
  });
}

// With P = att, dP = dout v^T, dS = scale * P * (dP - rowsum(P * dP)):
// dq += dS k (row by row), then dk += dS^T q and dv += P^T dout (column by column).
void CpuBackend::AttentionBackward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                   const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& att) {
  const AttDims d =
      CheckAttention(q, k, v, att, "AttentionBackward: q (B,T,NH,HS), k v (B,T,NKV,HS)");
  MOTLEY_CHECK(dq.shape() == q.shape() && dout.shape() == q.shape(),
               "AttentionBackward: dq and dout must be shaped like q");
  MOTLEY_CHECK(dk.shape() == k.shape() && dv.shape() == v.shape(),
               "AttentionBackward: dk and dv must be shaped like k and v");
  const float* qp = internal::F32(q, "AttentionBackward: q");
  const float* kp = internal::F32(k, "AttentionBackward: k");
  const float* vp = internal::F32(v, "AttentionBackward: v");
  const float* ap = internal::F32(att, "AttentionBackward: att");
  const float* gp = internal::F32(dout, "AttentionBackward: dout");
  float* dqp = internal::F32(dq, "AttentionBackward: dq");
  float* dkp = internal::F32(dk, "AttentionBackward: dk");
  float* dvp = internal::F32(dv, "AttentionBackward: dv");
  const int64_t T = d.T, HS = d.HS, NH = d.NH, NKV = d.NKV, Tp = Padded(T), G = d.group();
  const float scale = 1.0F / std::sqrt(static_cast<float>(HS));
  const int nt = num_threads_;
  const int64_t per_thread = HS * Tp + T * T;  // V^T and dS (T, T)
  float* scratch = Scratch(static_cast<size_t>(nt * per_thread));
  internal::ParallelFor(nt, d.B * NKV, [&](int64_t bk, int tid) {
    const int64_t b = bk / NKV, kvh = bk % NKV;
    float* vt = scratch + tid * per_thread;
    float* ds = vt + HS * Tp;
    const int64_t kv_base = (b * T * NKV + kvh) * HS, kv_stride = NKV * HS;
    Transpose(vt, vp + kv_base, T, Tp, HS, kv_stride);
    for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h) {
      const float* p = ap + (b * NH + h) * T * T;
      const int64_t q_base = (b * T * NH + h) * HS, q_stride = NH * HS;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t len = t + 1;
        const float* prow = p + t * T;
        float* dsrow = ds + t * T;
        RowTimesTransposed(dsrow, gp + q_base + t * q_stride, vt, HS, Tp, len, 1.0F);  // dP
        float dot = 0.0F;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < len; ++j) dot += prow[j] * dsrow[j];
#pragma omp simd
        for (int64_t j = 0; j < len; ++j) dsrow[j] = prow[j] * (dsrow[j] - dot) * scale;
        WeightedRowSum(dqp + q_base + t * q_stride, dsrow, 1, kp + kv_base, kv_stride, len, HS,
                       true);
      }
      for (int64_t t2 = 0; t2 < T; ++t2) {
        const int64_t count = T - t2;  // queries t >= t2 see key t2
        WeightedRowSum(dkp + kv_base + t2 * kv_stride, ds + t2 * T + t2, T,
                       qp + q_base + t2 * q_stride, q_stride, count, HS, true);
        WeightedRowSum(dvp + kv_base + t2 * kv_stride, p + t2 * T + t2, T,
                       gp + q_base + t2 * q_stride, q_stride, count, HS, true);
      }
    }
  });
}

}  // namespace motley::backend
