// CudaBackend: tensor::Backend (src/tensor/backend.h) on one NVIDIA GPU. Built only when CMake
// finds nvcc and the CUDA toolkit (MOTLEY_HAVE_CUDA); this header includes no CUDA header, so
// host-only code (tests, the trainer) can include it. Every op is checked against the CPU
// backend's double-precision reference by tests/backend/backend_ops_test.cc.
//
// Shape letters (llm.c): B batch, T sequence length, C channels, NH query heads, NKV key/value
// heads, HS head size, F SwiGLU width, V vocabulary, N = B*T rows, OC output channels.
//
// What runs where (and why kernels are hand-written):
// - Matmuls (MatmulForward/Backward and the four products inside attention) call cuBLAS
//   (cublasGemmStridedBatchedEx): they are the FLOPs, and cuBLAS is the fastest
//   GEMM there is on these parts.
// - Everything else is a small hand-written kernel (kernels.cu, attention.cu): these ops are
//   memory-bound, their fused forms (RMSNorm with its rstd, softmax cross-entropy with the ignore
//   rule, AdamW with grad_scale, gradients ACCUMULATED as the contract says) do not exist in any
//   library the toolkit ships (cuDNN is not part of it), and one pass over memory each is what
//   they cost anyway. Attention is llm.c's "cuBLAS + softmax kernel" form, because the Backend
//   contract saves the (B, NH, T, T) probabilities for the backward (a flash kernel would not).
//
// Precision (CudaBackendOptions::precision):
// - kFp32: everything in fp32; cuBLAS in CUBLAS_COMPUTE_32F (no TF32), so results agree with the
//   CPU backend to fp32 rounding.
// - kBf16: "bf16 compute, fp32 master weights": every tensor stays fp32 in memory (parameters,
//   gradients, AdamW moments, activations: the master copy), and every matmul rounds its two
//   operands to bf16 (a conversion kernel into scratch) and runs on the tensor cores with fp32
//   accumulation and an fp32 result (the bf16 matmul autocast of PyTorch). Non-matmul ops stay
//   fp32. Selected by CudaBackendOptions::precision; in the parallel trainer by
//   ParallelTrainerOptions::cuda_bf16.
//
// Streams and synchronisation: every op is enqueued on the backend's own stream and returns at
// once; CopyToHost, CopyFromHost, Sum and SumSquares synchronise that stream before returning,
// and Synchronize() waits for everything enqueued. Scratch buffers are reused in stream order.
// Memory: Empty/Zeros return cudaMalloc'd memory whose Device is {kCuda, device}, freed with
// cudaFree when the last Tensor goes away. Out of device memory (a failed cudaMalloc, in Empty or
// for an op's scratch) is not an abort: the backend records it (memory_status() returns
// kResourceExhausted naming the device and the bytes), the tensor gets no memory, and every later
// op returns without launching (reductions return NaN, CopyToHost writes zeros) until the owner
// checks memory_status() and gives up, as the parallel trainer does after building a stage and
// after every step.
// Ownership: tensors it creates share ownership with the caller; it owns its stream, cuBLAS handle
// and scratch. Thread safety: one instance is used by one thread (rank) at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace motley::backend {

namespace cuda {
struct Context;  // stream, cuBLAS handle, scratch (cuda_context.h)
}  // namespace cuda

// Number of CUDA devices visible to this process; 0 when the runtime reports an error (no driver,
// no GPU).
int CudaDeviceCount();

// Measured rate, in TFLOP/s, of a bf16 cuBLAS GEMM of (n, n) x (n, n) (fp32 accumulation, bf16
// output) on `device`, over `iterations` calls after 3 warm-up calls; negative on any CUDA error.
// Benchmarks compare a training step's FLOP/s with it (gemm_rate.cu).
double CudaBf16GemmTflops(int device, int64_t n = 8192, int iterations = 20);

enum class CudaPrecision : uint8_t { kFp32, kBf16 };
const char* CudaPrecisionName(CudaPrecision p);  // "fp32" | "bf16"

struct CudaBackendOptions {
  int device = 0;  // CUDA device index (cudaSetDevice)
  CudaPrecision precision = CudaPrecision::kFp32;
};

class CudaBackend final : public tensor::Backend {
 public:
  // Errors: no CUDA device, a device index out of range, or a failed stream / cuBLAS set-up.
  // Makes `options.device` the calling thread's current device.
  static Result<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  CudaPrecision precision() const { return options_.precision; }

  tensor::Device device() const override;
  std::string name() const override;

  // --- memory (cuda_backend.cc) ---
  tensor::Tensor Empty(tensor::Shape shape, tensor::DType dtype) override;
  tensor::Tensor Zeros(tensor::Shape shape, tensor::DType dtype) override;
  void SetZero(tensor::Tensor& t) override;
  void Fill(tensor::Tensor& t, float value) override;
  void CopyFromHost(tensor::Tensor& dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const tensor::Tensor& src, size_t bytes) override;
  void Copy(tensor::Tensor& dst, const tensor::Tensor& src) override;
  void Synchronize() override;
  Status memory_status() const override;

