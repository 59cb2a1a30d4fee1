// The op inventory of one decoder block's forward and of what activation recompute adds to its
// backward, as lists of spec::costs::OpCost (op_costs.h) in the order model/block.cc issues the
// ops. backend/emulated charges exactly these ops when the block runs, so the emulated compute
// model of perf/ and the tests of the runtime's recompute count from the same list.
//
// Recompute (plan.h, Korthikanti et al. 2022): selective reruns the attention core (QK^T, softmax,
// the weighted sum of V: one AttentionForward) before the block's attention backward; full reruns
// the whole block forward (its TP all-reduces are communication, not backend ops) before the
// block's backward. TP ranks run their shard: pass the sharded head counts and F.
// Shape letters: B batch, T sequence, N = B*T, C hidden, NH/NKV heads, HS head size, F SwiGLU.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "spec/op_costs.h"
#include "spec/plan.h"

namespace motley::spec::costs {

// One block's shapes as one (TP) rank computes it.
struct BlockShape {
  int64_t b = 0, t = 0, c = 0, nh = 0, nkv = 0, hs = 0, f = 0;
  int64_t n() const { return b * t; }
};

// The block forward: attention half (RMSNorm, q/k/v matmuls, RoPE of q and k, attention, o_proj,
// residual add), then the MLP half (RMSNorm, gate/up matmuls, SwiGLU, down_proj, residual add).
std::vector<OpCost> BlockForwardOps(const BlockShape& s);

// The ops recompute `r` adds to one block's backward, per micro-batch: none for kNone, the
// attention core for kSelective, BlockForwardOps for kFull.
std::vector<OpCost> BlockRecomputeOps(Recompute r, const BlockShape& s);

// Sum of the FLOPs and bytes of a list.
OpCost Total(const std::vector<OpCost>& ops);

}  // namespace motley::spec::costs
