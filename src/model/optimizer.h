// AdamW over one stage's parameters, with a linear warm-up + cosine learning-rate schedule and
// gradient clipping by global norm. Clipping is split in two so that parallel runs can all-reduce
// the squared norm between the halves:
//   double sq = opt.GradSquaredNorm();          // local gradients
//   (all-reduce sq over the ranks that together hold each parameter once)
//   opt.Step(step, ClipScale(sq, spec.grad_clip));
//
// Ownership: an Optimizer references the Backend and the ParameterSet (usually Stage::params()),
// both of which must outlive it; the AdamW moments live in the ParameterSet (Parameter::m, ::v) so
// they move with the parameters on migration. Thread safety: one caller at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "model/parameters.h"
#include "spec/train_spec.h"
#include "tensor/backend.h"

namespace motley::model {

// Learning rate of optimizer step `step` (1-based, as AdamW's bias correction) out of
// `total_steps` (llm.c / nanoGPT schedule):
//   step <= warmup_steps:  lr * step / warmup_steps          (linear from 0 to lr)
//   after warm-up:         min_lr + 0.5 * (1 + cos(pi * r)) * (lr - min_lr),
//                          r = (step - warmup) / (total_steps - warmup), clamped to [0, 1]
// so the rate reaches min_lr at total_steps and stays there afterwards.
float LearningRate(const spec::OptimizerSpec& opt, int64_t step, int64_t total_steps);

// Factor to multiply gradients by so that their global norm is at most grad_clip:
// min(1, grad_clip / sqrt(global_squared_norm)); 1 when grad_clip <= 0 or the norm is 0.
// A non-finite norm is passed through (the result is NaN or 0): callers check std::isfinite first.
float ClipScale(double global_squared_norm, float grad_clip);

class Optimizer {
 public:
  Optimizer(tensor::Backend& backend, ParameterSet& params, const spec::OptimizerSpec& spec,
            int64_t total_steps);

  // Zeroes every gradient (start of a step's accumulation).
  void ZeroGrads();
  // Sum of squared gradient entries over this set, in double.
  double GradSquaredNorm() const;
  // Multiplies every gradient by clip_scale (skipped when it is 1).
  void ScaleGrads(float clip_scale);
  // One AdamW update of every parameter with LearningRate(step) on the gradients times
  // clip_scale (as after ScaleGrads(clip_scale), but the factor is applied inside AdamW, so the
  // gradients themselves are left unscaled); weight decay only on parameters marked for it (2-D
  // weights). Returns the learning rate used.
  float Step(int64_t step, float clip_scale);
  // The AdamW settings Step uses for `step` (weight_decay left 0: it is per parameter), for
  // callers that update some parameters themselves (ZeRO-1, parallel/zero1.h).
  tensor::AdamWParams StepParams(int64_t step, float clip_scale) const;
  // Parameters Step leaves alone (skip[i] for params[i]; their moments may be unallocated).
  void SetExternallyUpdated(std::vector<bool> skip) { skip_ = std::move(skip); }

  const spec::OptimizerSpec& spec() const { return spec_; }

 private:
  tensor::Backend& backend_;
  ParameterSet& params_;
  spec::OptimizerSpec spec_;
  int64_t total_steps_;
  std::vector<bool> skip_;  // empty: none skipped
};

}  // namespace motley::model
