// CpuBackend: the host implementation of tensor::Backend (src/tensor/backend.h), and the oracle
// every other backend is tested against. Matmuls call OpenBLAS cblas_sgemm; every other op is a
// plain, memory-friendly loop threaded with OpenMP, one file per op family (matmul.cc,
// attention.cc, ...).
//
// Shape letters (llm.c): B batch, T sequence length, C channels, NH query heads, NKV key/value
// heads, HS head size, F SwiGLU width, V vocabulary, N = B*T rows, OC output channels.
//
// Threads: each instance runs its OpenMP regions with its own `num_threads` (a `num_threads(n)`
// clause, no region at all when n == 1), so several ranks that are threads of one process can each
// use their own count. Results of every non-BLAS op are bitwise identical for any thread count:
// reductions use a fixed blocking that does not depend on the number of threads.
// BLAS threads are NOT set by the constructor: OpenBLAS's thread count is process-wide; call
// SetBlasThreads once per process (1 when ranks are threads of one process, docs/architecture.md
// §6). Idle libgomp workers spin after each region and OpenBLAS workers spin between calls, so the
// two pools compete for the same cores; on a loaded 2-core machine OMP_WAIT_POLICY=passive (set in
// the environment before start) ran a 2-thread block step faster than the default
// (docs/backend-cpu.md).
//
// Memory: Empty/Zeros return 64-byte-aligned host memory whose Device is {kCpu, index}.
// Ownership: tensors it creates share ownership with the caller; it keeps scratch buffers of its
// own. Thread safety: one instance is used by one thread (rank) at a time (it owns mutable
// scratch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace motley::backend {

// Sets OpenBLAS's thread count. PROCESS-WIDE: it changes the BLAS threads of every CpuBackend
// (every rank) in this process. n >= 1.
void SetBlasThreads(int n);
// OpenBLAS's current (process-wide) thread count.
int BlasThreads();

class CpuBackend final : public tensor::Backend {
 public:
  // num_threads: OpenMP threads this rank's non-BLAS ops use (>= 1). index: the device index.
  explicit CpuBackend(int num_threads = 1, int index = 0);

  int num_threads() const { return num_threads_; }

  tensor::Device device() const override;
  std::string name() const override;

  // --- memory ---
  tensor::Tensor Empty(tensor::Shape shape, tensor::DType dtype) override;
  tensor::Tensor Zeros(tensor::Shape shape, tensor::DType dtype) override;
  void SetZero(tensor::Tensor& t) override;
  void Fill(tensor::Tensor& t, float value) override;
  void CopyFromHost(tensor::Tensor& dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const tensor::Tensor& src, size_t bytes) override;
  void Copy(tensor::Tensor& dst, const tensor::Tensor& src) override;

  // --- linear (matmul.cc) ---
  // out (N, OC) = inp (N, C) @ weight (OC, C)^T
  void MatmulForward(tensor::Tensor& out, const tensor::Tensor& inp,
                     const tensor::Tensor& weight) override;
  // dinp (N, C) +=, dweight (OC, C) += ; either may be undefined to skip it
  void MatmulBackward(tensor::Tensor& dinp, tensor::Tensor& dweight, const tensor::Tensor& dout,
                      const tensor::Tensor& inp, const tensor::Tensor& weight) override;

  // --- embedding (embedding.cc) ---
  // out (N, C) = wte (V, C) [tokens (N)]
  void EmbeddingForward(tensor::Tensor& out, const tensor::Tensor& tokens,
                        const tensor::Tensor& wte) override;
  // dwte (V, C) += scatter of dout (N, C)
  void EmbeddingBackward(tensor::Tensor& dwte, const tensor::Tensor& dout,
                         const tensor::Tensor& tokens) override;

  // --- RMSNorm (norm.cc) ---
  // out (N, C), rstd (N), inp (N, C), weight (C)
  void RmsNormForward(tensor::Tensor& out, tensor::Tensor& rstd, const tensor::Tensor& inp,
                      const tensor::Tensor& weight, float eps) override;
  // dinp (N, C) +=, dweight (C) +=
  void RmsNormBackward(tensor::Tensor& dinp, tensor::Tensor& dweight, const tensor::Tensor& dout,
                       const tensor::Tensor& inp, const tensor::Tensor& weight,
                       const tensor::Tensor& rstd) override;

