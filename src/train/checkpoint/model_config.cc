// See model_config.h.
#include "train/checkpoint/model_config.h"

#include <cstdlib>
#include <functional>
#include <vector>

#include <fmt/core.h>

namespace motley::train {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// A float as the double of its shortest decimal form, so that 1e-5F is written 1e-05 and not
// 9.999999747378752e-06 (both read back to the same float).
double ShortestDouble(float f) {
  return std::strtod(fmt::format("{}", f).c_str(), nullptr);
}

// One compared field: motley's name, config.json's name, and the value as text.
struct Field {
  const char* name;
  const char* hf_name;
  std::function<std::string(const spec::ModelSpec&)> value;
};

const std::vector<Field>& ComparedFields() {
  static const std::vector<Field> kFields = {
      {"num_blocks", "num_hidden_layers",
       [](const auto& m) { return std::to_string(m.num_blocks); }},
      {"hidden", "hidden_size", [](const auto& m) { return std::to_string(m.hidden); }},
      {"num_heads", "num_attention_heads",
       [](const auto& m) { return std::to_string(m.num_heads); }},
      {"num_kv_heads", "num_key_value_heads",
       [](const auto& m) { return std::to_string(m.num_kv_heads); }},
      {"ffn_hidden", "intermediate_size",
       [](const auto& m) { return std::to_string(m.ffn_hidden); }},
      {"vocab_size", "vocab_size", [](const auto& m) { return std::to_string(m.vocab_size); }},
      {"rope_theta", "rope_theta", [](const auto& m) { return fmt::format("{}", m.rope_theta); }},
      {"norm_eps", "rms_norm_eps", [](const auto& m) { return fmt::format("{}", m.norm_eps); }},
  };
  return kFields;
}

// Typed reads of config.json fields; errors name the file and the field.
class HfFields {
 public:
  HfFields(const json& j, const std::string& path) : j_(j), path_(path) {}
  bool Has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  Status Int(const char* key, int64_t* out, bool required) const {
    if (!Has(key)) {
      if (!required) return Status::Ok();
      return Err(StatusCode::kInvalidArgument, "{}: field '{}' is missing", path_, key);
    }
    if (!j_[key].is_number_integer() || j_[key].get<int64_t>() <= 0) {
      return Err(StatusCode::kInvalidArgument, "{}: field '{}' must be a positive integer, got {}",
                 path_, key, j_[key].dump());
    }
    *out = j_[key].get<int64_t>();
    return Status::Ok();
  }
  Status Float(const char* key, float* out) const {
    if (!Has(key)) return Status::Ok();
    if (!j_[key].is_number() || j_[key].get<double>() <= 0) {
      return Err(StatusCode::kInvalidArgument, "{}: field '{}' must be a positive number, got {}",
                 path_, key, j_[key].dump());
    }
    *out = static_cast<float>(j_[key].get<double>());
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) const {
    if (!Has(key)) return Status::Ok();
    if (!j_[key].is_boolean()) {
      return Err(StatusCode::kInvalidArgument, "{}: field '{}' must be true or false, got {}",
                 path_, key, j_[key].dump());
    }
    *out = j_[key].get<bool>();
    return Status::Ok();
  }
  // An unsupported setting: "field 'x' is V: motley's model <reason>".
  Status Refuse(const char* key, const std::string& reason) const {
    return Err(StatusCode::kInvalidArgument,
               "{}: field '{}' is {}: motley's Llama model cannot express it ({})", path_, key,
               j_[key].dump(), reason);
  }
  const json& operator[](const char* key) const { return j_[key]; }

 private:
  const json& j_;
  const std::string& path_;
};

}  // namespace

ordered_json ModelConfigToJson(const spec::ModelSpec& m) {
  ordered_json j;
  j["name"] = m.name;
  j["num_blocks"] = m.num_blocks;
  j["hidden"] = m.hidden;
  j["num_heads"] = m.num_heads;
  j["num_kv_heads"] = m.num_kv_heads;
  j["ffn_hidden"] = m.ffn_hidden;
  j["vocab_size"] = m.vocab_size;
  j["max_seq_len"] = m.max_seq_len;
  j["rope_theta"] = ShortestDouble(m.rope_theta);
  j["norm_eps"] = ShortestDouble(m.norm_eps);
  return j;
}

