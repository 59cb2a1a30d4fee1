// The hand-written kernels of the CUDA backend (why hand-written: cuda_backend.h) and their
// launchers (declared in cuda_context.h): embedding, RMSNorm, RoPE, SwiGLU, softmax cross-entropy,
// elementwise ops, reductions and AdamW. Each is one pass over memory; row ops run one block per
// row with block reductions (cuda_device.cuh). Gradients are ACCUMULATED (+=) as the Backend
// contract says; scatters (embedding, RMSNorm's weight gradient) use float atomics, so their
// summation order is not fixed.
// Shapes: N rows of C channels; tokens, targets (N) i32; logits (N, V); rope (B, T, H, HS).
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_device.cuh"

namespace motley::backend::cuda {

namespace {

__global__ void FillKernel(float* p, float value, int64_t n) {
  MOTLEY_GRID_STRIDE(i, n) p[i] = value;
}

// out (N, C) = wte (V, C) [tokens (N)]
__global__ void EmbeddingForwardKernel(float* out, const int32_t* tokens, const float* wte,
                                       int64_t N, int64_t C) {
  MOTLEY_GRID_STRIDE(i, N * C) {
    const int64_t n = i / C, c = i % C;
    out[i] = wte[static_cast<int64_t>(tokens[n]) * C + c];
  }
}

// dwte (V, C) += scatter of dout (N, C)
__global__ void EmbeddingBackwardKernel(float* dwte, const float* dout, const int32_t* tokens,
                                        int64_t N, int64_t C) {
  MOTLEY_GRID_STRIDE(i, N * C) {
    const int64_t n = i / C, c = i % C;
    atomicAdd(dwte + static_cast<int64_t>(tokens[n]) * C + c, dout[i]);
  }
}

// One block per row: rstd (N) = 1/sqrt(mean(x^2) + eps); out (N, C) = x * rstd * w (C).
__global__ void RmsNormForwardKernel(float* out, float* rstd, const float* inp, const float* w,
                                     int64_t C, float eps) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  float ss = 0.0F;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
  ss = BlockSum(ss, shared);
  const float r = rsqrtf(ss / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  float* o = out + row * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = x[c] * r * w[c];
}

// One block per row: dinp += g w r - x r^3 / C * sum(g w x)  (reference_ops.cc derives it).
__global__ void RmsNormBackwardInputKernel(float* dinp, const float* dout, const float* inp,
                                           const float* w, const float* rstd, int64_t C) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  const float* g = dout + row * C;
  float dot = 0.0F;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += g[c] * w[c] * x[c];
  dot = BlockSum(dot, shared);
  const float r = rstd[row];
  const float k = r * r * r / static_cast<float>(C) * dot;
  float* d = dinp + row * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) d[c] += g[c] * w[c] * r - x[c] * k;
}

// dweight (C) += sum over rows of g x r: each thread one column over a chunk of rows.
constexpr int64_t kRowsPerChunk = 256;
__global__ void RmsNormBackwardWeightKernel(float* dweight, const float* dout, const float* inp,
                                            const float* rstd, int64_t N, int64_t C) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t n0 = blockIdx.y * kRowsPerChunk;
  const int64_t n1 = n0 + kRowsPerChunk < N ? n0 + kRowsPerChunk : N;
  float s = 0.0F;
  for (int64_t n = n0; n < n1; ++n) s += dout[n * C + c] * inp[n * C + c] * rstd[n];
  atomicAdd(dweight + c, s);
}

// out (B, T, H, HS) = rope(inp); table: cos (T, HS/2) then sin (T, HS/2). out may alias inp:
// each thread reads its pair before writing it.
__global__ void RopeKernel(float* out, const float* inp, const float* table, int64_t total_pairs,
                           int64_t T, int64_t H, int64_t HS, bool backward) {
  const int64_t half = HS / 2;
  MOTLEY_GRID_STRIDE(p, total_pairs) {
    const int64_t i = p % half;
    const int64_t row = p / half;  // (b, t, h)
    const int64_t t = (row / H) % T;
    const float c = table[t * half + i], s = table[T * half + t * half + i];
    const int64_t base = row * HS;
    const float x1 = inp[base + i], x2 = inp[base + i + half];
    if (!backward) {
      out[base + i] = x1 * c - x2 * s;
      out[base + i + half] = x2 * c + x1 * s;
    } else {  // dinp += rotation by -angle
      out[base + i] += x1 * c + x2 * s;
      out[base + i + half] += x2 * c - x1 * s;
    }
  }
}

