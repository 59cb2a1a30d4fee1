// The cost table of every tensor::Backend op: the FLOPs it performs and the bytes of device memory
// it moves, written down in ONE place so that the emulated backend (backend/emulated) charges ops
// and the predictor's emulated compute model (perf/emulated_compute_model.h) counts them the same
// way. It lives in spec/ because both halves of the layering may use spec/ (and it needs only
// core/units.h). docs/architecture.md §6: an op takes
// max(flops / flop/s, bytes / memory bandwidth).
//
// Conventions:
// - FLOPs: one multiply-add is 2 FLOPs (matmul 2*N*C*OC, as in Kaplan et al. 2020 and llm.c).
//   Attention counts the full T x T square for QK^T and AV (4*B*NH*T*T*HS forward, twice that
//   backward), the PaLM convention (Chowdhery et al. 2022, App. B) that spec/model_flops uses for
//   its 12*L*C*T term. Elementwise ops count nominal FLOPs per element (written beside each entry);
//   a transcendental (exp, rsqrt) counts 1.
// - Bytes: each input read once, each output written once; an ACCUMULATED gradient (+=) is read
//   and written (2x). f32 and i32 elements are 4 bytes. Caches and re-reads are ignored, so the
//   figures are the minimal traffic of an ideal kernel.
// Shape letters: N rows, C in-channels, OC out-channels, B batch, T sequence, NH/NKV heads, HS head
// size, F SwiGLU width, V vocabulary, E elements. Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "core/units.h"

namespace motley::spec::costs {

struct OpCost {
  Flops flops = 0.0;
  Bytes bytes = 0.0;
  OpCost& operator+=(const OpCost& o) {
    flops += o.flops;
    bytes += o.bytes;
    return *this;
  }
};

// out (N, OC) = inp (N, C) @ weight (OC, C)^T
OpCost MatmulForward(int64_t n, int64_t c, int64_t oc);
// dinp (N, C) += dout @ weight: 2*N*C*OC; dweight (OC, C) += dout^T @ inp: 2*N*C*OC.
OpCost MatmulBackwardInput(int64_t n, int64_t c, int64_t oc);
OpCost MatmulBackwardWeight(int64_t n, int64_t c, int64_t oc);
// out (N, C) = wte (V, C) [tokens (N)]: a gather, no FLOPs.
OpCost EmbeddingForward(int64_t n, int64_t c);
// dwte rows += dout (N, C): N*C adds.
OpCost EmbeddingBackward(int64_t n, int64_t c);
// out (N, C), rstd (N): 4 FLOPs per element (square, sum, * rstd, * weight).
OpCost RmsNormForward(int64_t n, int64_t c);
// dinp (N, C) +=, dweight (C) +=: 8 FLOPs per element.
OpCost RmsNormBackward(int64_t n, int64_t c);
// E = B*T*H*HS elements: 3 FLOPs per element (x*cos +/- y*sin).
OpCost RopeForward(int64_t elements);
// dinp += rope^-1(dout): 4 FLOPs per element.
OpCost RopeBackward(int64_t elements);
// q (B, T, NH, HS), k/v (B, T, NKV, HS), out (B, T, NH, HS), att (B, NH, T, T).
OpCost AttentionForward(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs);
OpCost AttentionBackward(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs);
// out (N, F) = silu(gate) * up: 5 FLOPs per element (neg, exp, add, div, mul).
OpCost SwiGluForward(int64_t elements);
// dgate +=, dup +=: 10 FLOPs per element.
OpCost SwiGluBackward(int64_t elements);
// losses (N) from logits (N, V): 3 FLOPs per logit (max, exp, sum).
OpCost CrossEntropyForward(int64_t n, int64_t v);
// dlogits (N, V) += (softmax - onehot) * scale: 4 FLOPs per logit.
OpCost CrossEntropyBackward(int64_t n, int64_t v);
// Elementwise and reductions over E elements.
OpCost Add(int64_t elements);         // out = a + b: 1 FLOP, 3 accesses
OpCost AddInPlace(int64_t elements);  // a += b: 1 FLOP, 3 accesses
OpCost Scale(int64_t elements);       // a *= s: 1 FLOP, 2 accesses
OpCost SumSquares(int64_t elements);  // 2 FLOPs, 1 access
OpCost Sum(int64_t elements);         // 1 FLOP, 1 access
OpCost AdamW(int64_t elements);       // 12 FLOPs; reads p, g, m, v, writes p, m, v
// Memory ops on `bytes` bytes: write-only (SetZero, Fill, Zeros, host->device), read-only
// (device->host), read+write (Copy).
OpCost WriteBytes(double bytes);
OpCost ReadBytes(double bytes);
OpCost CopyBytes(double bytes);

}  // namespace motley::spec::costs
