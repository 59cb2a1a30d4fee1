// The ops of CudaBackend: shape and device checks (as the CPU backend makes them), then cuBLAS
// through cuda::Gemm for the matmuls and the kernel launchers of kernels.cu and attention.cu for
// the rest. Matmul layouts: weights are stored (OC, C) row-major as in HF/torch; cuBLAS is
// column-major, so a row-major (R, S) matrix is a column-major (S, R) one and every product is
// written transposed (llm.c's formulation).
// Shapes: inp, dinp (N, C); weight, dweight (OC, C); out, dout (N, OC); others as in the header.
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_context.h"

namespace motley::backend {

using tensor::DeviceKind;
using tensor::DType;
using tensor::Tensor;

namespace {

float* F32(const Tensor& t, const char* what) {
  MOTLEY_CHECK(t.defined() && t.dtype() == DType::kF32 && t.device().kind == DeviceKind::kCuda,
               what);
  return static_cast<float*>(t.raw());
}

const int32_t* I32(const Tensor& t, const char* what) {
  MOTLEY_CHECK(t.defined() && t.dtype() == DType::kI32 && t.device().kind == DeviceKind::kCuda,
               what);
  return static_cast<const int32_t*>(t.raw());
}

int64_t LastDim(const Tensor& t) {
  MOTLEY_CHECK(t.shape().rank() >= 1 && t.dim(t.shape().rank() - 1) > 0,
               "cuda op: tensor needs a non-empty last dimension");
  return t.dim(t.shape().rank() - 1);
}

}  // namespace

void CudaBackend::Fill(Tensor& t, float value) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  cuda::Fill(ctx_->stream, F32(t, "Fill: t must be a cuda f32 tensor"), value, t.numel());
}

// out (N, OC) = inp (N, C) @ weight (OC, C)^T; column-major: out^T (OC, N) = W'^T inp'.
void CudaBackend::MatmulForward(Tensor& out, const Tensor& inp, const Tensor& weight) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  MOTLEY_CHECK(weight.shape().rank() == 2, "MatmulForward: weight must be (OC, C)");
  const int64_t OC = weight.dim(0), C = weight.dim(1);
  MOTLEY_CHECK(C > 0 && inp.numel() % C == 0, "MatmulForward: inp's last dimension must be C");
  const int64_t N = inp.numel() / C;
  MOTLEY_CHECK(out.numel() == N * OC, "MatmulForward: out must be (N, OC)");
  cuda::GemmArgs g;
  g.trans_a = true;
  g.m = OC;
  g.n = N;
  g.k = C;
  g.a = F32(weight, "MatmulForward: weight");
  g.lda = C;
  g.a_count = OC * C;
  g.b = F32(inp, "MatmulForward: inp");
  g.ldb = C;
  g.b_count = N * C;
  g.c = F32(out, "MatmulForward: out");
  g.ldc = OC;
  cuda::Gemm(*ctx_, g);
}

// dinp (N, C) += dout (N, OC) @ weight (OC, C); dweight (OC, C) += dout^T @ inp.
void CudaBackend::MatmulBackward(Tensor& dinp, Tensor& dweight, const Tensor& dout,
                                 const Tensor& inp, const Tensor& weight) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  MOTLEY_CHECK(weight.shape().rank() == 2, "MatmulBackward: weight must be (OC, C)");
  const int64_t OC = weight.dim(0), C = weight.dim(1);
  MOTLEY_CHECK(C > 0, "MatmulBackward: C must be positive");
  const int64_t N = inp.numel() / C;
  MOTLEY_CHECK(inp.numel() == N * C && dout.numel() == N * OC,
               "MatmulBackward: inp (N, C) and dout (N, OC) disagree");
  const float* dout_p = F32(dout, "MatmulBackward: dout");
  if (dinp.defined()) {
    MOTLEY_CHECK(dinp.numel() == N * C, "MatmulBackward: dinp must be (N, C)");
    cuda::GemmArgs g;  // column-major dinp^T (C, N) += W' (C, OC) dout^T (OC, N)
    g.m = C;
    g.n = N;
    g.k = OC;
    g.beta = 1.0F;
    g.a = F32(weight, "MatmulBackward: weight");
    g.lda = C;
    g.a_count = OC * C;
    g.b = dout_p;
    g.ldb = OC;
    g.b_count = N * OC;
    g.c = F32(dinp, "MatmulBackward: dinp");
    g.ldc = C;
    cuda::Gemm(*ctx_, g);
  }
  if (dweight.defined()) {
    MOTLEY_CHECK(dweight.shape() == weight.shape(), "MatmulBackward: dweight must be (OC, C)");
    cuda::GemmArgs g;  // column-major dW^T (C, OC) += inp^T (C, N) dout (N, OC)
    g.trans_b = true;
    g.m = C;
    g.n = OC;
    g.k = N;
    g.beta = 1.0F;
    g.a = F32(inp, "MatmulBackward: inp");
    g.lda = C;
    g.a_count = N * C;
    g.b = dout_p;
    g.ldb = OC;
    g.b_count = N * OC;
    g.c = F32(dweight, "MatmulBackward: dweight");
    g.ldc = C;
    cuda::Gemm(*ctx_, g);
  }
}