__global__ void SwiGluForwardKernel(float* out, const float* gate, const float* up, int64_t n) {
  MOTLEY_GRID_STRIDE(i, n) {
    const float g = gate[i];
    out[i] = g / (1.0F + expf(-g)) * up[i];
  }
}

__global__ void SwiGluBackwardKernel(float* dgate, float* dup, const float* dout, const float* gate,
                                     const float* up, int64_t n) {
  MOTLEY_GRID_STRIDE(i, n) {
    const float g = gate[i];
    const float s = 1.0F / (1.0F + expf(-g));
    dgate[i] += dout[i] * up[i] * (s + g * s * (1.0F - s));
    dup[i] += dout[i] * g * s;
  }
}

// One block per row: the row's max and sum of exp(x - max).
__device__ void SoftmaxStats(const float* x, int64_t V, float* shared, float& mx, float& sum) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, x[j]);
  mx = BlockMax(m, shared);
  float s = 0.0F;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(x[j] - mx);
  sum = BlockSum(s, shared);
}

// losses (N) = log(sum exp) + max - x[target]; 0 where target < 0.
__global__ void CrossEntropyForwardKernel(float* losses, const float* logits,
                                          const int32_t* targets, int64_t V) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const int32_t tg = targets[row];
  if (tg < 0) {
    if (threadIdx.x == 0) losses[row] = 0.0F;
    return;
  }
  const float* x = logits + row * V;
  float mx = 0.0F, sum = 0.0F;
  SoftmaxStats(x, V, shared, mx, sum);
  if (threadIdx.x == 0) losses[row] = logf(sum) + mx - x[tg];
}

// dlogits (N, V) += (softmax - onehot) * scale on rows with a valid target.
__global__ void CrossEntropyBackwardKernel(float* dlogits, const float* logits,
                                           const int32_t* targets, int64_t V, float scale) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const int32_t tg = targets[row];
  if (tg < 0) return;
  const float* x = logits + row * V;
  float mx = 0.0F, sum = 0.0F;
  SoftmaxStats(x, V, shared, mx, sum);
  const float inv = 1.0F / sum;
  float* d = dlogits + row * V;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float p = expf(x[j] - mx) * inv;
    d[j] += (p - (j == tg ? 1.0F : 0.0F)) * scale;
  }
}