Result<spec::ModelSpec> ModelConfigFromJson(const json& j, std::string_view where) {
  if (!j.is_object()) {
    return Err(StatusCode::kInvalidArgument, "{}: the config record is not an object", where);
  }
  spec::ModelSpec m;
  auto integer = [&](const char* key, int64_t* out) -> Status {
    if (!j.contains(key) || !j[key].is_number_integer()) {
      return Err(StatusCode::kInvalidArgument, "{}: model.{} is missing or not an integer", where,
                 key);
    }
    *out = j[key].get<int64_t>();
    return Status::Ok();
  };
  auto number = [&](const char* key, float* out) -> Status {
    if (!j.contains(key) || !j[key].is_number()) {
      return Err(StatusCode::kInvalidArgument, "{}: model.{} is missing or not a number", where,
                 key);
    }
    *out = static_cast<float>(j[key].get<double>());
    return Status::Ok();
  };
  if (j.contains("name") && j["name"].is_string()) m.name = j["name"].get<std::string>();
  MOTLEY_RETURN_IF_ERROR(integer("num_blocks", &m.num_blocks));
  MOTLEY_RETURN_IF_ERROR(integer("hidden", &m.hidden));
  MOTLEY_RETURN_IF_ERROR(integer("num_heads", &m.num_heads));
  MOTLEY_RETURN_IF_ERROR(integer("num_kv_heads", &m.num_kv_heads));
  MOTLEY_RETURN_IF_ERROR(integer("ffn_hidden", &m.ffn_hidden));
  MOTLEY_RETURN_IF_ERROR(integer("vocab_size", &m.vocab_size));
  MOTLEY_RETURN_IF_ERROR(integer("max_seq_len", &m.max_seq_len));
  MOTLEY_RETURN_IF_ERROR(number("rope_theta", &m.rope_theta));
  MOTLEY_RETURN_IF_ERROR(number("norm_eps", &m.norm_eps));
  return m;
}

ordered_json ModelToHfConfig(const spec::ModelSpec& m) {
  ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.hidden;
  j["intermediate_size"] = m.ffn_hidden;
  j["num_hidden_layers"] = m.num_blocks;
  j["num_attention_heads"] = m.num_heads;
  j["num_key_value_heads"] = m.num_kv_heads;
  j["head_dim"] = m.head_size();
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = m.max_seq_len;
  j["rms_norm_eps"] = ShortestDouble(m.norm_eps);
  j["rope_theta"] = ShortestDouble(m.rope_theta);
  j["rope_scaling"] = nullptr;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["mlp_bias"] = false;
  j["tie_word_embeddings"] = false;
  j["pretraining_tp"] = 1;
  j["initializer_range"] = 0.02;  // GPT-2 / llm.c's std, as motley initialises (model/init.h)
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  return j;
}