void CudaBackend::EmbeddingForward(Tensor& out, const Tensor& tokens, const Tensor& wte) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const int64_t C = LastDim(wte), N = tokens.numel();
  MOTLEY_CHECK(out.numel() == N * C, "EmbeddingForward: out must be (N, C)");
  cuda::EmbeddingForward(ctx_->stream, F32(out, "EmbeddingForward: out"),
                         I32(tokens, "EmbeddingForward: tokens"), F32(wte, "EmbeddingForward: wte"),
                         N, C);
}

void CudaBackend::EmbeddingBackward(Tensor& dwte, const Tensor& dout, const Tensor& tokens) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const int64_t C = LastDim(dwte), N = tokens.numel();
  MOTLEY_CHECK(dout.numel() == N * C, "EmbeddingBackward: dout must be (N, C)");
  cuda::EmbeddingBackward(ctx_->stream, F32(dwte, "EmbeddingBackward: dwte"),
                          F32(dout, "EmbeddingBackward: dout"),
                          I32(tokens, "EmbeddingBackward: tokens"), N, C);
}

void CudaBackend::RmsNormForward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                 float eps) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const int64_t C = LastDim(inp), N = inp.numel() / C;
  MOTLEY_CHECK(weight.numel() == C && out.numel() == N * C && rstd.numel() == N,
               "RmsNormForward: out (N, C), rstd (N), weight (C)");
  cuda::RmsNormForward(ctx_->stream, F32(out, "RmsNormForward: out"),
                       F32(rstd, "RmsNormForward: rstd"), F32(inp, "RmsNormForward: inp"),
                       F32(weight, "RmsNormForward: weight"), N, C, eps);
}

void CudaBackend::RmsNormBackward(Tensor& dinp, Tensor& dweight, const Tensor& dout,
                                  const Tensor& inp, const Tensor& weight, const Tensor& rstd) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const int64_t C = LastDim(inp), N = inp.numel() / C;
  MOTLEY_CHECK(weight.numel() == C && dweight.numel() == C && dinp.numel() == N * C &&
                   dout.numel() == N * C && rstd.numel() == N,
               "RmsNormBackward: dinp, dout, inp (N, C), rstd (N), weight, dweight (C)");
  cuda::RmsNormBackward(
      ctx_->stream, F32(dinp, "RmsNormBackward: dinp"), F32(dweight, "RmsNormBackward: dweight"),
      F32(dout, "RmsNormBackward: dout"), F32(inp, "RmsNormBackward: inp"),
      F32(weight, "RmsNormBackward: weight"), F32(rstd, "RmsNormBackward: rstd"), N, C);
}

// out (B, T, H, HS) = rope(inp); out may alias inp.
void CudaBackend::RopeForward(Tensor& out, const Tensor& inp, int64_t pos_offset, float theta) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  MOTLEY_CHECK(inp.shape().rank() == 4 && out.shape() == inp.shape(),
               "RopeForward: out and inp must be (B, T, H, HS)");
  MOTLEY_CHECK(inp.dim(3) % 2 == 0, "RoPE: head size must be even");
  cuda::Rope(*ctx_, F32(out, "RopeForward: out"), F32(inp, "RopeForward: inp"), inp.dim(0),
             inp.dim(1), inp.dim(2), inp.dim(3), pos_offset, theta, false);
}

