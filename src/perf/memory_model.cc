// See memory_model.h.
#include "perf/memory_model.h"

#include "core/check.h"
#include "spec/plan_topology.h"

namespace motley::perf {

Bytes ActivationBytesPerBlock(const spec::ModelSpec& model, int64_t b, int64_t s, int tp,
                              spec::Recompute recompute, const PerfSettings& settings) {
  MOTLEY_CHECK(tp >= 1, "tp must be positive");
  const double sbh = static_cast<double>(s) * static_cast<double>(b) *
                     static_cast<double>(model.hidden);
  const double t = tp;
  const double scale16 = settings.precision == spec::Precision::kFp32 ? 2.0 : 1.0;
  const bool sp = settings.sequence_parallel && tp > 1;
  if (recompute == spec::Recompute::kFull) return scale16 * 2.0 * sbh / (sp ? t : 1.0);
  const bool score_term = recompute == spec::Recompute::kNone && !settings.flash_attention;
  const double score = score_term ? 5.0 * static_cast<double>(model.num_heads) *
                                        static_cast<double>(s) / static_cast<double>(model.hidden)
                                  : 0.0;
  if (tp == 1 || sp) return scale16 * sbh * (34.0 + score) / t;
  return scale16 * sbh * (10.0 + 24.0 / t + score / t);
}

StageMemory StageMemoryPerDevice(const spec::ModelSpec& model, const StageMemoryInput& in,
                                 const PerfSettings& settings) {
  MOTLEY_CHECK(in.dp_degree >= 1 && in.in_flight >= 0, "bad StageMemoryInput");
  // The tensors the runtime allocates (spec/plan_topology.h): block weights split over the TP
  // ranks; norms, embedding and head replicated on every one.
  const auto params = static_cast<double>(
      spec::StageParamsPerTpRank(model, in.num_blocks, in.has_embedding, in.has_head, in.tp));
  const bool fp32 = settings.precision == spec::Precision::kFp32;
  const double zero = in.sharding == spec::OptimizerSharding::kZero1
                          ? static_cast<double>(in.dp_degree)
                          : 1.0;
  StageMemory mem;
  mem.weights = params * (fp32 ? 4.0 : 2.0);
  mem.gradients = params * (fp32 ? 4.0 : 2.0);
  mem.optimizer = params * (fp32 ? 8.0 : 12.0) / zero;
  const Bytes per_block = ActivationBytesPerBlock(model, in.micro_batch_size, in.seq_len, in.tp,
                                                  in.recompute, settings);
  mem.activations = per_block * static_cast<double>(in.num_blocks * in.in_flight);
  if (in.recompute == spec::Recompute::kFull && in.num_blocks > 0) {
    // The backward recomputes one block at a time and holds its full activations meanwhile.
    mem.activations +=
        ActivationBytesPerBlock(model, in.micro_batch_size, in.seq_len, in.tp,
                                spec::Recompute::kNone, settings);
  }
  const double elem = ActivationElementBytes(settings);
  const double sbh = static_cast<double>(in.seq_len * in.micro_batch_size * model.hidden);
  if (in.has_embedding) mem.buffers += sbh * elem * static_cast<double>(in.in_flight);
  if (in.has_head) {
    // fp32 logits of one micro-batch over the whole vocabulary: the head is replicated on every
    // TP rank (model/stage.cc), not split by vocabulary as in Megatron.
    mem.buffers += 4.0 * static_cast<double>(in.seq_len * in.micro_batch_size) *
                   static_cast<double>(model.vocab_size);
  }
  return mem;
}

StageMemory RuntimeRankMemory(const spec::ModelSpec& model, const RankTensorsInput& in) {
  MOTLEY_CHECK(in.tp >= 1 && in.activation_slots >= 0 && in.transfer_buffers >= 0,
               "bad RankTensorsInput");
  constexpr double kElem = 4.0;  // f32 and i32
  const int64_t b = in.micro_batch_size, t = in.seq_len, n = b * t, c = model.hidden;
  const int64_t v = model.vocab_size;
  const int64_t hs = model.head_size();
  const int64_t nh = model.num_heads / in.tp, nkv = model.num_kv_heads / in.tp;
  const int64_t f = model.ffn_hidden / in.tp;
  const int64_t probabilities = b * nh * t * t;
  // model/block.h BlockActivations: ln1, x2, ln2 (N, C); rstd1, rstd2 (N); q, att_out (N, NH*HS);
  // k, v (N, NKV*HS); gate, up, h (N, F); the probabilities (B, NH, T, T) unless selective.
  const int64_t block_without_att =
      3 * n * c + 2 * n + 2 * n * nh * hs + 2 * n * nkv * hs + 3 * n * f;
  // BlockScratch: nc, dln (N, C); dh, dgate, dup (N, F); datt_out, dq, dq_pre (N, NH*HS);
  // dk, dv, dk_pre (N, NKV*HS); the stage's probabilities buffer under selective recompute.
  const int64_t scratch = 2 * n * c + 3 * n * f + 3 * n * nh * hs + 3 * n * nkv * hs;

  const auto params = static_cast<double>(
      spec::StageParamsPerTpRank(model, in.num_blocks, in.has_embedding, in.has_head, in.tp));
  StageMemory mem;
  mem.weights = kElem * params;
  mem.gradients = kElem * params;
  mem.optimizer = kElem * (2.0 * static_cast<double>(in.moment_elements) +
                           2.0 * static_cast<double>(in.zero1_segment));

  int64_t slot = (in.num_blocks + 1) * n * c;  // stage input and block outputs
  if (in.has_embedding) slot += n;              // tokens
  if (in.recompute == spec::Recompute::kNone) {
    slot += in.num_blocks * (block_without_att + probabilities);
  } else if (in.recompute == spec::Recompute::kSelective) {
    slot += in.num_blocks * block_without_att;
  }
  if (in.has_head) slot += n * c + n + n * v + n + n;  // lnf, rstdf, logits, targets, losses
  int64_t once = 0;
  if (in.num_blocks > 0) {
    once += scratch;
    if (in.recompute == spec::Recompute::kSelective) once += probabilities;
    if (in.recompute == spec::Recompute::kFull) once += block_without_att + probabilities;
  }
  mem.activations = kElem * static_cast<double>(in.activation_slots * slot + once);

  int64_t buffers = n * c;                         // dL/d(residual)
  if (in.has_head) buffers += n * c + n * v + n;   // dlnf, dlogits; executor targets
  if (in.has_embedding) buffers += n;              // executor tokens
  buffers += in.transfer_buffers * n * c;
  mem.buffers = kElem * static_cast<double>(buffers);
  return mem;
}

}  // namespace motley::perf
