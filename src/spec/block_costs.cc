// See block_costs.h. The order follows model/block.cc BlockForward.
#include "spec/block_costs.h"

namespace motley::spec::costs {

std::vector<OpCost> BlockForwardOps(const BlockShape& s) {
  const int64_t n = s.n();
  const int64_t q = s.nh * s.hs;
  const int64_t kv = s.nkv * s.hs;
  return {
      RmsNormForward(n, s.c),                         // ln1
      MatmulForward(n, s.c, q),                       // q_proj
      MatmulForward(n, s.c, kv),                      // k_proj
      MatmulForward(n, s.c, kv),                      // v_proj
      RopeForward(n * q),                             // RoPE(q)
      RopeForward(n * kv),                            // RoPE(k)
      AttentionForward(s.b, s.t, s.nh, s.nkv, s.hs),  // the attention core
      MatmulForward(n, q, s.c),                       // o_proj
      Add(n * s.c),                                   // x2 = x + attention branch
      RmsNormForward(n, s.c),                         // ln2
      MatmulForward(n, s.c, s.f),                     // gate_proj
      MatmulForward(n, s.c, s.f),                     // up_proj
      SwiGluForward(n * s.f),                         // silu(gate) * up
      MatmulForward(n, s.f, s.c),                     // down_proj
      Add(n * s.c),                                   // out = x2 + MLP branch
  };
}

std::vector<OpCost> BlockRecomputeOps(Recompute r, const BlockShape& s) {
  switch (r) {
    case Recompute::kNone: return {};
    case Recompute::kSelective: return {AttentionForward(s.b, s.t, s.nh, s.nkv, s.hs)};
    case Recompute::kFull: return BlockForwardOps(s);
  }
  return {};
}

OpCost Total(const std::vector<OpCost>& ops) {
  OpCost total;
  for (const OpCost& op : ops) total += op;
  return total;
}

}  // namespace motley::spec::costs