__global__ void AddKernel(float* out, const float* a, const float* b, int64_t n) {
  MOTLEY_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
__global__ void AddInPlaceKernel(float* a, const float* b, int64_t n) {
  MOTLEY_GRID_STRIDE(i, n) a[i] += b[i];
}
__global__ void ScaleKernel(float* a, float s, int64_t n) {
  MOTLEY_GRID_STRIDE(i, n) a[i] *= s;
}

// partials[block] = sum (of squares) of the block's grid-stride share, in double.
template <bool kSquare>
__global__ void ReduceKernel(double* partials, const float* a, int64_t n) {
  __shared__ double shared[32];
  double s = 0.0;
  MOTLEY_GRID_STRIDE(i, n) {
    const auto x = static_cast<double>(a[i]);
    s += kSquare ? x * x : x;
  }
  s = BlockSum(s, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void AdamWKernel(float* w, const float* grad, float* m, float* v, AdamWArgs a,
                            int64_t n) {
  MOTLEY_GRID_STRIDE(i, n) {
    const float g = grad[i] * a.grad_scale;
    const float mi = a.b1 * m[i] + (1.0F - a.b1) * g;
    const float vi = a.b2 * v[i] + (1.0F - a.b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    w[i] -= a.lr * (mi * a.mcorr / (sqrtf(vi * a.vcorr) + a.eps) + a.wd * w[i]);
  }
}

}  // namespace

void Fill(cudaStream_t s, float* p, float value, int64_t n) {
  FillKernel<<<Blocks(n), kThreads, 0, s>>>(p, value, n);
  MOTLEY_CUDA_LAUNCHED();
}

void EmbeddingForward(cudaStream_t s, float* out, const int32_t* tokens, const float* wte,
                      int64_t N, int64_t C) {
  EmbeddingForwardKernel<<<Blocks(N * C), kThreads, 0, s>>>(out, tokens, wte, N, C);
  MOTLEY_CUDA_LAUNCHED();
}

void EmbeddingBackward(cudaStream_t s, float* dwte, const float* dout, const int32_t* tokens,
                       int64_t N, int64_t C) {
  EmbeddingBackwardKernel<<<Blocks(N * C), kThreads, 0, s>>>(dwte, dout, tokens, N, C);
  MOTLEY_CUDA_LAUNCHED();
}

void RmsNormForward(cudaStream_t s, float* out, float* rstd, const float* inp, const float* weight,
                    int64_t N, int64_t C, float eps) {
  if (N == 0) return;
  RmsNormForwardKernel<<<RowBlocks(N), kThreads, 0, s>>>(out, rstd, inp, weight, C, eps);
  MOTLEY_CUDA_LAUNCHED();
}

void RmsNormBackward(cudaStream_t s, float* dinp, float* dweight, const float* dout,
                     const float* inp, const float* weight, const float* rstd, int64_t N,
                     int64_t C) {
  if (N == 0) return;
  RmsNormBackwardInputKernel<<<RowBlocks(N), kThreads, 0, s>>>(dinp, dout, inp, weight, rstd, C);
  MOTLEY_CUDA_LAUNCHED();
  const dim3 grid(Blocks(C), RowBlocks((N + kRowsPerChunk - 1) / kRowsPerChunk));
  RmsNormBackwardWeightKernel<<<grid, kThreads, 0, s>>>(dweight, dout, inp, rstd, N, C);
  MOTLEY_CUDA_LAUNCHED();
}

namespace {
// The cos/sin table (T, HS/2) each, angles in double rounded once to float (as the CPU backend
// does), uploaded when its key changes. Returns the device table.
const float* RopeTable(Context& ctx, int64_t T, int64_t HS, int64_t pos_offset, float theta) {
  const int64_t half = HS / 2;
  auto* table = ctx.ScratchOf<float>(Context::kRopeTable, static_cast<size_t>(2 * T * half));
  if (table == nullptr) return nullptr;  // out of memory
  if (T == ctx.rope_T && HS == ctx.rope_HS && pos_offset == ctx.rope_pos &&
      theta == ctx.rope_theta) {
    return table;
  }
  std::vector<float> host(static_cast<size_t>(2 * T * half));
  for (int64_t i = 0; i < half; ++i) {
    const double freq = std::pow(static_cast<double>(theta),
                                 -2.0 * static_cast<double>(i) / static_cast<double>(HS));
    for (int64_t t = 0; t < T; ++t) {
      const double angle = static_cast<double>(pos_offset + t) * freq;
      host[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(angle));
      host[static_cast<size_t>(T * half + t * half + i)] = static_cast<float>(std::sin(angle));
    }
  }
  MOTLEY_CUDA_CHECK(cudaMemcpyAsync(table, host.data(), host.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, ctx.stream));
  MOTLEY_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // `host` goes out of scope
  ctx.rope_T = T;
  ctx.rope_HS = HS;
  ctx.rope_pos = pos_offset;
  ctx.rope_theta = theta;
  return table;
}
}  // namespace

void Rope(Context& ctx, float* out, const float* inp, int64_t B, int64_t T, int64_t H, int64_t HS,
          int64_t pos_offset, float theta, bool backward) {
  const float* table = RopeTable(ctx, T, HS, pos_offset, theta);
  if (table == nullptr) return;  // out of memory
  const int64_t pairs = B * T * H * (HS / 2);
  RopeKernel<<<Blocks(pairs), kThreads, 0, ctx.stream>>>(out, inp, table, pairs, T, H, HS,
                                                         backward);
  MOTLEY_CUDA_LAUNCHED();
}

void SwiGluForward(cudaStream_t s, float* out, const float* gate, const float* up, int64_t n) {
  SwiGluForwardKernel<<<Blocks(n), kThreads, 0, s>>>(out, gate, up, n);
  MOTLEY_CUDA_LAUNCHED();
}

void SwiGluBackward(cudaStream_t s, float* dgate, float* dup, const float* dout, const float* gate,
                    const float* up, int64_t n) {
  SwiGluBackwardKernel<<<Blocks(n), kThreads, 0, s>>>(dgate, dup, dout, gate, up, n);
  MOTLEY_CUDA_LAUNCHED();
}

// 512 threads per row: vocabularies are tens of thousands wide.
void CrossEntropyForward(cudaStream_t s, float* losses, const float* logits, const int32_t* targets,
                         int64_t N, int64_t V) {
  if (N == 0) return;
  CrossEntropyForwardKernel<<<RowBlocks(N), 2 * kThreads, 0, s>>>(losses, logits, targets, V);
  MOTLEY_CUDA_LAUNCHED();
}

void CrossEntropyBackward(cudaStream_t s, float* dlogits, const float* logits,
                          const int32_t* targets, int64_t N, int64_t V, float scale) {
  if (N == 0) return;
  CrossEntropyBackwardKernel<<<RowBlocks(N), 2 * kThreads, 0, s>>>(dlogits, logits, targets, V,
                                                                   scale);
  MOTLEY_CUDA_LAUNCHED();
}

void Add(cudaStream_t s, float* out, const float* a, const float* b, int64_t n) {
  AddKernel<<<Blocks(n), kThreads, 0, s>>>(out, a, b, n);
  MOTLEY_CUDA_LAUNCHED();
}

void AddInPlace(cudaStream_t s, float* a, const float* b, int64_t n) {
  AddInPlaceKernel<<<Blocks(n), kThreads, 0, s>>>(a, b, n);
  MOTLEY_CUDA_LAUNCHED();
}

void Scale(cudaStream_t s, float* a, float factor, int64_t n) {
  ScaleKernel<<<Blocks(n), kThreads, 0, s>>>(a, factor, n);
  MOTLEY_CUDA_LAUNCHED();
}

double Reduce(Context& ctx, const float* a, int64_t n, bool square) {
  constexpr unsigned int kMaxBlocks = 1024;
  const unsigned int blocks = Blocks(n) < kMaxBlocks ? Blocks(n) : kMaxBlocks;
  auto* partials = ctx.ScratchOf<double>(Context::kPartials, blocks);
  if (partials == nullptr) return std::nan("");  // out of memory
  if (square) {
    ReduceKernel<true><<<blocks, kThreads, 0, ctx.stream>>>(partials, a, n);
  } else {
    ReduceKernel<false><<<blocks, kThreads, 0, ctx.stream>>>(partials, a, n);
  }
  MOTLEY_CUDA_LAUNCHED();
  std::vector<double> host(blocks);
  MOTLEY_CUDA_CHECK(cudaMemcpyAsync(host.data(), partials, blocks * sizeof(double),
                                    cudaMemcpyDeviceToHost, ctx.stream));
  MOTLEY_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  double sum = 0.0;
  for (double x : host) sum += x;
  return sum;
}

void AdamW(cudaStream_t s, float* param, const float* grad, float* m, float* v, const AdamWArgs& a,
           int64_t n) {
  AdamWKernel<<<Blocks(n), kThreads, 0, s>>>(param, grad, m, v, a, n);
  MOTLEY_CUDA_LAUNCHED();
}

}  // namespace motley::backend::cuda