  // --- linear (cuda_ops.cc: cuBLAS through cuda::Gemm) ---
  // out (N, OC) = inp (N, C) @ weight (OC, C)^T
  void MatmulForward(tensor::Tensor& out, const tensor::Tensor& inp,
                     const tensor::Tensor& weight) override;
  // dinp (N, C) +=, dweight (OC, C) += ; either may be undefined to skip it
  void MatmulBackward(tensor::Tensor& dinp, tensor::Tensor& dweight, const tensor::Tensor& dout,
                      const tensor::Tensor& inp, const tensor::Tensor& weight) override;

  // --- embedding, RMSNorm, RoPE, SwiGLU, cross-entropy, elementwise, AdamW (cuda_ops.cc, which
  // checks shapes and launches the kernels of kernels.cu) ---
  // out (N, C) = wte (V, C) [tokens (N)]
  void EmbeddingForward(tensor::Tensor& out, const tensor::Tensor& tokens,
                        const tensor::Tensor& wte) override;
  // dwte (V, C) += scatter of dout (N, C)
  void EmbeddingBackward(tensor::Tensor& dwte, const tensor::Tensor& dout,
                         const tensor::Tensor& tokens) override;
  // out (N, C), rstd (N), inp (N, C), weight (C)
  void RmsNormForward(tensor::Tensor& out, tensor::Tensor& rstd, const tensor::Tensor& inp,
                      const tensor::Tensor& weight, float eps) override;
  // dinp (N, C) +=, dweight (C) +=
  void RmsNormBackward(tensor::Tensor& dinp, tensor::Tensor& dweight, const tensor::Tensor& dout,
                       const tensor::Tensor& inp, const tensor::Tensor& weight,
                       const tensor::Tensor& rstd) override;
  // out (B, T, H, HS) = rope(inp (B, T, H, HS)); out may alias inp
  void RopeForward(tensor::Tensor& out, const tensor::Tensor& inp, int64_t pos_offset,
                   float theta) override;
  // dinp (B, T, H, HS) += rope^-1(dout (B, T, H, HS))
  void RopeBackward(tensor::Tensor& dinp, const tensor::Tensor& dout, int64_t pos_offset,
                    float theta) override;
  // out (N, F) = silu(gate (N, F)) * up (N, F)
  void SwiGluForward(tensor::Tensor& out, const tensor::Tensor& gate,
                     const tensor::Tensor& up) override;
  // dgate (N, F) +=, dup (N, F) +=
  void SwiGluBackward(tensor::Tensor& dgate, tensor::Tensor& dup, const tensor::Tensor& dout,
                      const tensor::Tensor& gate, const tensor::Tensor& up) override;
  // losses (N) from logits (N, V) and targets (N) i32; targets < 0 are ignored (loss 0)
  void CrossEntropyForward(tensor::Tensor& losses, const tensor::Tensor& logits,
                           const tensor::Tensor& targets) override;
  // dlogits (N, V) += (softmax - onehot) * loss_scale on rows with a valid target
  void CrossEntropyBackward(tensor::Tensor& dlogits, const tensor::Tensor& logits,
                            const tensor::Tensor& targets, float loss_scale) override;
  void Add(tensor::Tensor& out, const tensor::Tensor& a, const tensor::Tensor& b) override;
  void AddInPlace(tensor::Tensor& a, const tensor::Tensor& b) override;
  void Scale(tensor::Tensor& a, float s) override;
  double SumSquares(const tensor::Tensor& a) override;
  double Sum(const tensor::Tensor& a) override;
  void AdamW(tensor::Tensor& param, const tensor::Tensor& grad, tensor::Tensor& m,
             tensor::Tensor& v, const tensor::AdamWParams& p) override;

  // --- attention (cuda_ops.cc -> attention.cu) ---
  // out (B, T, NH, HS), att (B, NH, T, T); q (B, T, NH, HS), k and v (B, T, NKV, HS)
  void AttentionForward(tensor::Tensor& out, tensor::Tensor& att, const tensor::Tensor& q,
                        const tensor::Tensor& k, const tensor::Tensor& v) override;
  // dq (B, T, NH, HS) +=, dk and dv (B, T, NKV, HS) +=
  void AttentionBackward(tensor::Tensor& dq, tensor::Tensor& dk, tensor::Tensor& dv,
                         const tensor::Tensor& dout, const tensor::Tensor& q,
                         const tensor::Tensor& k, const tensor::Tensor& v,
                         const tensor::Tensor& att) override;

 private:
  explicit CudaBackend(const CudaBackendOptions& options);

  CudaBackendOptions options_;
  std::unique_ptr<cuda::Context> ctx_;
};

}  // namespace motley::backend