Result<HfModelConfig> ParseHfConfig(const std::string& text, const std::string& path,
                                    const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return Err(StatusCode::kInvalidArgument, "{}: not valid JSON: {}", path, e.what());
  }
  if (!j.is_object()) return Err(StatusCode::kInvalidArgument, "{}: not a JSON object", path);
  const HfFields f(j, path);
  if (!f.Has("model_type")) {
    return Err(StatusCode::kInvalidArgument,
               "{}: field 'model_type' is missing (motley reads Llama configs, \"llama\")", path);
  }
  if (f["model_type"] != "llama") return f.Refuse("model_type", "only \"llama\" is supported");
  if (f.Has("architectures")) {
    bool causal_lm = false;
    if (f["architectures"].is_array()) {
      for (const json& a : f["architectures"]) causal_lm = causal_lm || a == "LlamaForCausalLM";
    }
    if (!causal_lm) {
      return f.Refuse("architectures",
                      "only LlamaForCausalLM, the decoder with its LM head, is supported");
    }
  }
  if (f.Has("hidden_act") && f["hidden_act"] != "silu") {
    return f.Refuse("hidden_act", "its SwiGLU MLP uses silu");
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    bool bias = false;
    MOTLEY_RETURN_IF_ERROR(f.Bool(key, &bias));
    if (bias) return f.Refuse(key, "its projections have no biases");
  }
  if (f.Has("rope_scaling")) return f.Refuse("rope_scaling", "its RoPE has no scaling");
  if (f.Has("quantization_config")) {
    return f.Refuse("quantization_config", "it reads F32, BF16 and F16 weights only");
  }
  if (f.Has("attention_dropout") &&
      (!f["attention_dropout"].is_number() || f["attention_dropout"].get<double>() != 0.0)) {
    return f.Refuse("attention_dropout", "it has no dropout; set it to 0.0 to train without");
  }

  HfModelConfig out;
  spec::ModelSpec& m = out.model;
  m.name = name;
  m.norm_eps = 1e-6F;  // LlamaConfig's defaults
  m.rope_theta = 10000.0F;
  m.max_seq_len = 2048;
  MOTLEY_RETURN_IF_ERROR(f.Int("num_hidden_layers", &m.num_blocks, true));
  MOTLEY_RETURN_IF_ERROR(f.Int("hidden_size", &m.hidden, true));
  MOTLEY_RETURN_IF_ERROR(f.Int("num_attention_heads", &m.num_heads, true));
  m.num_kv_heads = m.num_heads;
  MOTLEY_RETURN_IF_ERROR(f.Int("num_key_value_heads", &m.num_kv_heads, false));
  MOTLEY_RETURN_IF_ERROR(f.Int("intermediate_size", &m.ffn_hidden, true));
  MOTLEY_RETURN_IF_ERROR(f.Int("vocab_size", &m.vocab_size, true));
  MOTLEY_RETURN_IF_ERROR(f.Int("max_position_embeddings", &m.max_seq_len, false));
  MOTLEY_RETURN_IF_ERROR(f.Float("rms_norm_eps", &m.norm_eps));
  MOTLEY_RETURN_IF_ERROR(f.Float("rope_theta", &m.rope_theta));
  MOTLEY_RETURN_IF_ERROR(f.Bool("tie_word_embeddings", &out.tied));
  if (f.Has("head_dim")) {
    int64_t head_dim = 0;
    MOTLEY_RETURN_IF_ERROR(f.Int("head_dim", &head_dim, false));
    if (m.num_heads > 0 && head_dim * m.num_heads != m.hidden) {
      return f.Refuse("head_dim", fmt::format("its head size is hidden_size / num_attention_heads "
                                              "= {} / {}",
                                              m.hidden, m.num_heads));
    }
  }
  if (f.Has("torch_dtype") && f["torch_dtype"].is_string()) {
    out.torch_dtype = f["torch_dtype"].get<std::string>();
  }
  Status valid = spec::ValidateModelSpec(m, path);
  if (!valid.ok()) return valid.WithCode(StatusCode::kInvalidArgument);
  return out;
}

Status CompareModelConfigs(const spec::ModelSpec& recorded, const spec::ModelSpec& run,
                           std::string_view source, bool hf_names) {
  std::string differences;
  int count = 0;
  for (const Field& field : ComparedFields()) {
    const std::string a = field.value(recorded);
    const std::string b = field.value(run);
    if (a == b) continue;
    const std::string name = hf_names ? fmt::format("{} (model.{})", field.hf_name, field.name)
                                      : fmt::format("model.{}", field.name);
    differences += fmt::format("{}{}: {} in the checkpoint, {} in the run's model",
                               count == 0 ? "" : "; ", name, a, b);
    ++count;
  }
  if (count == 0) return Status::Ok();
  return Err(StatusCode::kInvalidArgument,
             "{}: written for another model ({} field{} differ{}): {}; load it with a run file "
             "whose model matches",
             source, count, count == 1 ? "" : "s", count == 1 ? "s" : "", differences);
}

}  // namespace motley::train
