// Causal self-attention with grouped-query heads on the GPU, llm.c's form: q, k and v are
// permuted to (B, NH, T, HS) (k and v expanded from NKV to NH heads), the scores and the weighted
// sum are strided-batched cuBLAS GEMMs over the B*NH heads, and a kernel computes the causal
// softmax in place in `att`. The full (T, T) score matrix is computed (twice the causal FLOPs) so
// that each head is one GEMM. Backward: dP = dO V^T, dS = P * (dP - rowsum(P * dP)) * scale,
// dQ = dS K, dK = dS^T Q, dV = P^T dO per query head, then summed over each group of NH/NKV query
// heads into dk, dv (+=, as the contract says).
// Shapes: q, out, dq, dout (B, T, NH, HS); k, v, dk, dv (B, T, NKV, HS); att (B, NH, T, T).
// Query head h uses key/value head h / (NH / NKV). Scale 1/sqrt(HS).
#include <cmath>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_device.cuh"

namespace motley::backend::cuda {

namespace {

using Dims = AttentionDims;

int64_t HeadsNumel(const Dims& d) {  // (B, NH, T, HS)
  return d.B * d.NH * d.T * d.HS;
}

// dst (B, NH, T, HS) from src (B, T, H, HS) with H = NH (group 1) or NKV (head h reads h / group).
__global__ void ToHeadsKernel(float* dst, const float* src, int64_t T, int64_t NH, int64_t H,
                              int64_t HS, int64_t group, int64_t total) {
  MOTLEY_GRID_STRIDE(i, total) {
    const int64_t d = i % HS;
    const int64_t t = (i / HS) % T;
    const int64_t h = (i / (HS * T)) % NH;
    const int64_t b = i / (HS * T * NH);
    dst[i] = src[((b * T + t) * H + h / group) * HS + d];
  }
}

// dst (B, T, H, HS) (+)= sum over the `group` query heads of src (B, NH, T, HS); overwrites
// when `accumulate` is false.
__global__ void FromHeadsKernel(float* dst, const float* src, int64_t T, int64_t NH, int64_t H,
                                int64_t HS, int64_t group, int64_t total, bool accumulate) {
  MOTLEY_GRID_STRIDE(i, total) {
    const int64_t d = i % HS;
    const int64_t h = (i / HS) % H;
    const int64_t t = (i / (HS * H)) % T;
    const int64_t b = i / (HS * H * T);
    float s = 0.0F;
    for (int64_t g = 0; g < group; ++g) s += src[((b * NH + h * group + g) * T + t) * HS + d];
    dst[i] = accumulate ? dst[i] + s : s;
  }
}

// One block per row (b, h, t) of att (B, NH, T, T), holding scaled scores: causal softmax in
// place; entries above the diagonal become 0.
__global__ void CausalSoftmaxKernel(float* att, int64_t T) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const int64_t t = row % T;
  float* a = att + row * T;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) m = fmaxf(m, a[j]);
  const float mx = BlockMax(m, shared);
  float s = 0.0F;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) s += expf(a[j] - mx);
  const float inv = 1.0F / BlockSum(s, shared);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
    a[j] = j <= t ? expf(a[j] - mx) * inv : 0.0F;
}

// One block per row: ds = p * (dp - sum_j p_j dp_j) * scale, in place over dp.
__global__ void SoftmaxBackwardKernel(float* ds, const float* att, int64_t T, float scale) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const int64_t t = row % T;
  const float* p = att + row * T;
  float* d = ds + row * T;
  float dot = 0.0F;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) dot += p[j] * d[j];
  dot = BlockSum(dot, shared);
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
    d[j] = j <= t ? p[j] * (d[j] - dot) * scale : 0.0F;
}

void ToHeads(cudaStream_t stream, float* dst, const float* src, const Dims& d, int64_t H) {
  const int64_t total = HeadsNumel(d);
  ToHeadsKernel<<<Blocks(total), kThreads, 0, stream>>>(dst, src, d.T, d.NH, H, d.HS, d.NH / H,
                                                        total);
  MOTLEY_CUDA_LAUNCHED();
}

void FromHeads(cudaStream_t stream, float* dst, const float* src, const Dims& d, int64_t H,
               bool accumulate) {
  const int64_t total = d.B * d.T * H * d.HS;
  FromHeadsKernel<<<Blocks(total), kThreads, 0, stream>>>(dst, src, d.T, d.NH, H, d.HS, d.NH / H,
                                                          total, accumulate);
  MOTLEY_CUDA_LAUNCHED();
}

unsigned int Rows(const Dims& d) {
  return RowBlocks(d.B * d.NH * d.T);
}

