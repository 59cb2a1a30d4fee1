// Memory model (docs/architecture.md §8), two forms:
//  - RuntimeRankMemory: the bytes of the tensors motley's runtime itself allocates on one rank
//    (fp32 values, gradients and AdamW moments, ZeRO-1 chunks, the activations model/stage.h
//    keeps per micro-batch in flight under each recompute mode, its scratch, the executor's
//    transfer buffers), exact for the configuration the runtime runs (fp32, unfused attention,
//    no sequence parallelism): tests/plan_vs_runtime/memory_vs_runtime_test.cc holds it to the
//    emulated backend's count of every allocation;
//  - StageMemoryPerDevice: an estimate for configurations the runtime does not run (bf16/fp16
//    mixed precision, fused attention, sequence parallelism; the planner's fast checks follow
//    the predictor's choice between the two, Predictor::StageMemoryForPlanning):
//    weights, gradients, optimizer states (with ZeRO-1 over the data-parallel group), activations
//    held by the in-flight micro-batches (Korthikanti et al. 2022, Table 2, per recompute choice),
//    the embedding stage's input activations and the head stage's logits.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "core/units.h"
#include "perf/settings.h"
#include "spec/model_spec.h"
#include "spec/plan.h"

namespace motley::perf {

// Activation bytes of one block for one micro-batch on one TP rank, 16-bit (Korthikanti et al.
// 2022, Table 2), doubled in fp32:
//   no TP:                       s*b*h*(34 + 5*a*s/h)
//   TP, no SP:                   s*b*h*(10 + 24/t + 5*a*s/(h*t))
//   TP + SP:                     s*b*h*(34 + 5*a*s/h)/t
//   selective recompute:         the 5*a*s/h score term is dropped (34*s*b*h/t with SP)
//   full recompute:              2*s*b*h (/t with SP): only the block input is kept
// A fused attention (settings.flash_attention) also drops the score term. Korthikanti's counts
// are for GPT blocks (MLP of 4h); we use them for SwiGLU blocks as an approximation.
Bytes ActivationBytesPerBlock(const spec::ModelSpec& model, int64_t b, int64_t s, int tp,
                              spec::Recompute recompute, const PerfSettings& settings);

struct StageMemoryInput {
  int64_t num_blocks = 0;
  bool has_embedding = false;
  bool has_head = false;
  int tp = 1;
  int64_t micro_batch_size = 1;
  int64_t seq_len = 1;
  int64_t in_flight = 1;   // micro-batches whose activations are held at once (1F1B: min(p-i, m))
  int64_t dp_degree = 1;   // ranks the optimizer states are sharded over under ZeRO-1
  spec::Recompute recompute = spec::Recompute::kNone;
  spec::OptimizerSharding sharding = spec::OptimizerSharding::kNone;
};

struct StageMemory {
  Bytes weights = 0;
  Bytes gradients = 0;
  Bytes optimizer = 0;    // master weights (mixed precision) + Adam moments
  Bytes activations = 0;  // in-flight block activations (+ one block's recompute workspace)
  Bytes buffers = 0;      // embedding output, logits of the head stage
  Bytes total() const { return weights + gradients + optimizer + activations + buffers; }
};

// What one rank holds, for RuntimeRankMemory (the predictor fills it from the plan, the schedule
// and the step program).
struct RankTensorsInput {
  int64_t num_blocks = 0;
  bool has_embedding = false;  // the first stage (token inputs)
  bool has_head = false;       // the last stage (targets, logits, loss)
  int tp = 1;
  int64_t micro_batch_size = 1;  // B
  int64_t seq_len = 1;           // T
  spec::Recompute recompute = spec::Recompute::kNone;
  int64_t activation_slots = 1;  // micro-batches in flight at most (sched::InFlightMicroBatches)
  int64_t transfer_buffers = 0;  // (B, T, C) buffers held at most (sched::PipelineBuffersHeld)
  int64_t moment_elements = 0;   // elements with AdamW moments (the step program's optimizer ops)
  int64_t zero1_segment = 0;     // ZeRO-1: the largest piece of a chunk within one tensor
};

// Bytes of the runtime's tensors on one rank (f32 and i32, 4 bytes each), as allocated by
// model/parameters.cc (value, gradient; moments where the rank updates whole tensors),
// parallel/zero1.cc (each chunk's moments; two temporaries of the largest segment during its
// update), model/stage.cc (per activation slot: the tokens, the stage input and every block's
// output (N, C), each block's BlockActivations unless recomputed, and on the last stage the final
// norm, logits (N, V), targets and losses; once: the blocks' BlockScratch, the full-recompute
// workspace, dL/d(residual), and on the last stage dL/d(final norm) and dL/d(logits)) and
// parallel/stage_executor.cc (token and target inputs, the transfer buffers). N = B * T.
// Categories: weights, gradients, optimizer (moments and ZeRO-1 temporaries), activations
// (slots, scratch, recompute workspace), buffers (the rest).
StageMemory RuntimeRankMemory(const spec::ModelSpec& model, const RankTensorsInput& in);

// Bytes per device of one stage. Mixed bf16: 2 weights + 2 grads + 12 optimizer (4 master + 4 + 4
// moments), ZeRO-1 divides the 12 by dp (ZeRO paper, Rajbhandari et al. 2020); fp32: 4 + 4 + 8,
// ZeRO-1 divides the 8.
StageMemory StageMemoryPerDevice(const spec::ModelSpec& model, const StageMemoryInput& in,
                                 const PerfSettings& settings);

}  // namespace motley::perf
