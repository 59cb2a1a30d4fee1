// The double-precision reference of every Backend op: plain loops over std::vector<double> with
// explicit sizes, written to be obviously correct rather than fast. It is the test oracle of the
// fp32 CpuBackend (and, through it, of every other backend); its backward passes are themselves
// checked against central finite differences of its forward passes (reference_ops_test.cc and the
// per-op tests).
//
// Semantics are those of tensor::Backend (src/tensor/backend.h): `out` is overwritten, gradients
// `d...` are ACCUMULATED (+=). Shape letters as in cpu_backend.h; every vector is row-major and its
// size is checked against the dimensions passed (MOTLEY_CHECK).
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/backend.h"

namespace motley::backend::reference {

using Vec = std::vector<double>;
using Ids = std::vector<int32_t>;

// out (N, OC) = inp (N, C) @ weight (OC, C)^T
void MatmulForward(Vec& out, const Vec& inp, const Vec& weight, int64_t N, int64_t C, int64_t OC);
// dinp (N, C) += dout (N, OC) @ weight; dweight (OC, C) += dout^T @ inp. Null pointers are skipped.
void MatmulBackward(Vec* dinp, Vec* dweight, const Vec& dout, const Vec& inp, const Vec& weight,
                    int64_t N, int64_t C, int64_t OC);

// out (N, C) = wte (V, C) [tokens (N)]
void EmbeddingForward(Vec& out, const Ids& tokens, const Vec& wte, int64_t V, int64_t C);
// dwte (V, C) += scatter of dout (N, C)
void EmbeddingBackward(Vec& dwte, const Vec& dout, const Ids& tokens, int64_t V, int64_t C);

// out (N, C) = inp * rstd * weight (C); rstd (N) = 1 / sqrt(mean(inp^2) + eps)
void RmsNormForward(Vec& out, Vec& rstd, const Vec& inp, const Vec& weight, int64_t N, int64_t C,
                    double eps);
// dinp (N, C) +=, dweight (C) +=
void RmsNormBackward(Vec& dinp, Vec& dweight, const Vec& dout, const Vec& inp, const Vec& weight,
                     const Vec& rstd, int64_t N, int64_t C);

struct RopeDims {
  int64_t B, T, H, HS;
};
// out (B, T, H, HS) = rope(inp): pairs (i, i + HS/2), angle (pos_offset + t) * theta^(-2i/HS)
void RopeForward(Vec& out, const Vec& inp, const RopeDims& d, int64_t pos_offset, double theta);
// dinp (B, T, H, HS) += rope^-1(dout)
void RopeBackward(Vec& dinp, const Vec& dout, const RopeDims& d, int64_t pos_offset, double theta);

struct AttentionDims {
  int64_t B, T, NH, NKV, HS;
};
// out (B, T, NH, HS), att (B, NH, T, T) from q (B, T, NH, HS), k, v (B, T, NKV, HS); causal,
// scale 1/sqrt(HS), query head h uses key/value head h / (NH / NKV).
void AttentionForward(Vec& out, Vec& att, const Vec& q, const Vec& k, const Vec& v,
                      const AttentionDims& d);
// dq +=, dk +=, dv +=, using the probabilities att of the forward
void AttentionBackward(Vec& dq, Vec& dk, Vec& dv, const Vec& dout, const Vec& q, const Vec& k,
                       const Vec& v, const Vec& att, const AttentionDims& d);

// out = silu(gate) * up (all of one size)
void SwiGluForward(Vec& out, const Vec& gate, const Vec& up);
void SwiGluBackward(Vec& dgate, Vec& dup, const Vec& dout, const Vec& gate, const Vec& up);

// losses (N) = -log softmax(logits (N, V))[target]; 0 where target < 0
void CrossEntropyForward(Vec& losses, const Vec& logits, const Ids& targets, int64_t N, int64_t V);
// dlogits (N, V) += (softmax - onehot) * loss_scale on rows with target >= 0
void CrossEntropyBackward(Vec& dlogits, const Vec& logits, const Ids& targets, int64_t N, int64_t V,
                          double loss_scale);

void Add(Vec& out, const Vec& a, const Vec& b);
void AddInPlace(Vec& a, const Vec& b);
void Scale(Vec& a, double s);
double SumSquares(const Vec& a);
double Sum(const Vec& a);

// AdamW with decoupled weight decay and bias correction, hyper-parameters widened to double.
void AdamW(Vec& param, const Vec& grad, Vec& m, Vec& v, const tensor::AdamWParams& p);

}  // namespace motley::backend::reference
