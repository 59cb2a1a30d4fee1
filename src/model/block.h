// One Llama decoder block, forward and backward by hand, as a pair (llm.c style):
//
//   ln1 = RMSNorm(x) * w_ln1
//   q, k, v = ln1 @ Wq^T, ln1 @ Wk^T, ln1 @ Wv^T     laid out (B, T, NH|NKV, HS) straight away
//   q, k = RoPE(q), RoPE(k)                           (Hugging Face rotate_half layout)
//   a = CausalAttention(q, k, v)                      (B, T, NH, HS), grouped-query heads
//   x2 = x + a @ Wo^T
//   ln2 = RMSNorm(x2) * w_ln2
//   out = x2 + (silu(ln2 @ Wg^T) * (ln2 @ Wu^T)) @ Wd^T
//
// Shape letters: B batch, T sequence, N = B*T rows, C hidden, NH/NKV heads, HS head size, F SwiGLU.
// All ops go through tensor::Backend. Gradients ACCUMULATE (+=) as in the Backend contract.
// Tensor parallelism (Megatron): with a TpGroup, BlockDims holds this rank's share of the heads and
// of F (BlockDims::Sharded), the weights are shards (parameters.h), and the block all-reduces the
// partial outputs of o_proj and down_proj (forward) and the partial input gradients of the q/k/v
// and gate/up matmuls (backward); without one (nullptr) it is the plain single-device block.
//
// Activation recompute (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models"), chosen per stage (spec::Recompute):
//  - selective: the attention core -- QK^T, softmax and the probability-weighted sum of V -- is
//    recomputed in the backward (one more AttentionForward per block and micro-batch), so the
//    (B, NH, T, T) probabilities are not kept: BlockActivations::att stays undefined and the
//    block uses BlockScratch::att, shared by the stage's blocks, instead;
//  - full: only each block's input is kept (by the stage); BlockBackwardWithRecompute reruns the
//    whole BlockForward into one BlockActivations shared by the stage's blocks, then runs
//    BlockBackward (one more BlockForward per block and micro-batch, its TP all-reduces included).
// Recomputed values are bit-identical to the first forward's (same ops on the same inputs), so
// the gradients do not depend on the mode.
// Thread safety: the functions touch only their arguments; one caller per Backend at a time.
#pragma once

#include <cstdint>

#include "model/tp_group.h"
#include "spec/model_spec.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace motley::model {

struct BlockDims {
  int64_t b = 0, t = 0, c = 0, nh = 0, nkv = 0, hs = 0, f = 0;
  float norm_eps = 1e-5F;
  float rope_theta = 10000.0F;
  int64_t n() const { return b * t; }
  static BlockDims From(const spec::ModelSpec& model, int64_t batch, int64_t seq_len);
  // The dims one of `tp_degree` TP ranks computes with: nh, nkv and f divided by tp_degree (which
  // must divide them); c and hs unchanged.
  BlockDims Sharded(int tp_degree) const;
};

// One block's nine tensors (values, or their gradients), as handles into a ParameterSet.
struct BlockWeights {
  tensor::Tensor ln1;  // (C)
  tensor::Tensor wq;   // (NH*HS, C)
  tensor::Tensor wk;   // (NKV*HS, C)
  tensor::Tensor wv;   // (NKV*HS, C)
  tensor::Tensor wo;   // (C, NH*HS)
  tensor::Tensor ln2;  // (C)
  tensor::Tensor wg;   // (F, C)
  tensor::Tensor wu;   // (F, C)
  tensor::Tensor wd;   // (C, F)
};

// What one block keeps from its forward for its backward, for one micro-batch (every field under
// recompute none; all but `att` under selective recompute).
struct BlockActivations {
  tensor::Tensor ln1;      // (N, C)
  tensor::Tensor rstd1;    // (N)
  tensor::Tensor q;        // (B, T, NH, HS), after RoPE
  tensor::Tensor k;        // (B, T, NKV, HS), after RoPE
  tensor::Tensor v;        // (B, T, NKV, HS)
  tensor::Tensor att;      // (B, NH, T, T) softmax probabilities; undefined: selective recompute
  tensor::Tensor att_out;  // (B, T, NH, HS)
  tensor::Tensor x2;       // (N, C) residual after attention
  tensor::Tensor ln2;      // (N, C)
  tensor::Tensor rstd2;    // (N)
  tensor::Tensor gate;     // (N, F)
  tensor::Tensor up;       // (N, F)
  tensor::Tensor h;        // (N, F) silu(gate) * up

  // with_att = false: everything but `att` (selective recompute).
  static BlockActivations Allocate(tensor::Backend& backend, const BlockDims& d,
                                   bool with_att = true);
};

// Temporaries shared by all blocks of a stage (not kept between calls).
struct BlockScratch {
  tensor::Tensor nc;        // (N, C) branch output in forward
  tensor::Tensor dh;        // (N, F)
  tensor::Tensor dgate;     // (N, F)
  tensor::Tensor dup;       // (N, F)
  tensor::Tensor dln;       // (N, C) gradient of ln2, then of ln1
  tensor::Tensor datt_out;  // (B, T, NH, HS)
  tensor::Tensor dq;        // (B, T, NH, HS) w.r.t. the roped q
  tensor::Tensor dk;        // (B, T, NKV, HS) w.r.t. the roped k
  tensor::Tensor dv;        // (B, T, NKV, HS)
  tensor::Tensor dq_pre;    // (B, T, NH, HS) w.r.t. q before RoPE
  tensor::Tensor dk_pre;    // (B, T, NKV, HS) w.r.t. k before RoPE
  tensor::Tensor att;       // (B, NH, T, T) probabilities of blocks that keep no `att`, or none

  // with_att: also `att`, for blocks whose activations have none (selective recompute).
  static BlockScratch Allocate(tensor::Backend& backend, const BlockDims& d, bool with_att = false);
};

// out (N, C) = block(inp (N, C)); fills `acts` (the probabilities go to scratch.att when acts.att
// is undefined). out must not alias inp. `tp`: the stage's TP group (nullptr without tensor
// parallelism).
void BlockForward(tensor::Backend& backend, const BlockDims& d, const BlockWeights& w,
                  const tensor::Tensor& inp, tensor::Tensor& out, BlockActivations& acts,
                  BlockScratch& scratch, TpGroup* tp = nullptr);

// On entry dresidual (N, C) holds dL/d(out); on return it holds dL/d(inp). Weight gradients are
// accumulated into `dw`. `inp` (N, C) and `acts` are what BlockForward saw and filled; when
// acts.att is undefined (selective recompute) the attention core is recomputed into scratch.att
// first.
void BlockBackward(tensor::Backend& backend, const BlockDims& d, const BlockWeights& w,
                   BlockWeights& dw, const tensor::Tensor& inp, const BlockActivations& acts,
                   tensor::Tensor& dresidual, BlockScratch& scratch, TpGroup* tp = nullptr);

// Full recompute: BlockForward of inp (N, C) into `work` (a complete BlockActivations, shared by
// the stage's blocks; its output goes to scratch.dln, which BlockBackward overwrites), then
// BlockBackward with `work`. dresidual as for BlockBackward.
void BlockBackwardWithRecompute(tensor::Backend& backend, const BlockDims& d, const BlockWeights& w,
                                BlockWeights& dw, const tensor::Tensor& inp, BlockActivations& work,
                                tensor::Tensor& dresidual, BlockScratch& scratch,
                                TpGroup* tp = nullptr);

}  // namespace motley::model
