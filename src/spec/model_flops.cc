// See model_flops.h.
#include "spec/model_flops.h"

#include "core/check.h"

namespace motley::spec {

BlockMatmuls BlockForwardMatmuls(const ModelSpec& model, int64_t b, int64_t s, int tp) {
  MOTLEY_CHECK(tp >= 1 && b >= 1 && s >= 1, "BlockForwardMatmuls needs positive b, s, tp");
  const double t = tp;
  const double tokens = static_cast<double>(b * s);
  const double h = static_cast<double>(model.hidden);
  const double hs = static_cast<double>(model.head_size());
  const double kv_width = static_cast<double>(model.num_kv_heads * model.head_size());
  const double ffn = static_cast<double>(model.ffn_hidden);
  BlockMatmuls mm;
  mm.qkv = {tokens, (h + 2.0 * kv_width) / t, h};
  mm.scores = {static_cast<double>(s), static_cast<double>(s), hs};
  mm.context = {static_cast<double>(s), hs, static_cast<double>(s)};
  mm.out = {tokens, h, h / t};
  mm.gate_up = {tokens, 2.0 * ffn / t, h};
  mm.down = {tokens, h, ffn / t};
  mm.head_batch = static_cast<double>(b) * static_cast<double>(model.num_heads) / t;
  return mm;
}

Flops BlockForwardFlops(const ModelSpec& model, int64_t b, int64_t s) {
  const BlockMatmuls mm = BlockForwardMatmuls(model, b, s, 1);
  return mm.qkv.flops() + mm.out.flops() + mm.gate_up.flops() + mm.down.flops() +
         mm.head_batch * (mm.scores.flops() + mm.context.flops());
}

Flops AttentionScoreForwardFlops(const ModelSpec& model, int64_t b, int64_t s) {
  const BlockMatmuls mm = BlockForwardMatmuls(model, b, s, 1);
  return mm.head_batch * (mm.scores.flops() + mm.context.flops());
}

Flops HeadForwardFlops(const ModelSpec& model, int64_t b, int64_t s) {
  return 2.0 * static_cast<double>(b * s) * static_cast<double>(model.hidden) *
         static_cast<double>(model.vocab_size);
}

Flops ModelFlopsPerIteration(const ModelSpec& model, int64_t global_batch, int64_t s) {
  const Flops forward = static_cast<double>(model.num_blocks) * BlockForwardFlops(model, 1, s) +
                        HeadForwardFlops(model, 1, s);
  return 3.0 * forward * static_cast<double>(global_batch);
}

Flops ModelFlopsPerToken(const ModelSpec& model, int64_t s) {
  return ModelFlopsPerIteration(model, 1, s) / static_cast<double>(s);
}

double Mfu(Flops flops_per_token, double tokens_per_s, FlopsPerSecond peak_flops_sum) {
  return peak_flops_sum > 0 ? flops_per_token * tokens_per_s / peak_flops_sum : 0.0;
}

}  // namespace motley::spec