  // --- RoPE (rope.cc) ---
  // out (B, T, H, HS) = rope(inp (B, T, H, HS)); out may alias inp
  void RopeForward(tensor::Tensor& out, const tensor::Tensor& inp, int64_t pos_offset,
                   float theta) override;
  // dinp (B, T, H, HS) += rope^-1(dout (B, T, H, HS))
  void RopeBackward(tensor::Tensor& dinp, const tensor::Tensor& dout, int64_t pos_offset,
                    float theta) override;

  // --- attention (attention.cc) ---
  // out (B, T, NH, HS), att (B, NH, T, T); q (B, T, NH, HS), k and v (B, T, NKV, HS)
  void AttentionForward(tensor::Tensor& out, tensor::Tensor& att, const tensor::Tensor& q,
                        const tensor::Tensor& k, const tensor::Tensor& v) override;
  // dq (B, T, NH, HS) +=, dk and dv (B, T, NKV, HS) +=
  void AttentionBackward(tensor::Tensor& dq, tensor::Tensor& dk, tensor::Tensor& dv,
                         const tensor::Tensor& dout, const tensor::Tensor& q,
                         const tensor::Tensor& k, const tensor::Tensor& v,
                         const tensor::Tensor& att) override;

  // --- SwiGLU (swiglu.cc) ---
  // out (N, F) = silu(gate (N, F)) * up (N, F)
  void SwiGluForward(tensor::Tensor& out, const tensor::Tensor& gate,
                     const tensor::Tensor& up) override;
  // dgate (N, F) +=, dup (N, F) +=
  void SwiGluBackward(tensor::Tensor& dgate, tensor::Tensor& dup, const tensor::Tensor& dout,
                      const tensor::Tensor& gate, const tensor::Tensor& up) override;

  // --- cross-entropy (cross_entropy.cc) ---
  // losses (N) from logits (N, V) and targets (N) i32; targets < 0 are ignored (loss 0)
  void CrossEntropyForward(tensor::Tensor& losses, const tensor::Tensor& logits,
                           const tensor::Tensor& targets) override;
  // dlogits (N, V) += (softmax - onehot) * loss_scale on rows with a valid target
  void CrossEntropyBackward(tensor::Tensor& dlogits, const tensor::Tensor& logits,
                            const tensor::Tensor& targets, float loss_scale) override;

  // --- elementwise and reductions (elementwise.cc) ---
  void Add(tensor::Tensor& out, const tensor::Tensor& a, const tensor::Tensor& b) override;
  void AddInPlace(tensor::Tensor& a, const tensor::Tensor& b) override;
  void Scale(tensor::Tensor& a, float s) override;
  double SumSquares(const tensor::Tensor& a) override;
  double Sum(const tensor::Tensor& a) override;

  // --- optimizer (adamw.cc) ---
  void AdamW(tensor::Tensor& param, const tensor::Tensor& grad, tensor::Tensor& m,
             tensor::Tensor& v, const tensor::AdamWParams& p) override;

 private:
  // Sum (or sum of squares) in double over fixed blocks, the same for any thread count.
  template <bool kSquare>
  double Reduce(const tensor::Tensor& a);
  // Scratch of at least `floats` floats, reused across calls (grows, never shrinks).
  float* Scratch(size_t floats);
  // cos/sin table (T, HS/2) for RoPE, recomputed only when its key changes.
  void EnsureRopeTable(int64_t T, int64_t HS, int64_t pos_offset, float theta);

  int num_threads_;
  int index_;
  std::vector<float> scratch_;
  std::vector<double> partials_;
  std::vector<float> rope_cos_, rope_sin_;
  int64_t rope_T_ = -1, rope_HS_ = -1, rope_pos_ = -1;
  float rope_theta_ = 0.0F;
};

}  // namespace motley::backend