// A batched GEMM over the B*NH heads; operands are (B*NH) matrices of `a_mat`, `b_mat` floats.
GemmArgs HeadGemm(const Dims& d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                  int64_t lda, int64_t a_mat, const float* b, int64_t ldb, int64_t b_mat, float* c,
                  int64_t ldc, int64_t c_mat) {
  GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = lda;
  g.stride_a = a_mat;
  g.a_count = a_mat * d.B * d.NH;
  g.b = b;
  g.ldb = ldb;
  g.stride_b = b_mat;
  g.b_count = b_mat * d.B * d.NH;
  g.c = c;
  g.ldc = ldc;
  g.stride_c = c_mat;
  g.batch = d.B * d.NH;
  return g;
}

}  // namespace

void AttentionForward(Context& ctx, float* out, float* att, const float* q, const float* k,
                      const float* v, const AttentionDims& d) {
  MOTLEY_CHECK(d.NKV > 0 && d.NH % d.NKV == 0, "attention: NH must be a multiple of NKV");
  if (HeadsNumel(d) == 0) return;
  const auto n = static_cast<size_t>(HeadsNumel(d));
  float* qh = ctx.ScratchOf<float>(Context::kQ, n);
  float* kh = ctx.ScratchOf<float>(Context::kK, n);
  float* vh = ctx.ScratchOf<float>(Context::kV, n);
  float* oh = ctx.ScratchOf<float>(Context::kO, n);
  if (ctx.out_of_memory) return;
  ToHeads(ctx.stream, qh, q, d, d.NH);
  ToHeads(ctx.stream, kh, k, d, d.NKV);
  ToHeads(ctx.stream, vh, v, d, d.NKV);
  const int64_t T = d.T, HS = d.HS;
  // scores (T, T) = scale * Q K^T  -> column-major S^T = K'^T Q'
  GemmArgs s = HeadGemm(d, true, false, T, T, HS, kh, HS, T * HS, qh, HS, T * HS, att, T, T * T);
  s.alpha = 1.0F / std::sqrt(static_cast<float>(HS));
  Gemm(ctx, s);
  CausalSoftmaxKernel<<<Rows(d), kThreads, 0, ctx.stream>>>(att, T);
  MOTLEY_CUDA_LAUNCHED();
  // O (T, HS) = P V  -> column-major O^T = V^T P^T
  Gemm(ctx, HeadGemm(d, false, false, HS, T, T, vh, HS, T * HS, att, T, T * T, oh, HS, T * HS));
  FromHeads(ctx.stream, out, oh, d, d.NH, false);
}

void AttentionBackward(Context& ctx, float* dq, float* dk, float* dv, const float* dout,
                       const float* q, const float* k, const float* v, const float* att,
                       const AttentionDims& d) {
  MOTLEY_CHECK(d.NKV > 0 && d.NH % d.NKV == 0, "attention: NH must be a multiple of NKV");
  if (HeadsNumel(d) == 0) return;
  const auto n = static_cast<size_t>(HeadsNumel(d));
  const int64_t T = d.T, HS = d.HS;
  float* qh = ctx.ScratchOf<float>(Context::kQ, n);
  float* kh = ctx.ScratchOf<float>(Context::kK, n);
  float* vh = ctx.ScratchOf<float>(Context::kV, n);
  float* oh = ctx.ScratchOf<float>(Context::kO, n);
  float* ds = ctx.ScratchOf<float>(Context::kScores, static_cast<size_t>(d.B * d.NH * T * T));
  if (ctx.out_of_memory) return;
  ToHeads(ctx.stream, qh, q, d, d.NH);
  ToHeads(ctx.stream, kh, k, d, d.NKV);
  ToHeads(ctx.stream, vh, v, d, d.NKV);
  ToHeads(ctx.stream, oh, dout, d, d.NH);
  // dP (T, T) = dO V^T  -> column-major dP^T = V'^T dO'
  Gemm(ctx, HeadGemm(d, true, false, T, T, HS, vh, HS, T * HS, oh, HS, T * HS, ds, T, T * T));
  SoftmaxBackwardKernel<<<Rows(d), kThreads, 0, ctx.stream>>>(
      ds, att, T, 1.0F / std::sqrt(static_cast<float>(HS)));
  MOTLEY_CUDA_LAUNCHED();
  // dV (T, HS) = P^T dO into vh (V is no longer needed)
  Gemm(ctx, HeadGemm(d, false, true, HS, T, T, oh, HS, T * HS, att, T, T * T, vh, HS, T * HS));
  // dQ (T, HS) = dS K into oh (dO is no longer needed)
  Gemm(ctx, HeadGemm(d, false, false, HS, T, T, kh, HS, T * HS, ds, T, T * T, oh, HS, T * HS));
  // dK (T, HS) = dS^T Q into kh (K is no longer needed)
  Gemm(ctx, HeadGemm(d, false, true, HS, T, T, qh, HS, T * HS, ds, T, T * T, kh, HS, T * HS));
  FromHeads(ctx.stream, dq, oh, d, d.NH, true);
  FromHeads(ctx.stream, dk, kh, d, d.NKV, true);
  FromHeads(ctx.stream, dv, vh, d, d.NKV, true);
}

}  // namespace motley::backend::cuda
