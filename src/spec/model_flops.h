// FLOP counts of a Llama-style decoder (ModelSpec) per micro-batch, per iteration and per
// token, and MFU: the one count behind every MFU and GFLOP/s motley prints (the predictor's, the
// planner's references, and the trainers' measured ones) and the input of the roofline compute
// model. Counts multiply-adds as 2 FLOPs and covers the matmuls only (norms, RoPE, SwiGLU and
// softmax are memory-bound and timed by bytes).
//
// Letters: b micro-batch size (sequences), s sequence length, h hidden, F SwiGLU width, V
// vocabulary, a heads, L blocks. With F = 8h/3 and no grouped-query attention these counts equal
// the Megatron accounting 72*B*s*L*h^2*(1 + s/(6h) + V/(12*L*h)) per iteration (Korthikanti et al.
// 2022). Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "core/units.h"
#include "spec/model_spec.h"

namespace motley::spec {

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
  MatmulShape qkv;        // (b*s, h) x (h, (h + 2*kv_width)/tp)
  MatmulShape scores;     // per head (s, hs) x (hs, s), batch = b*a/tp
  MatmulShape context;    // per head (s, s) x (s, hs),  batch = b*a/tp
  MatmulShape out;        // (b*s, h/tp) x (h/tp, h)
  MatmulShape gate_up;    // (b*s, h) x (h, 2F/tp)
  MatmulShape down;       // (b*s, F/tp) x (F/tp, h)
  double head_batch = 1;  // b*a/tp: how many scores/context products run
};
BlockMatmuls BlockForwardMatmuls(const ModelSpec& model, int64_t b, int64_t s, int tp);

// Forward FLOPs of one whole block (all TP ranks together) for one micro-batch.
Flops BlockForwardFlops(const ModelSpec& model, int64_t b, int64_t s);
// The part of BlockForwardFlops that selective recompute repeats (the two attention products).
Flops AttentionScoreForwardFlops(const ModelSpec& model, int64_t b, int64_t s);
// Forward FLOPs of the LM head (logits) for one micro-batch; the embedding lookup has none.
Flops HeadForwardFlops(const ModelSpec& model, int64_t b, int64_t s);
// Model FLOPs of one training iteration over `global_batch` sequences: forward + backward (2x
// forward), no recompute counted (the MFU convention of Chowdhery et al. 2022).
Flops ModelFlopsPerIteration(const ModelSpec& model, int64_t global_batch, int64_t s);
// Model FLOPs per token (ModelFlopsPerIteration / (global_batch * s)). Equal to PaLM's 6 N + 12 L h
// s (Chowdhery et al. 2022, App. B) with N the parameters of the matmuls (blocks and LM head; the
// norms' weights do no matmul).
Flops ModelFlopsPerToken(const ModelSpec& model, int64_t s);
// Model FLOPs utilisation at a rate: flops_per_token * tokens_per_s / peak_flops_sum, the model
// FLOP/s achieved over the peak of the devices counted; 0 when the peak is not positive.
double Mfu(Flops flops_per_token, double tokens_per_s, FlopsPerSecond peak_flops_sum);

}  // namespace motley::spec
