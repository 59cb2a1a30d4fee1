// See block.h.
#include "model/block.h"

#include "core/check.h"

namespace motley::model {

using tensor::Backend;
using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

BlockDims BlockDims::From(const spec::ModelSpec& model, int64_t batch, int64_t seq_len) {
  BlockDims d;
  d.b = batch;
  d.t = seq_len;
  d.c = model.hidden;
  d.nh = model.num_heads;
  d.nkv = model.num_kv_heads;
  d.hs = model.head_size();
  d.f = model.ffn_hidden;
  d.norm_eps = model.norm_eps;
  d.rope_theta = model.rope_theta;
  return d;
}

BlockDims BlockDims::Sharded(int tp_degree) const {
  MOTLEY_CHECK(tp_degree >= 1 && nh % tp_degree == 0 && nkv % tp_degree == 0 &&
                   f % tp_degree == 0,
               "tp_degree must divide num_heads, num_kv_heads and ffn_hidden");
  BlockDims s = *this;
  s.nh = nh / tp_degree;
  s.nkv = nkv / tp_degree;
  s.f = f / tp_degree;
  return s;
}

BlockActivations BlockActivations::Allocate(Backend& backend, const BlockDims& d, bool with_att) {
  const int64_t n = d.n();
  BlockActivations a;
  a.ln1 = backend.Empty(Shape{n, d.c}, DType::kF32);
  a.rstd1 = backend.Empty(Shape{n}, DType::kF32);
  a.q = backend.Empty(Shape{d.b, d.t, d.nh, d.hs}, DType::kF32);
  a.k = backend.Empty(Shape{d.b, d.t, d.nkv, d.hs}, DType::kF32);
  a.v = backend.Empty(Shape{d.b, d.t, d.nkv, d.hs}, DType::kF32);
  if (with_att) a.att = backend.Empty(Shape{d.b, d.nh, d.t, d.t}, DType::kF32);
  a.att_out = backend.Empty(Shape{d.b, d.t, d.nh, d.hs}, DType::kF32);
  a.x2 = backend.Empty(Shape{n, d.c}, DType::kF32);
  a.ln2 = backend.Empty(Shape{n, d.c}, DType::kF32);
  a.rstd2 = backend.Empty(Shape{n}, DType::kF32);
  a.gate = backend.Empty(Shape{n, d.f}, DType::kF32);
  a.up = backend.Empty(Shape{n, d.f}, DType::kF32);
  a.h = backend.Empty(Shape{n, d.f}, DType::kF32);
  return a;
}

BlockScratch BlockScratch::Allocate(Backend& backend, const BlockDims& d, bool with_att) {
  const int64_t n = d.n();
  BlockScratch s;
  s.nc = backend.Empty(Shape{n, d.c}, DType::kF32);
  s.dh = backend.Empty(Shape{n, d.f}, DType::kF32);
  s.dgate = backend.Empty(Shape{n, d.f}, DType::kF32);
  s.dup = backend.Empty(Shape{n, d.f}, DType::kF32);
  s.dln = backend.Empty(Shape{n, d.c}, DType::kF32);
  s.datt_out = backend.Empty(Shape{d.b, d.t, d.nh, d.hs}, DType::kF32);
  s.dq = backend.Empty(Shape{d.b, d.t, d.nh, d.hs}, DType::kF32);
  s.dk = backend.Empty(Shape{d.b, d.t, d.nkv, d.hs}, DType::kF32);
  s.dv = backend.Empty(Shape{d.b, d.t, d.nkv, d.hs}, DType::kF32);
  s.dq_pre = backend.Empty(Shape{d.b, d.t, d.nh, d.hs}, DType::kF32);
  s.dk_pre = backend.Empty(Shape{d.b, d.t, d.nkv, d.hs}, DType::kF32);
  if (with_att) s.att = backend.Empty(Shape{d.b, d.nh, d.t, d.t}, DType::kF32);
  return s;
}

void BlockForward(Backend& backend, const BlockDims& d, const BlockWeights& w, const Tensor& inp,
                  Tensor& out, BlockActivations& acts, BlockScratch& scratch, TpGroup* tp) {
  const int64_t n = d.n();
  const Shape q_rows{n, d.nh * d.hs};
  const Shape kv_rows{n, d.nkv * d.hs};

  // Attention half.
  backend.RmsNormForward(acts.ln1, acts.rstd1, inp, w.ln1, d.norm_eps);
  Tensor q2 = acts.q.Reshaped(q_rows);
  Tensor k2 = acts.k.Reshaped(kv_rows);
  Tensor v2 = acts.v.Reshaped(kv_rows);
  backend.MatmulForward(q2, acts.ln1, w.wq);
  backend.MatmulForward(k2, acts.ln1, w.wk);
  backend.MatmulForward(v2, acts.ln1, w.wv);
  backend.RopeForward(acts.q, acts.q, /*pos_offset=*/0, d.rope_theta);
  backend.RopeForward(acts.k, acts.k, /*pos_offset=*/0, d.rope_theta);
  Tensor& att = acts.att.defined() ? acts.att : scratch.att;
  MOTLEY_CHECK(att.defined(), "BlockForward: no attention probabilities buffer");
  backend.AttentionForward(acts.att_out, att, acts.q, acts.k, acts.v);
  backend.MatmulForward(scratch.nc, acts.att_out.Reshaped(q_rows), w.wo);
  if (tp != nullptr) tp->AllReduceSum(scratch.nc);  // row-parallel o_proj: sum the partials
  backend.Add(acts.x2, inp, scratch.nc);

  // MLP half.
  backend.RmsNormForward(acts.ln2, acts.rstd2, acts.x2, w.ln2, d.norm_eps);
  backend.MatmulForward(acts.gate, acts.ln2, w.wg);
  backend.MatmulForward(acts.up, acts.ln2, w.wu);
  backend.SwiGluForward(acts.h, acts.gate, acts.up);
  backend.MatmulForward(scratch.nc, acts.h, w.wd);
  if (tp != nullptr) tp->AllReduceSum(scratch.nc);  // row-parallel down_proj
  backend.Add(out, acts.x2, scratch.nc);
}

void BlockBackward(Backend& backend, const BlockDims& d, const BlockWeights& w, BlockWeights& dw,
                   const Tensor& inp, const BlockActivations& acts, Tensor& dresidual,
                   BlockScratch& s, TpGroup* tp) {
  const int64_t n = d.n();
  const Shape q_rows{n, d.nh * d.hs};
  const Shape kv_rows{n, d.nkv * d.hs};

  // MLP half: dresidual is dL/d(out); the residual passes it to x2 unchanged, the branch adds.
  backend.SetZero(s.dh);
  backend.MatmulBackward(s.dh, dw.wd, dresidual, acts.h, w.wd);
  backend.SetZero(s.dgate);
  backend.SetZero(s.dup);
  backend.SwiGluBackward(s.dgate, s.dup, s.dh, acts.gate, acts.up);
  backend.SetZero(s.dln);
  backend.MatmulBackward(s.dln, dw.wg, s.dgate, acts.ln2, w.wg);
  backend.MatmulBackward(s.dln, dw.wu, s.dup, acts.ln2, w.wu);
  if (tp != nullptr) tp->AllReduceSum(s.dln);  // column-parallel gate/up: sum input gradients
  backend.RmsNormBackward(dresidual, dw.ln2, s.dln, acts.x2, w.ln2, acts.rstd2);
  // dresidual is now dL/d(x2).

  // Attention half.
  backend.SetZero(s.datt_out);
  Tensor datt_rows = s.datt_out.Reshaped(q_rows);
  backend.MatmulBackward(datt_rows, dw.wo, dresidual, acts.att_out.Reshaped(q_rows), w.wo);
  const Tensor* att = &acts.att;
  if (!acts.att.defined()) {
    // Selective recompute: the attention core again, for its probabilities; its output (equal to
    // acts.att_out) lands in s.dq, which is zeroed next.
    MOTLEY_CHECK(s.att.defined(), "BlockBackward: selective recompute needs scratch.att");
    backend.AttentionForward(s.dq, s.att, acts.q, acts.k, acts.v);
    att = &s.att;
  }
  backend.SetZero(s.dq);
  backend.SetZero(s.dk);
  backend.SetZero(s.dv);
  backend.AttentionBackward(s.dq, s.dk, s.dv, s.datt_out, acts.q, acts.k, acts.v, *att);
  backend.SetZero(s.dq_pre);
  backend.SetZero(s.dk_pre);
  backend.RopeBackward(s.dq_pre, s.dq, /*pos_offset=*/0, d.rope_theta);
  backend.RopeBackward(s.dk_pre, s.dk, /*pos_offset=*/0, d.rope_theta);
  backend.SetZero(s.dln);
  Tensor dq2 = s.dq_pre.Reshaped(q_rows);
  Tensor dk2 = s.dk_pre.Reshaped(kv_rows);
  Tensor dv2 = s.dv.Reshaped(kv_rows);
  backend.MatmulBackward(s.dln, dw.wq, dq2, acts.ln1, w.wq);
  backend.MatmulBackward(s.dln, dw.wk, dk2, acts.ln1, w.wk);
  backend.MatmulBackward(s.dln, dw.wv, dv2, acts.ln1, w.wv);
  if (tp != nullptr) tp->AllReduceSum(s.dln);  // column-parallel q/k/v
  backend.RmsNormBackward(dresidual, dw.ln1, s.dln, inp, w.ln1, acts.rstd1);
  // dresidual is now dL/d(inp).
}

void BlockBackwardWithRecompute(Backend& backend, const BlockDims& d, const BlockWeights& w,
                                BlockWeights& dw, const Tensor& inp, BlockActivations& work,
                                Tensor& dresidual, BlockScratch& scratch, TpGroup* tp) {
  MOTLEY_CHECK(work.att.defined(), "full recompute needs a complete BlockActivations");
  BlockForward(backend, d, w, inp, scratch.dln, work, scratch, tp);
  BlockBackward(backend, d, w, dw, inp, work, dresidual, scratch, tp);
}

}  // namespace motley::model