// dinp (B, T, H, HS) += rope^-1(dout)
void CudaBackend::RopeBackward(Tensor& dinp, const Tensor& dout, int64_t pos_offset, float theta) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  MOTLEY_CHECK(dout.shape().rank() == 4 && dinp.shape() == dout.shape(),
               "RopeBackward: dinp and dout must be (B, T, H, HS)");
  MOTLEY_CHECK(dout.dim(3) % 2 == 0, "RoPE: head size must be even");
  cuda::Rope(*ctx_, F32(dinp, "RopeBackward: dinp"), F32(dout, "RopeBackward: dout"), dout.dim(0),
             dout.dim(1), dout.dim(2), dout.dim(3), pos_offset, theta, true);
}

namespace {
cuda::AttentionDims CheckAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& att, const char* op) {
  MOTLEY_CHECK(q.shape().rank() == 4 && k.shape().rank() == 4, op);
  cuda::AttentionDims d{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  MOTLEY_CHECK(k.dim(0) == d.B && k.dim(1) == d.T && k.dim(3) == d.HS, op);
  MOTLEY_CHECK(v.shape() == k.shape(), op);
  MOTLEY_CHECK(d.NKV > 0 && d.NH % d.NKV == 0, "attention: NH must be a multiple of NKV");
  MOTLEY_CHECK(att.numel() == d.B * d.NH * d.T * d.T, "attention: att must be (B, NH, T, T)");
  return d;
}
}  // namespace

void CudaBackend::AttentionForward(Tensor& out, Tensor& att, const Tensor& q, const Tensor& k,
                                   const Tensor& v) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const cuda::AttentionDims d =
      CheckAttention(q, k, v, att, "AttentionForward: q (B,T,NH,HS), k v (B,T,NKV,HS)");
  MOTLEY_CHECK(out.shape() == q.shape(), "AttentionForward: out must be shaped like q");
  cuda::AttentionForward(*ctx_, F32(out, "AttentionForward: out"),
                         F32(att, "AttentionForward: att"), F32(q, "AttentionForward: q"),
                         F32(k, "AttentionForward: k"), F32(v, "AttentionForward: v"), d);
}

void CudaBackend::AttentionBackward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                                    const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& att) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const cuda::AttentionDims d =
      CheckAttention(q, k, v, att, "AttentionBackward: q (B,T,NH,HS), k v (B,T,NKV,HS)");
  MOTLEY_CHECK(dq.shape() == q.shape() && dout.shape() == q.shape(),
               "AttentionBackward: dq and dout must be shaped like q");
  MOTLEY_CHECK(dk.shape() == k.shape() && dv.shape() == v.shape(),
               "AttentionBackward: dk and dv must be shaped like k and v");
  cuda::AttentionBackward(*ctx_, F32(dq, "AttentionBackward: dq"), F32(dk, "AttentionBackward: dk"),
                          F32(dv, "AttentionBackward: dv"), F32(dout, "AttentionBackward: dout"),
                          F32(q, "AttentionBackward: q"), F32(k, "AttentionBackward: k"),
                          F32(v, "AttentionBackward: v"), F32(att, "AttentionBackward: att"), d);
}

void CudaBackend::SwiGluForward(Tensor& out, const Tensor& gate, const Tensor& up) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const int64_t n = gate.numel();
  MOTLEY_CHECK(up.numel() == n && out.numel() == n, "SwiGluForward: sizes differ");
  cuda::SwiGluForward(ctx_->stream, F32(out, "SwiGluForward: out"),
                      F32(gate, "SwiGluForward: gate"), F32(up, "SwiGluForward: up"), n);
}

