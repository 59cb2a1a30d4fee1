// The model configuration a checkpoint records, in two forms (docs/formats/checkpoint.md):
//  - the config record of the sidecar (checkpoint.json "model"): every spec::ModelSpec field under
//    the run file's names (num_blocks, hidden, num_heads, ...);
//  - config.json beside the weights, Hugging Face's LlamaConfig form (num_hidden_layers,
//    hidden_size, ...), so that transformers' from_pretrained reads a motley folder; and the same
//    file read from a Hugging Face folder, refusing any setting motley's model cannot express
//    (another activation, biases, RoPE scaling, a head size other than hidden / heads, dropout,
//    quantisation) with an error naming the field.
// CompareModelConfigs is the one check of "written for this model?": the fields that define the
// weights' shapes and the math (L, C, NH, NKV, F, V, rope_theta, norm_eps) must be equal; `name`
// and `max_seq_len` (a usage limit: RoPE has no learned positions) are not compared.
// Free functions over values; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "spec/model_spec.h"

namespace motley::train {

// The sidecar's config record.
nlohmann::ordered_json ModelConfigToJson(const spec::ModelSpec& model);
// Parses a config record; errors name `where` and the field.
Result<spec::ModelSpec> ModelConfigFromJson(const nlohmann::json& j, std::string_view where);

// config.json in Hugging Face's LlamaConfig form (untied embeddings, float32 weights).
nlohmann::ordered_json ModelToHfConfig(const spec::ModelSpec& model);

// What a Hugging Face config.json says.
struct HfModelConfig {
  spec::ModelSpec model;    // name: `name` given to the parser
  bool tied = false;        // tie_word_embeddings: lm_head.weight is model.embed_tokens.weight
  std::string torch_dtype;  // as written ("bfloat16", ...); empty when absent
};
// Parses config.json text (`path` names it in errors). Refuses, naming the field: a model_type
// other than "llama", architectures without LlamaForCausalLM, hidden_act other than "silu",
// attention_bias or mlp_bias true, rope_scaling set, head_dim other than hidden_size /
// num_attention_heads, attention_dropout other than 0, quantization_config; a missing or mistyped
// size; a model that fails spec::ValidateModelSpec. Defaults are LlamaConfig's
// (num_key_value_heads = num_attention_heads, rms_norm_eps 1e-6, rope_theta 10000,
// max_position_embeddings 2048, tie_word_embeddings false).
Result<HfModelConfig> ParseHfConfig(const std::string& text, const std::string& path,
                                    const std::string& name);

// Ok when `recorded` (what the checkpoint at `source` was written for) and `run` (the model it is
// loaded into) agree on every compared field; otherwise kInvalidArgument listing each differing
// field with both values, e.g. "model.num_blocks: 3 in the checkpoint, 2 in the run's model".
// With `hf_names`, each field is also named as config.json names it.
Status CompareModelConfigs(const spec::ModelSpec& recorded, const spec::ModelSpec& run,
                           std::string_view source, bool hf_names = false);

}  // namespace motley::train
