// FLOP counts of a Llama-style decoder (spec::ModelSpec) per micro-batch and per iteration: the
// numerator of MFU and the input of the roofline compute model. Counts multiply-adds as 2 FLOPs and
// cover the matmuls only (norms, RoPE, SwiGLU and softmax are memory-bound and timed by bytes).
//
// Letters: b micro-batch size (sequences), s sequence length, h hidden, F SwiGLU width, V vocabulary,
// a heads, L blocks. With F = 8h/3 and no grouped-query attention these counts equal the Megatron
// accounting 72*B*s*L*h^2*(1 + s/(6h) + V/(12*L*h)) per iteration (Korthikanti et al. 2022).
// Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "core/units.h"
#include "spec/model_spec.h"

namespace motley::perf {

// One matmul C[M, N] = A[M, K] * B[K, N], counted as 2*M*N*K FLOPs.
struct MatmulShape {
  double m = 0;
  double n = 0;
  double k = 0;
  Flops flops() const { return 2.0 * m * n * k; }
};

// Forward matmuls of one block for one micro-batch on one of `tp` tensor-parallel ranks (weights
// split column/row-wise, heads split across ranks): q/k/v, scores Q*K^T, probabilities*V, output
// projection, gate+up, down. The two attention products are batched over b*a/tp heads.
struct BlockMatmuls {
  MatmulShape qkv;      // (b*s, h) x (h, (h + 2*kv_width)/tp)
  MatmulShape scores;   // per head (s, hs) x (hs, s), batch = b*a/tp
  MatmulShape context;  // per head (s, s) x (s, hs),  batch = b*a/tp
  MatmulShape out;      // (b*s, h/tp) x (h/tp, h)
  MatmulShape gate_up;  // (b*s, h) x (h, 2F/tp)
  MatmulShape down;     // (b*s, F/tp) x (F/tp, h)
  double head_batch = 1;  // b*a/tp: how many scores/context products run
};
BlockMatmuls BlockForwardMatmuls(const spec::ModelSpec& model, int64_t b, int64_t s, int tp);

// Forward FLOPs of one whole block (all TP ranks together) for one micro-batch.
Flops BlockForwardFlops(const spec::ModelSpec& model, int64_t b, int64_t s);
// The part of BlockForwardFlops that selective recompute repeats (the two attention products).
Flops AttentionScoreForwardFlops(const spec::ModelSpec& model, int64_t b, int64_t s);
// Forward FLOPs of the LM head (logits) for one micro-batch; the embedding lookup has none.
Flops HeadForwardFlops(const spec::ModelSpec& model, int64_t b, int64_t s);
// Model FLOPs of one training iteration over `global_batch` sequences: forward + backward (2x
// forward), no recompute counted (the MFU convention of Chowdhery et al. 2022).
Flops ModelFlopsPerIteration(const spec::ModelSpec& model, int64_t global_batch, int64_t s);
// Model FLOPs per token (ModelFlopsPerIteration / (global_batch * s)).
Flops ModelFlopsPerToken(const spec::ModelSpec& model, int64_t s);
// Model FLOPs utilisation: model_flops / (iteration_s * peak_flops_sum).
double Mfu(Flops model_flops, Seconds iteration_s, FlopsPerSecond peak_flops_sum);

}  // namespace motley::perf
