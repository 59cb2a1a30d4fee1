// See stage.h.
#include "model/stage.h"

#include <utility>

namespace motley::model {

using tensor::Backend;
using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

Result<std::unique_ptr<Stage>> Stage::Create(Backend& backend, const spec::ModelSpec& model,
                                             const StageLayout& layout, int64_t batch,
                                             int64_t seq_len, uint64_t seed, TpGroup* tp) {
  MOTLEY_RETURN_IF_ERROR(ValidateStageLayout(model, layout, "stage"));
  if (batch <= 0 || seq_len <= 0) {
    return Err("stage: micro-batch shape (B={}, T={}) must be positive", batch, seq_len);
  }
  if (model.max_seq_len > 0 && seq_len > model.max_seq_len) {
    return Err("stage: sequence length T={} exceeds model '{}' max_seq_len {}", seq_len, model.name,
               model.max_seq_len);
  }
  if (layout.tp_degree > 1) {
    if (tp == nullptr || tp->size() != layout.tp_degree || tp->rank() != layout.tp_rank) {
      return Err("stage: tp_degree {} (tp_rank {}) needs a TP group of that size and rank",
                 layout.tp_degree, layout.tp_rank);
    }
  } else {
    tp = nullptr;
  }
  ParameterSet params =
      ParameterSet::Allocate(backend, StageParamInfos(model, layout), layout.allocate_moments);
  params.Initialize(backend, seed);
  const BlockDims dims = BlockDims::From(model, batch, seq_len).Sharded(layout.tp_degree);
  return std::unique_ptr<Stage>(
      new Stage(backend, model, layout, dims, std::move(params), tp));
}

Stage::Stage(Backend& backend, spec::ModelSpec model, const StageLayout& layout,
             const BlockDims& dims, ParameterSet params, TpGroup* tp)
    : backend_(backend),
      model_(std::move(model)),
      layout_(layout),
      dims_(dims),
      params_(std::move(params)),
      tp_(tp) {
  size_t i = 0;
  if (layout_.has_embedding) {
    wte_ = params_[i].value;
    dwte_ = params_[i].grad;
    ++i;
  }
  for (int64_t b = 0; b < layout_.num_blocks; ++b) {
    BlockWeights w, g;
    Tensor* wf[] = {&w.ln1, &w.wq, &w.wk, &w.wv, &w.wo, &w.ln2, &w.wg, &w.wu, &w.wd};
    Tensor* gf[] = {&g.ln1, &g.wq, &g.wk, &g.wv, &g.wo, &g.ln2, &g.wg, &g.wu, &g.wd};
    for (size_t j = 0; j < kParamsPerBlock; ++j, ++i) {
      *wf[j] = params_[i].value;
      *gf[j] = params_[i].grad;
    }
    w_.push_back(std::move(w));
    dw_.push_back(std::move(g));
  }
  if (layout_.has_head) {
    wnorm_ = params_[i].value;
    dwnorm_ = params_[i].grad;
    wlm_ = params_[i + 1].value;
    dwlm_ = params_[i + 1].grad;
    i += 2;
  }
  MOTLEY_CHECK(i == params_.size(), "stage parameter layout mismatch");

  const int64_t n = dims_.n();
  if (layout_.num_blocks > 0) {
    scratch_ =
        BlockScratch::Allocate(backend_, dims_, layout_.recompute == spec::Recompute::kSelective);
    if (layout_.recompute == spec::Recompute::kFull) {
      recompute_ = BlockActivations::Allocate(backend_, dims_);
    }
  }
  dresidual_ = backend_.Empty(Shape{n, dims_.c}, DType::kF32);
  if (layout_.has_head) {
    dlnf_ = backend_.Empty(Shape{n, dims_.c}, DType::kF32);
    dlogits_ = backend_.Empty(Shape{n, model_.vocab_size}, DType::kF32);
  }
}

int Stage::num_in_flight() const {
  int count = 0;
  for (const auto& s : slots_) count += s->in_use ? 1 : 0;
  return count;
}

Stage::Slot& Stage::Acquire(int64_t mb) {
  Slot* free_slot = nullptr;
  for (auto& s : slots_) {
    MOTLEY_CHECK(!(s->in_use && s->mb == mb), "Forward of a micro-batch already in flight");
    if (!s->in_use && free_slot == nullptr) free_slot = s.get();
  }
  if (free_slot == nullptr) {  // warm-up: one more micro-batch in flight than ever before
    auto slot = std::make_unique<Slot>();
    const int64_t n = dims_.n();
    if (layout_.has_embedding) slot->tokens = backend_.Empty(Shape{n}, DType::kI32);
    for (int64_t b = 0; b <= layout_.num_blocks; ++b)
      slot->resid.push_back(backend_.Empty(Shape{n, dims_.c}, DType::kF32));
    if (layout_.recompute != spec::Recompute::kFull) {
      const bool with_att = layout_.recompute == spec::Recompute::kNone;
      for (int64_t b = 0; b < layout_.num_blocks; ++b)
        slot->blocks.push_back(BlockActivations::Allocate(backend_, dims_, with_att));
    }
    if (layout_.has_head) {
      slot->lnf = backend_.Empty(Shape{n, dims_.c}, DType::kF32);
      slot->rstdf = backend_.Empty(Shape{n}, DType::kF32);
      slot->logits = backend_.Empty(Shape{n, model_.vocab_size}, DType::kF32);
      slot->targets = backend_.Empty(Shape{n}, DType::kI32);
      slot->losses = backend_.Empty(Shape{n}, DType::kF32);
    }
    slots_.push_back(std::move(slot));
    free_slot = slots_.back().get();
  }
  free_slot->mb = mb;
  free_slot->in_use = true;
  return *free_slot;
}

Stage::Slot& Stage::Find(int64_t mb) {
  for (auto& s : slots_)
    if (s->in_use && s->mb == mb) return *s;
  MOTLEY_CHECK(false, "micro-batch is not in flight on this stage");
  return *slots_.front();  // unreachable
}

BlockActivations& Stage::ActivationsOf(Slot& slot, size_t b) {
  return layout_.recompute == spec::Recompute::kFull ? recompute_ : slot.blocks[b];
}

void Stage::Discard(int64_t mb) {
  Find(mb).in_use = false;
}

Stage::Slot& Stage::RunForward(int64_t mb, const Tensor& input) {
  const int64_t n = dims_.n();
  Slot& slot = Acquire(mb);
  if (layout_.has_embedding) {
    MOTLEY_CHECK(input.dtype() == DType::kI32 && input.shape() == (Shape{dims_.b, dims_.t}),
                 "first stage input must be tokens (B, T) i32");
    backend_.Copy(slot.tokens, input.Reshaped(Shape{n}));
    backend_.EmbeddingForward(slot.resid[0], slot.tokens, wte_);
  } else {
    MOTLEY_CHECK(input.dtype() == DType::kF32 && input.numel() == n * dims_.c,
                 "stage input must be activations (B, T, C) f32");
    backend_.Copy(slot.resid[0], input.Reshaped(Shape{n, dims_.c}));
  }
  for (size_t b = 0; b < w_.size(); ++b) {
    BlockForward(backend_, dims_, w_[b], slot.resid[b], slot.resid[b + 1], ActivationsOf(slot, b),
                 scratch_, tp_);
  }
  return slot;
}

Tensor Stage::Forward(int64_t mb, const Tensor& input) {
  MOTLEY_CHECK(!layout_.has_head, "Forward on the last stage: use ForwardLoss");
  Slot& slot = RunForward(mb, input);
  return slot.resid.back().Reshaped(Shape{dims_.b, dims_.t, dims_.c});
}

double Stage::ForwardLoss(int64_t mb, const Tensor& input, const Tensor& targets) {
  MOTLEY_CHECK(layout_.has_head, "ForwardLoss on a stage without the head");
  MOTLEY_CHECK(targets.dtype() == DType::kI32 && targets.shape() == (Shape{dims_.b, dims_.t}),
               "targets must be (B, T) i32");
  Slot& slot = RunForward(mb, input);
  backend_.RmsNormForward(slot.lnf, slot.rstdf, slot.resid.back(), wnorm_, dims_.norm_eps);
  backend_.MatmulForward(slot.logits, slot.lnf, wlm_);
  backend_.Copy(slot.targets, targets.Reshaped(Shape{dims_.n()}));
  backend_.CrossEntropyForward(slot.losses, slot.logits, slot.targets);
  return backend_.Sum(slot.losses);
}

Tensor Stage::RunBackward(Slot& slot) {
  for (size_t b = w_.size(); b-- > 0;) {
    if (layout_.recompute == spec::Recompute::kFull) {
      BlockBackwardWithRecompute(backend_, dims_, w_[b], dw_[b], slot.resid[b], recompute_,
                                 dresidual_, scratch_, tp_);
    } else {
      BlockBackward(backend_, dims_, w_[b], dw_[b], slot.resid[b], slot.blocks[b], dresidual_,
                    scratch_, tp_);
    }
  }
  if (layout_.has_embedding) backend_.EmbeddingBackward(dwte_, dresidual_, slot.tokens);
  slot.in_use = false;
  if (layout_.has_embedding) return Tensor{};
  return dresidual_.Reshaped(Shape{dims_.b, dims_.t, dims_.c});
}

Tensor Stage::Backward(int64_t mb, const Tensor& doutput) {
  MOTLEY_CHECK(!layout_.has_head, "Backward on the last stage: use BackwardLoss");
  MOTLEY_CHECK(doutput.dtype() == DType::kF32 && doutput.numel() == dims_.n() * dims_.c,
               "doutput must be (B, T, C) f32");
  Slot& slot = Find(mb);
  backend_.Copy(dresidual_, doutput.Reshaped(Shape{dims_.n(), dims_.c}));
  return RunBackward(slot);
}

Tensor Stage::BackwardLoss(int64_t mb, float loss_scale) {
  MOTLEY_CHECK(layout_.has_head, "BackwardLoss on a stage without the head");
  Slot& slot = Find(mb);
  backend_.SetZero(dlogits_);
  backend_.CrossEntropyBackward(dlogits_, slot.logits, slot.targets, loss_scale);
  backend_.SetZero(dlnf_);
  backend_.MatmulBackward(dlnf_, dwlm_, dlogits_, slot.lnf, wlm_);
  backend_.SetZero(dresidual_);
  backend_.RmsNormBackward(dresidual_, dwnorm_, dlnf_, slot.resid.back(), wnorm_, slot.rstdf);
  return RunBackward(slot);
}

}  // namespace motley::model
