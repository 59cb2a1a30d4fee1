// ModelSpec: the shape of a Llama-style decoder (RMSNorm, RoPE, SwiGLU, optional grouped-query
// attention, untied embedding and LM head), plus the named presets. Plain value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace motley::spec {

struct ModelSpec {
  std::string name;           // preset name or user label
  int64_t num_blocks = 0;     // L
  int64_t hidden = 0;         // C
  int64_t num_heads = 0;      // NH
  int64_t num_kv_heads = 0;   // NKV (== NH without grouped-query attention)
  int64_t ffn_hidden = 0;     // F, SwiGLU width
  int64_t vocab_size = 0;     // V
  int64_t max_seq_len = 0;    // longest sequence the model is used with
  float rope_theta = 10000.0F;
  float norm_eps = 1e-5F;

  int64_t head_size() const { return hidden / num_heads; }  // HS
  // Parameters of one transformer block: q,k,v,o projections, gate/up/down, two RMSNorm weights.
  int64_t BlockParams() const;
  int64_t EmbeddingParams() const { return vocab_size * hidden; }
  // Final RMSNorm + LM head (untied).
  int64_t HeadParams() const { return hidden + vocab_size * hidden; }
  int64_t TotalParams() const;
  // Every block, the final norm and the LM head (the embedding is a lookup): the model size
  // `motley validate` and the serial trainer's summary print. The FLOP count (model_flops.h)
  // counts the matmul weights only, this less the norms.
  int64_t NonEmbeddingParams() const { return num_blocks * BlockParams() + HeadParams(); }
  // Whether Megatron TP of `degree` can split this model: degree >= 1 divides NH, NKV and F.
  bool SplitsForTensorParallel(int64_t degree) const {
    return degree >= 1 && num_heads % degree == 0 && num_kv_heads % degree == 0 &&
           ffn_hidden % degree == 0;
  }
};

// Structural checks (positive sizes, heads divide hidden, kv heads divide heads, even head size
// for RoPE). Errors are prefixed with `where` (e.g. "run.yaml: model").
Status ValidateModelSpec(const ModelSpec& model, std::string_view where);

// Presets: "tiny" (tests), "tiny-gqa", "small" (demo), "gpt2-124m", "llama2-7b", "llama2-13b",
// "llama2-70b", "llama-140b" (as trained by HETHUB). Unknown names list the known ones.
Result<ModelSpec> ModelPreset(std::string_view name);
std::vector<std::string> ModelPresetNames();

}  // namespace motley::spec