void CudaBackend::SwiGluBackward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate,
                                 const Tensor& up) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const int64_t n = gate.numel();
  MOTLEY_CHECK(up.numel() == n && dout.numel() == n && dgate.numel() == n && dup.numel() == n,
               "SwiGluBackward: sizes differ");
  cuda::SwiGluBackward(ctx_->stream, F32(dgate, "SwiGluBackward: dgate"),
                       F32(dup, "SwiGluBackward: dup"), F32(dout, "SwiGluBackward: dout"),
                       F32(gate, "SwiGluBackward: gate"), F32(up, "SwiGluBackward: up"), n);
}

void CudaBackend::CrossEntropyForward(Tensor& losses, const Tensor& logits, const Tensor& targets) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const int64_t V = LastDim(logits), N = logits.numel() / V;
  MOTLEY_CHECK(losses.numel() == N && targets.numel() == N,
               "CrossEntropyForward: losses and targets must be (N)");
  cuda::CrossEntropyForward(ctx_->stream, F32(losses, "CrossEntropyForward: losses"),
                            F32(logits, "CrossEntropyForward: logits"),
                            I32(targets, "CrossEntropyForward: targets"), N, V);
}

void CudaBackend::CrossEntropyBackward(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                       float loss_scale) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const int64_t V = LastDim(logits), N = logits.numel() / V;
  MOTLEY_CHECK(dlogits.numel() == N * V && targets.numel() == N,
               "CrossEntropyBackward: dlogits (N, V), targets (N)");
  cuda::CrossEntropyBackward(ctx_->stream, F32(dlogits, "CrossEntropyBackward: dlogits"),
                             F32(logits, "CrossEntropyBackward: logits"),
                             I32(targets, "CrossEntropyBackward: targets"), N, V, loss_scale);
}

void CudaBackend::Add(Tensor& out, const Tensor& a, const Tensor& b) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const int64_t n = a.numel();
  MOTLEY_CHECK(b.numel() == n && out.numel() == n, "Add: sizes differ");
  cuda::Add(ctx_->stream, F32(out, "Add: out"), F32(a, "Add: a"), F32(b, "Add: b"), n);
}

void CudaBackend::AddInPlace(Tensor& a, const Tensor& b) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const int64_t n = a.numel();
  MOTLEY_CHECK(b.numel() == n, "AddInPlace: sizes differ");
  cuda::AddInPlace(ctx_->stream, F32(a, "AddInPlace: a"), F32(b, "AddInPlace: b"), n);
}

void CudaBackend::Scale(Tensor& a, float s) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  cuda::Scale(ctx_->stream, F32(a, "Scale: a"), s, a.numel());
}

double CudaBackend::SumSquares(const Tensor& a) {
  if (ctx_->out_of_memory) return std::nan("");  // see memory_status()
  return cuda::Reduce(*ctx_, F32(a, "SumSquares: a"), a.numel(), true);
}

double CudaBackend::Sum(const Tensor& a) {
  if (ctx_->out_of_memory) return std::nan("");  // see memory_status()
  return cuda::Reduce(*ctx_, F32(a, "Sum: a"), a.numel(), false);
}

// g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// param -= lr (m mcorr / (sqrt(v vcorr) + eps) + wd param), as the CPU backend.
void CudaBackend::AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                        const tensor::AdamWParams& p) {
  if (ctx_->out_of_memory) return;  // see memory_status()
  const int64_t n = param.numel();
  MOTLEY_CHECK(grad.numel() == n && m.numel() == n && v.numel() == n, "AdamW: sizes differ");
  MOTLEY_CHECK(p.step >= 1, "AdamW: step is 1-based");
  const auto t = static_cast<double>(p.step);
  cuda::AdamWArgs a{};
  a.lr = p.lr;
  a.b1 = p.beta1;
  a.b2 = p.beta2;
  a.eps = p.eps;
  a.wd = p.weight_decay;
  a.grad_scale = p.grad_scale;
  a.mcorr = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta1), t)));
  a.vcorr = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta2), t)));
  cuda::AdamW(ctx_->stream, F32(param, "AdamW: param"), F32(grad, "AdamW: grad"),
              F32(m, "AdamW: m"), F32(v, "AdamW: v"), a, n);
}

}  // namespace motley::backend
