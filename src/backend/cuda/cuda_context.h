// The CUDA state of one CudaBackend (stream, cuBLAS handle, scratch slots, RoPE table cache), the
// error-check macros, the Gemm helper every matmul goes through, and the launchers of the
// hand-written kernels (kernels.cu, attention.cu). Internal to src/backend/cuda.
//
// Why this split: the launchers take raw device pointers and are compiled by nvcc; the Backend
// glue (shape checks, Tensor handling, Result) lives in .cc files compiled by g++, because fmt
// (core/status.h) does not compile under nvcc in C++20 mode. This header includes neither fmt nor
// tensor.h, only the CUDA headers and core/check.h.
//
// Shape letters as in cuda_backend.h. Every launcher enqueues on `stream` and returns at once.
// Thread safety: a Context is used by one thread at a time (its backend's rank).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/check.h"

// A failing CUDA or cuBLAS call inside an op is a broken contract (bad pointer, launch failure,
// device lost, out of memory inside an op): abort with file:line and the library's message, as
// MOTLEY_CHECK does.
#define MOTLEY_CUDA_CHECK(expr)                                                                    \
  do {                                                                                             \
    const cudaError_t motley_cuda_err_ = (expr);                                                   \
    MOTLEY_CHECK(motley_cuda_err_ == cudaSuccess,                                                  \
                 ::motley::backend::cuda::ErrorText(#expr, cudaGetErrorString(motley_cuda_err_))); \
  } while (0)
#define MOTLEY_CUBLAS_CHECK(expr)                                                            \
  do {                                                                                       \
    const cublasStatus_t motley_blas_err_ = (expr);                                          \
    MOTLEY_CHECK(                                                                            \
        motley_blas_err_ == CUBLAS_STATUS_SUCCESS,                                           \
        ::motley::backend::cuda::ErrorText(#expr, cublasGetStatusString(motley_blas_err_))); \
  } while (0)

namespace motley::backend::cuda {

// "expr: message" in a thread-local buffer (for MOTLEY_CHECK's message).
const char* ErrorText(const char* expr, const char* message);

struct Context {
  // Scratch slots, each grown on demand and reused in stream order by one op at a time.
  enum Slot : int {
    kOperandA,   // bf16 copy of a GEMM's first operand
    kOperandB,   // bf16 copy of a GEMM's second operand
    kQ,          // attention: q as (B, NH, T, HS); backward: later dV
    kK,          // attention: k expanded to (B, NH, T, HS); backward: later dK per query head
    kV,          // attention: v expanded to (B, NH, T, HS); backward: later dV per query head
    kO,          // attention: out, or dout, as (B, NH, T, HS); backward: later dQ
    kScores,     // attention backward: dP, then dS (B, NH, T, T)
    kPartials,   // reductions: one double per block
    kRopeTable,  // RoPE: cos then sin, (T, HS/2) each
    kNumSlots
  };

  int device = 0;
  bool bf16 = false;  // matmul operands rounded to bf16 (cuda_backend.h, "Precision")
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  void* scratch[kNumSlots] = {};
  size_t scratch_bytes[kNumSlots] = {};
  // Key of the table held in kRopeTable.
  int64_t rope_T = -1, rope_HS = -1, rope_pos = -1;
  float rope_theta = 0.0F;

  Context() = default;
  ~Context();  // frees scratch, handle and stream (after the stream drained)
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Out of memory (sticky): the first failed cudaMalloc's request and the device's free and total
  // bytes at that moment. Once set, every op of the backend is a no-op (cuda_backend.h).
  bool out_of_memory = false;
  size_t failed_bytes = 0;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  // cudaMalloc that records an out-of-memory failure instead of aborting: nullptr then (and the
  // error is cleared); any other error is a broken contract (MOTLEY_CUDA_CHECK).
  void* Malloc(size_t bytes);

  // At least `bytes` of device memory in `slot` (contents undefined after growing); nullptr when
  // the device is out of memory (out_of_memory is set; the caller returns at once).
  void* Scratch(Slot slot, size_t bytes);
  template <typename T>
  T* ScratchOf(Slot slot, size_t count) {
    return static_cast<T*>(Scratch(slot, count * sizeof(T)));
  }
};

// Column-major GEMM over fp32 memory, as cuBLAS sees it, batched with strides:
// C_i (m, n; ldc) = alpha * op(A_i) op(B_i) + beta * C_i for i < batch, op transposing when asked.
// A spans a_count floats (all batches), B spans b_count. With ctx.bf16, A and B are first rounded
// to bf16 scratch copies and run on the tensor cores; C and the accumulation stay fp32.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0F, beta = 0.0F;
  const float* a = nullptr;
  int64_t lda = 0, stride_a = 0, a_count = 0;
  const float* b = nullptr;
  int64_t ldb = 0, stride_b = 0, b_count = 0;
  float* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
};
void Gemm(Context& ctx, const GemmArgs& g);

// --- kernels.cu (N rows of C channels)
// ------------------------------------------------------------
void Fill(cudaStream_t s, float* p, float value, int64_t n);
// out (N, C) = wte (V, C) [tokens (N)]
void EmbeddingForward(cudaStream_t s, float* out, const int32_t* tokens, const float* wte,
                      int64_t N, int64_t C);
// dwte (V, C) += scatter of dout (N, C) by tokens (N)
void EmbeddingBackward(cudaStream_t s, float* dwte, const float* dout, const int32_t* tokens,
                       int64_t N, int64_t C);
// out (N, C) = inp * rstd * weight (C); rstd (N)
void RmsNormForward(cudaStream_t s, float* out, float* rstd, const float* inp, const float* weight,
                    int64_t N, int64_t C, float eps);
// dinp (N, C) +=, dweight (C) +=
void RmsNormBackward(cudaStream_t s, float* dinp, float* dweight, const float* dout,
                     const float* inp, const float* weight, const float* rstd, int64_t N,
                     int64_t C);
// Forward: out (B, T, H, HS) = rope(inp) (out may alias inp); backward: out += rope^-1(inp).
// The cos/sin table comes from ctx (computed on the host in double, cached by its key).
void Rope(Context& ctx, float* out, const float* inp, int64_t B, int64_t T, int64_t H, int64_t HS,
          int64_t pos_offset, float theta, bool backward);
// out (n) = silu(gate) * up; dgate +=, dup +=
void SwiGluForward(cudaStream_t s, float* out, const float* gate, const float* up, int64_t n);
void SwiGluBackward(cudaStream_t s, float* dgate, float* dup, const float* dout, const float* gate,
                    const float* up, int64_t n);
// losses (N) from logits (N, V), targets (N) (< 0: ignored, loss 0)
void CrossEntropyForward(cudaStream_t s, float* losses, const float* logits, const int32_t* targets,
                         int64_t N, int64_t V);
// dlogits (N, V) += (softmax - onehot) * scale on rows with a valid target
void CrossEntropyBackward(cudaStream_t s, float* dlogits, const float* logits,
                          const int32_t* targets, int64_t N, int64_t V, float scale);
void Add(cudaStream_t s, float* out, const float* a, const float* b, int64_t n);
void AddInPlace(cudaStream_t s, float* a, const float* b, int64_t n);
void Scale(cudaStream_t s, float* a, float factor, int64_t n);
// sum (of squares when `square`) of a (n) in double; synchronises the stream. Deterministic:
// a fixed grid for a given n, block partials added on the host in block order.
double Reduce(Context& ctx, const float* a, int64_t n, bool square);
struct AdamWArgs {
  float lr, b1, b2, eps, wd, grad_scale, mcorr, vcorr;  // mcorr = 1 / (1 - b1^t), vcorr alike
};
void AdamW(cudaStream_t s, float* param, const float* grad, float* m, float* v, const AdamWArgs& a,
           int64_t n);

// --- attention.cu
// ---------------------------------------------------------------------------------
struct AttentionDims {
  int64_t B, T, NH, NKV, HS;
};
// out (B, T, NH, HS), att (B, NH, T, T) from q (B, T, NH, HS), k, v (B, T, NKV, HS)
void AttentionForward(Context& ctx, float* out, float* att, const float* q, const float* k,
                      const float* v, const AttentionDims& d);
// dq (B, T, NH, HS) +=, dk, dv (B, T, NKV, HS) +=
void AttentionBackward(Context& ctx, float* dq, float* dk, float* dv, const float* dout,
                       const float* q, const float* k, const float* v, const float* att,
                       const AttentionDims& d);

}  // namespace motley::backend::cuda
