// cuda::Context (scratch, teardown), the error text of the check macros, and Gemm: every matmul
// of the backend goes through one cublasGemmStridedBatchedEx call, in fp32 (CUBLAS_COMPUTE_32F,
// pedantic math: no TF32) or with bf16 operands and fp32 accumulation and output.
#include <cuda_bf16.h>

#include <climits>
#include <cstdio>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_device.cuh"

namespace motley::backend::cuda {

const char* ErrorText(const char* expr, const char* message) {
  thread_local char buffer[512];
  std::snprintf(buffer, sizeof(buffer), "%s: %s", expr, message);
  return buffer;
}

Context::~Context() {
  cudaSetDevice(device);
  if (stream != nullptr) cudaStreamSynchronize(stream);
  for (void* p : scratch) {
    if (p != nullptr) cudaFree(p);
  }
  if (blas != nullptr) cublasDestroy(blas);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

void* Context::Malloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so later calls are not blamed
    if (!out_of_memory) {
      out_of_memory = true;
      failed_bytes = bytes;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        free_bytes = total_bytes = 0;
      }
    }
    return nullptr;
  }
  MOTLEY_CUDA_CHECK(err);
  return p;
}

void* Context::Scratch(Slot slot, size_t bytes) {
  const auto i = static_cast<size_t>(slot);
  if (scratch_bytes[i] < bytes) {
    if (scratch[i] != nullptr) {
      MOTLEY_CUDA_CHECK(cudaStreamSynchronize(stream));  // the old buffer may still be in use
      MOTLEY_CUDA_CHECK(cudaFree(scratch[i]));
    }
    scratch[i] = nullptr;
    scratch_bytes[i] = 0;
    scratch[i] = Malloc(bytes);
    if (scratch[i] == nullptr) return nullptr;
    scratch_bytes[i] = bytes;
  }
  return scratch[i];
}

namespace {

__global__ void ToBf16Kernel(__nv_bfloat16* out, const float* in, int64_t n) {
  MOTLEY_GRID_STRIDE(i, n) out[i] = __float2bfloat16_rn(in[i]);
}

// A bf16 copy of `count` floats in `slot`.
const __nv_bfloat16* ToBf16(Context& ctx, Context::Slot slot, const float* in, int64_t count) {
  auto* out = ctx.ScratchOf<__nv_bfloat16>(slot, static_cast<size_t>(count));
  if (out == nullptr) return nullptr;  // out of memory
  ToBf16Kernel<<<Blocks(count), kThreads, 0, ctx.stream>>>(out, in, count);
  MOTLEY_CUDA_LAUNCHED();
  return out;
}

int AsInt(int64_t v) {
  MOTLEY_CHECK(v >= 0 && v <= INT_MAX, "cuda Gemm: a dimension does not fit cuBLAS's int");
  return static_cast<int>(v);
}

}  // namespace

void Gemm(Context& ctx, const GemmArgs& g) {
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const void* a = g.a;
  const void* b = g.b;
  cudaDataType_t ab_type = CUDA_R_32F;
  if (ctx.bf16) {
    a = ToBf16(ctx, Context::kOperandA, g.a, g.a_count);
    b = ToBf16(ctx, Context::kOperandB, g.b, g.b_count);
    ab_type = CUDA_R_16BF;
    if (ctx.out_of_memory) return;
  }
  MOTLEY_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      ctx.blas, ta, tb, AsInt(g.m), AsInt(g.n), AsInt(g.k), &g.alpha, a, ab_type, AsInt(g.lda),
      g.stride_a, b, ab_type, AsInt(g.ldb), g.stride_b, &g.beta, g.c, CUDA_R_32F, AsInt(g.ldc),
      g.stride_c, AsInt(g.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace motley::backend::cuda
