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

}  // namespace motley::perf
