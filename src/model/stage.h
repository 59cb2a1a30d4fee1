// Stage: a contiguous range of decoder blocks [first_block, first_block + num_blocks), plus the
// token embedding on the first stage and the final RMSNorm + LM head + cross-entropy on the last,
// run forward and backward on one Backend for micro-batches of a fixed shape (B, T). The whole
// model is simply a Stage with StageLayout::Full. Parameters live in a ParameterSet under their
// Hugging Face names (parameters.h), initialised plan-independently from the global seed.
//
// Micro-batches: several may be in flight at once (1F1B). Each Forward(mb) takes a free activation
// slot (allocating one only when none is free, i.e. during warm-up) and keeps it until
// Backward(mb) or Discard(mb) releases it; after warm-up no step allocates device memory.
//
// Activation recompute (layout.recompute, block.h): a slot always keeps the stage input and every
// block's output (N, C); per block it keeps all its activations (none), all but the (B, NH, T, T)
// attention probabilities (selective: one probabilities buffer for the stage, the core
// recomputed in each block's backward), or nothing (full: one BlockActivations for the stage,
// each block's forward rerun from its kept input inside its backward).
//
// Tensor parallelism: a layout with tp_degree > 1 holds one shard of the blocks (parameters.h) and
// needs a TpGroup of that size (tp_group.h); activations and gradients at the stage's boundary are
// full (B, T, C) and identical on every TP rank, and the loss is computed on every TP rank.
//
// Shape letters: B batch, T sequence, N = B*T, C hidden, V vocabulary.
// Ownership: a Stage owns its parameters and activations; it keeps a reference to the Backend,
// which must outlive it. Tensors it returns alias its internal buffers (see each method).
// Thread safety: one thread drives a Stage (and its Backend) at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/block.h"
#include "model/parameters.h"
#include "model/tp_group.h"
#include "spec/model_spec.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace motley::model {

class Stage {
 public:
  // Validates the layout, allocates the stage's parameters on `backend` and initialises them from
  // `seed` (init.h). batch (B) and seq_len (T) fix the micro-batch shape; T may not exceed
  // model.max_seq_len (when that is set). `tp` (non-owning, must outlive the Stage) is required
  // when layout.tp_degree > 1 and must then have size tp_degree and rank tp_rank.
  static Result<std::unique_ptr<Stage>> Create(tensor::Backend& backend,
                                               const spec::ModelSpec& model,
                                               const StageLayout& layout, int64_t batch,
                                               int64_t seq_len, uint64_t seed,
                                               TpGroup* tp = nullptr);

  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;
  Stage(Stage&&) = delete;
  Stage& operator=(Stage&&) = delete;
  ~Stage() = default;

  const StageLayout& layout() const { return layout_; }
  const spec::ModelSpec& model() const { return model_; }
  int64_t batch() const { return dims_.b; }
  int64_t seq_len() const { return dims_.t; }
  tensor::Backend& backend() { return backend_; }
  ParameterSet& params() { return params_; }
  const ParameterSet& params() const { return params_; }

  // Non-last stage. input: tokens (B, T) i32 on the first stage, activations (B, T, C) f32
  // otherwise (copied; the caller may reuse it). Returns the output activations (B, T, C), which
  // stay valid until Backward(mb) or Discard(mb).
  tensor::Tensor Forward(int64_t mb, const tensor::Tensor& input);

  // Last stage. input as for Forward; targets (B, T) i32 (a target < 0 is ignored). Returns the sum
  // of the per-token cross-entropy losses, in double.
  double ForwardLoss(int64_t mb, const tensor::Tensor& input, const tensor::Tensor& targets);

  // Non-last stage. doutput (B, T, C): dL/d(output) of Forward(mb). Accumulates parameter
  // gradients, releases mb's activations and returns dL/d(input) (B, T, C), valid until the next
  // Backward or BackwardLoss call. On the first stage the gradient ends in the embedding and
  // Tensor{} is returned.
  tensor::Tensor Backward(int64_t mb, const tensor::Tensor& doutput);

  // Last stage. Backward of ForwardLoss(mb) for the loss sum(token losses) * loss_scale, where
  // loss_scale = 1 / tokens in the global batch (docs/architecture.md §4). Returns as Backward.
  tensor::Tensor BackwardLoss(int64_t mb, float loss_scale);

  // Releases mb's activations without a backward (evaluation).
  void Discard(int64_t mb);

  int num_in_flight() const;
  int num_activation_slots() const { return static_cast<int>(slots_.size()); }
  spec::Recompute recompute() const { return layout_.recompute; }

 private:
  // Everything one micro-batch keeps between its forward and its backward.
  struct Slot {
    int64_t mb = -1;
    bool in_use = false;
    tensor::Tensor tokens;              // (N) i32, first stage
    std::vector<tensor::Tensor> resid;  // num_blocks + 1 of (N, C): stage input, block outputs
    std::vector<BlockActivations> blocks;  // per block; empty under full recompute
    tensor::Tensor lnf;      // (N, C), last stage
    tensor::Tensor rstdf;    // (N)
    tensor::Tensor logits;   // (N, V)
    tensor::Tensor targets;  // (N) i32
    tensor::Tensor losses;   // (N)
  };

  Stage(tensor::Backend& backend, spec::ModelSpec model, const StageLayout& layout,
        const BlockDims& dims, ParameterSet params, TpGroup* tp);

  Slot& Acquire(int64_t mb);
  Slot& Find(int64_t mb);
  Slot& RunForward(int64_t mb, const tensor::Tensor& input);
  // dresidual_ holds dL/d(stage output); runs the blocks backward and the embedding.
  tensor::Tensor RunBackward(Slot& slot);
  // Where block b of `slot` keeps its activations (the shared workspace under full recompute).
  BlockActivations& ActivationsOf(Slot& slot, size_t b);

  tensor::Backend& backend_;
  spec::ModelSpec model_;
  StageLayout layout_;
  BlockDims dims_;
  ParameterSet params_;
  TpGroup* tp_ = nullptr;  // non-owning; nullptr without tensor parallelism

  // Handles into params_ (tensors alias).
  tensor::Tensor wte_, dwte_;         // (V, C)
  std::vector<BlockWeights> w_, dw_;  // per local block
  tensor::Tensor wnorm_, dwnorm_;     // (C)
  tensor::Tensor wlm_, dwlm_;         // (V, C)

  std::vector<std::unique_ptr<Slot>> slots_;
  BlockScratch scratch_;        // (with the probabilities buffer under selective recompute)
  BlockActivations recompute_;  // full recompute: the one block's activations being recomputed
  tensor::Tensor dresidual_;    // (N, C)
  tensor::Tensor dlnf_;       // (N, C), last stage
  tensor::Tensor dlogits_;    // (N, V), last stage
};

}  // namespace motley::model
