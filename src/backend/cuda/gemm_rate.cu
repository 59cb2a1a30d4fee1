// CudaBf16GemmTflops (cuda_backend.h): the bf16 cuBLAS GEMM rate of this GPU, measured, as the
// denominator a training step's achieved FLOP/s is compared with (besides the datasheet peak).
// One (n, n) x (n, n) cublasGemmEx in bf16 with fp32 accumulation and bf16 output (the fastest
// form a training engine would use), timed with CUDA events after warm-up calls.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace motley::backend {

// Declared in cuda_backend.h (not included: it pulls in fmt, which nvcc cannot compile).
double CudaBf16GemmTflops(int device, int64_t n, int iterations);

double CudaBf16GemmTflops(int device, int64_t n, int iterations) {
  if (cudaSetDevice(device) != cudaSuccess || n <= 0 || iterations <= 0) return -1.0;
  const size_t elems = static_cast<size_t>(n) * static_cast<size_t>(n);
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  cublasHandle_t blas = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  double tflops = -1.0;
  const float alpha = 1.0F, beta = 0.0F;
  const int ni = static_cast<int>(n);
  if (cudaMalloc(&a, elems * 2) == cudaSuccess && cudaMalloc(&b, elems * 2) == cudaSuccess &&
      cudaMalloc(&c, elems * 2) == cudaSuccess && cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS &&
      cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess &&
      cudaMemset(a, 0, elems * 2) == cudaSuccess && cudaMemset(b, 0, elems * 2) == cudaSuccess) {
    auto gemm = [&] {
      return cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, a, CUDA_R_16BF, ni, b,
                          CUDA_R_16BF, ni, &beta, c, CUDA_R_16BF, ni, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
    };
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) ok = gemm() == CUBLAS_STATUS_SUCCESS;  // warm-up
    ok = ok && cudaEventRecord(start) == cudaSuccess;
    for (int i = 0; i < iterations && ok; ++i) ok = gemm() == CUBLAS_STATUS_SUCCESS;
    ok = ok && cudaEventRecord(stop) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess;
    float ms = 0.0F;
    if (ok && cudaEventElapsedTime(&ms, start, stop) == cudaSuccess && ms > 0.0F) {
      const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) *
                           static_cast<double>(n) * iterations;
      tflops = flops / (static_cast<double>(ms) * 1e-3) / 1e12;
    }
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  if (blas != nullptr) cublasDestroy(blas);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return tflops;
}

}  // namespace motley::backend
