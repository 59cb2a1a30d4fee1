// Backend: the op set a Llama-style decoder needs, as forward/backward pairs, on one device.
// Implementations: backend/cpu (the oracle), later backend/cuda and backend/emulated.
//
// Shape letters (llm.c): B batch, T sequence length, C channels (hidden), NH query heads,
// NKV key/value heads, HS head size (C = NH*HS), F SwiGLU width, V vocabulary, N = B*T rows.
//
// Contract for every op:
// - All tensors live on this backend's device; dtype is f32 unless stated (tokens are i32).
// - Outputs named `out` are overwritten. Gradients named `d...` are ACCUMULATED (+=), for both
//   parameters and activations, as in llm.c: the caller zeroes them when a new sum starts. This is
//   what lets micro-batches accumulate parameter gradients and residual branches sum their inputs'
//   gradients without extra adds.
// - Inputs and outputs of one call never alias unless the op says so.
// - Ownership: a Backend owns nothing the caller passes; tensors it creates (Empty/Zeros) share
//   ownership with the caller.
// Thread safety: one Backend instance is used by one rank (thread) at a time. Ops are blocking
//   (or stream-ordered with Synchronize() as the barrier, on devices with streams).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "tensor/tensor.h"

namespace motley::tensor {

struct AdamWParams {
  float lr = 3e-4F;
  float beta1 = 0.9F;
  float beta2 = 0.95F;
  float eps = 1e-8F;
  float weight_decay = 0.0F;
  int64_t step = 1;  // 1-based, for bias correction
  // The gradient is read as grad * grad_scale (the gradient-clipping factor, model::ClipScale),
  // so clipping needs no separate pass over the gradients; grad itself is left unchanged.
  float grad_scale = 1.0F;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;

  // --- memory ---------------------------------------------------------------------------------
  virtual Tensor Empty(Shape shape, DType dtype) = 0;  // contents undefined
  virtual Tensor Zeros(Shape shape, DType dtype) = 0;
  virtual void SetZero(Tensor& t) = 0;
  virtual void Fill(Tensor& t, float value) = 0;
  // Byte copies between host memory and a tensor of this device (sizes must match t.bytes()).
  virtual void CopyFromHost(Tensor& dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const Tensor& src, size_t bytes) = 0;
  // dst = src (same shape and dtype, both on this device).
  virtual void Copy(Tensor& dst, const Tensor& src) = 0;
  virtual void Synchronize() {}
  // Ok, or the first out-of-memory error of this device (sticky; kResourceExhausted, naming the
  // device and the bytes). A backend that ran out of memory leaves the failed tensor without
  // memory and makes every later op a no-op, so the caller reaches its next check of this
  // status instead of aborting (the emulated and CUDA backends; the CPU backend never sets it).
  virtual Status memory_status() const { return Status::Ok(); }

  // --- linear ---------------------------------------------------------------------------------
  // out (N, OC) = inp (N, C) @ weight (OC, C)^T      [weights stored (out, in) as in HF/torch]
  virtual void MatmulForward(Tensor& out, const Tensor& inp, const Tensor& weight) = 0;
  // dinp (N, C) += dout (N, OC) @ weight (OC, C);  dweight (OC, C) += dout^T @ inp.
  // Either gradient may be undefined (Tensor{}) to skip it.
  virtual void MatmulBackward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                              const Tensor& weight) = 0;

  // --- embedding ------------------------------------------------------------------------------
  // out (N, C) = wte (V, C) [tokens (N) i32]
  virtual void EmbeddingForward(Tensor& out, const Tensor& tokens, const Tensor& wte) = 0;
  // dwte (V, C) += scatter of dout (N, C) by tokens (N)
  virtual void EmbeddingBackward(Tensor& dwte, const Tensor& dout, const Tensor& tokens) = 0;

  // --- RMSNorm --------------------------------------------------------------------------------
  // out (N, C) = inp * rstd * weight, rstd (N) = 1 / sqrt(mean(inp^2) + eps) (saved for backward)
  virtual void RmsNormForward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                              float eps) = 0;
  // dinp (N, C) +=, dweight (C) +=
  virtual void RmsNormBackward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                               const Tensor& weight, const Tensor& rstd) = 0;

  // --- RoPE (Hugging Face Llama layout: pairs (i, i + HS/2), rotate_half) ------------------------
  // out (B, T, H, HS) = rope(inp (B, T, H, HS)); position of token t is pos_offset + t;
  // frequency i is theta^(-2i/HS). H is NH for queries, NKV for keys. out may alias inp.
  virtual void RopeForward(Tensor& out, const Tensor& inp, int64_t pos_offset, float theta) = 0;
  // dinp (B, T, H, HS) += rope^-1(dout)
  virtual void RopeBackward(Tensor& dinp, const Tensor& dout, int64_t pos_offset,
                            float theta) = 0;

  // --- causal self-attention with grouped-query heads -------------------------------------------
  // q (B, T, NH, HS), k and v (B, T, NKV, HS), NH % NKV == 0 (query head h uses kv head
  // h / (NH/NKV)). out (B, T, NH, HS); att (B, NH, T, T) holds the softmax probabilities (saved for
  // backward; entries above the diagonal are zero). Scale 1/sqrt(HS).
  virtual void AttentionForward(Tensor& out, Tensor& att, const Tensor& q, const Tensor& k,
                                const Tensor& v) = 0;
  // dq (B, T, NH, HS) +=, dk and dv (B, T, NKV, HS) +=
  virtual void AttentionBackward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                 const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& att) = 0;

  // --- SwiGLU ---------------------------------------------------------------------------------
  // out (N, F) = silu(gate (N, F)) * up (N, F)
  virtual void SwiGluForward(Tensor& out, const Tensor& gate, const Tensor& up) = 0;
  // dgate (N, F) +=, dup (N, F) +=
  virtual void SwiGluBackward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate,
                              const Tensor& up) = 0;

  // --- softmax cross-entropy ------------------------------------------------------------------
  // losses (N) = -log softmax(logits (N, V))[targets (N) i32]. A target < 0 is ignored (loss 0).
  virtual void CrossEntropyForward(Tensor& losses, const Tensor& logits,
                                   const Tensor& targets) = 0;
  // dlogits (N, V) += (softmax(logits) - onehot(target)) * loss_scale for each row with a valid
  // target (loss_scale is 1 / tokens in the global batch, docs/architecture.md §4).
  virtual void CrossEntropyBackward(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                    float loss_scale) = 0;

  // --- elementwise and reductions -------------------------------------------------------------
  virtual void Add(Tensor& out, const Tensor& a, const Tensor& b) = 0;  // out = a + b
  virtual void AddInPlace(Tensor& a, const Tensor& b) = 0;              // a += b
  virtual void Scale(Tensor& a, float s) = 0;                           // a *= s
  virtual double SumSquares(const Tensor& a) = 0;                       // sum a^2, in double
  virtual double Sum(const Tensor& a) = 0;                              // sum a, in double

  // --- optimizer ------------------------------------------------------------------------------
  // AdamW (decoupled weight decay, Loshchilov & Hutter) on param, grad, m, v of equal shape,
  // with g = grad * p.grad_scale (grad is not modified):
  // m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; mh = m/(1-b1^t); vh = v/(1-b2^t);
  // param -= lr * (mh / (sqrt(vh) + eps) + wd * param).
  virtual void AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                     const AdamWParams& p) = 0;
};

}  // namespace motley::tensor
